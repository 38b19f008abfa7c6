"""The reconcile handler's reading of the shard map that exists (a stub cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from delayq_operator import handlers


class StubCluster:
    """Answers ``config_map_data`` from a dict of ConfigMaps."""

    def __init__(self, config_maps: dict[str, dict[str, str]]) -> None:
        self.config_maps = config_maps

    def config_map_data(self, namespace: str, name: str) -> dict[str, str] | None:
        assert namespace == "prod"
        return self.config_maps.get(name)


MAP = '{"topology_epoch": 5, "topic": "orders", "shards": [{"index": 0, "master": "a:1"}]}'


def current(
    config_maps: dict[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, list[dict[str, Any]]]:
    warnings: list[dict[str, Any]] = []
    monkeypatch.setattr(handlers.kopf, "warn", lambda body, **kw: warnings.append(kw))
    cluster: Any = StubCluster(config_maps)
    return handlers._current_map(cluster, {}, "prod", "orders"), warnings


def test_no_config_map_or_no_key_is_a_new_map(monkeypatch: pytest.MonkeyPatch) -> None:
    assert current({}, monkeypatch) == (None, [])
    assert current({"orders-shard-map": {}}, monkeypatch) == (None, [])


def test_the_existing_map_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    got, warnings = current({"orders-shard-map": {"shards.json": MAP}}, monkeypatch)
    assert (got.topology_epoch, got.masters(), warnings) == (5, ("a:1",), [])


def test_an_unreadable_map_is_reported_and_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    bad = MAP.replace('"master"', '"mastr"')
    got, warnings = current({"orders-shard-map": {"shards.json": bad}}, monkeypatch)
    assert got is None
    (warning,) = warnings
    assert warning["reason"] == "ShardMapUnreadable"
    assert warning["message"].startswith("orders-shard-map: shards.json: shards[0]: unknown key")


def test_a_tls_topic_is_refused_while_the_operator_has_no_client_certificate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refused: list[tuple[str, str]] = []

    def refuse(memo: Any, body: Any, reason: str, message: str, generation: int) -> None:
        refused.append((reason, message))
        raise handlers.kopf.PermanentError(message)

    monkeypatch.setattr(handlers, "_refuse", refuse)
    body = {
        "metadata": {"name": "orders", "namespace": "prod", "uid": "u", "generation": 1},
        "spec": {"tls": {"secretName": "orders-tls"}},
    }
    memo = handlers.kopf.Memo(default_image="delayq:0.1.0", admin_tls=None, cluster=None)
    with pytest.raises(handlers.kopf.PermanentError):
        handlers.reconcile(body=body, memo=memo, logger=handlers.logging.getLogger("t"))
    assert refused == [("NoClientCertificate", handlers.NO_CLIENT_CERT)]
    assert refused[0][1].startswith("spec.tls.secretName: the operator has no client certificate")
