"""The handlers without a cluster: the reconcile handler's reading of the shard map
that exists, and a refusal written through the status writer (a stub cluster
that answers reads and records writes)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient

from delayq_operator import handlers
from delayq_operator.memo import API, KEY, SETTINGS, Memo, Settings, TopicLocks
from delayq_operator.reconciling import NO_CLIENT_CERT
from delayq_operator.statuswriter import StatusWriter


class StubCluster:
    """Answers ``config_map_data`` from a dict of ConfigMaps and ``get_topic`` with
    ``topic``; records status patches."""

    def __init__(
        self, config_maps: dict[str, dict[str, str]], topic: dict[str, Any] | None = None
    ) -> None:
        self.config_maps = config_maps
        self.topic = topic
        self.patches: list[dict[str, Any]] = []

    def get_topic(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.topic

    def shard_views(self, namespace: str, name: str) -> list[Any]:
        return []

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.patches.append(status)

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
    warnings: list[dict[str, Any]] = []
    monkeypatch.setattr(handlers.kopf, "warn", lambda body, **kw: warnings.append(kw))
    body = {
        "metadata": {"name": "orders", "namespace": "prod", "uid": "u", "generation": 4},
        "spec": {"tls": {"secretName": "orders-tls"}},
    }
    cluster: Any = StubCluster({}, topic=body)
    locks = TopicLocks()
    ours = Memo(
        settings=Settings(),  # no --tls-cert
        cluster=cluster,
        issuer=None,  # type: ignore[arg-type]
        locks=locks,
        status=StatusWriter(cluster, locks, lambda *_: (0, 0)),
        keepers={},
    )
    memo = handlers.kopf.Memo({KEY: ours})
    with pytest.raises(handlers.kopf.PermanentError, match="no client certificate"):
        handlers.reconcile(body=body, memo=memo, logger=handlers.logging.getLogger("t"))
    assert [w["reason"] for w in warnings] == ["NoClientCertificate"]
    (status,) = cluster.patches
    assert (status["phase"], status["observedGeneration"]) == ("Failed", 4)
    (reconciled,) = [c for c in status["conditions"] if c["type"] == "Reconciled"]
    assert (reconciled["status"], reconciled["reason"]) == ("False", "NoClientCertificate")
    assert reconciled["message"] == NO_CLIENT_CERT
    assert "topologyEpoch" not in status, "a refusal writes no map"


def test_the_startup_handler_fills_the_memo_once_and_every_topics_copy_shares_it() -> None:
    settings = Settings(default_image="delayq:test", certs_dir=Path("/nonexistent/certs"))
    memo = handlers.kopf.Memo({SETTINGS: settings, API: ApiClient()})
    with pytest.raises(TypeError, match="the startup handler fills it first"):
        Memo.of(memo)
    ours = Memo.start(memo)
    assert Memo.of(memo) is ours
    assert Memo.of(copy.copy(memo)) is ours, "kopf copies its memo per topic: ours is shared"
    assert ours.settings is settings
    assert (ours.issuer.settings, ours.issuer.files) == (settings.cert_settings, settings.certs_dir)
    assert ours.issuer.cluster is ours.cluster
