"""``server.exposition``: the families written without prometheus_client read back,
through its parser, as the same series; the WSGI answer gzips on request."""

from __future__ import annotations

import gzip
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from delayq.server.exposition import CONTENT_TYPE, Family, labels, render, wsgi_app

FAMILIES = [
    Family(
        "delayq_pending",
        "gauge",
        "Pending.",
        [(labels(topic="a"), 3), (labels(topic="b.c-d_0"), 0)],
    ),
    Family(
        "delayq_group_redelivered_total",
        "counter",
        "Again.",
        [(labels(topic="a", group="g1"), 7), (labels(topic="a", group="g2"), 0.5)],
    ),
    Family("delayq_empty", "gauge", "None yet.", []),
]


def _samples(text: str) -> dict[str, Any]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_rendered_families_parse_back_to_the_same_series_and_types() -> None:
    text = "".join(render(FAMILIES))
    assert _samples(text) == {
        ("delayq_pending", (("topic", "a"),)): 3,
        ("delayq_pending", (("topic", "b.c-d_0"),)): 0,
        ("delayq_group_redelivered_total", (("group", "g1"), ("topic", "a"))): 7,
        ("delayq_group_redelivered_total", (("group", "g2"), ("topic", "a"))): 0.5,
    }
    types = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert types == {
        "delayq_pending": "gauge",
        "delayq_group_redelivered": "counter",
        "delayq_empty": "gauge",
    }


def test_the_app_serves_the_registry_then_the_families_gzipped_when_asked() -> None:
    registry = CollectorRegistry()
    Counter("delayq_things", "Things.", registry=registry).inc(2)
    app = wsgi_app(registry, lambda: FAMILIES)
    for accept, unpack in (("", bytes), ("gzip, deflate", gzip.decompress)):
        got: dict[str, Any] = {}

        def start(status: str, headers: list[tuple[str, str]], got: dict[str, Any] = got) -> None:
            got.update(status=status, headers=dict(headers))

        body = b"".join(app({"HTTP_ACCEPT_ENCODING": accept}, start))
        assert got["status"] == "200 OK" and got["headers"]["Content-Type"] == CONTENT_TYPE
        assert int(got["headers"]["Content-Length"]) == len(body)
        samples = _samples(unpack(body).decode())
        assert samples[("delayq_things_total", ())] == 2
        assert samples[("delayq_pending", (("topic", "a"),))] == 3


def test_a_failing_family_leaves_the_rest_of_the_answer(caplog: Any) -> None:
    registry = CollectorRegistry()
    Counter("delayq_things", "Things.", registry=registry).inc()

    def broken() -> list[Family]:
        raise OSError("a ready index went away")

    got: dict[str, Any] = {}
    body = b"".join(wsgi_app(registry, broken)({}, lambda s, h: got.update(status=s)))
    assert got["status"] == "200 OK"
    samples = _samples(body.decode())
    assert samples[("delayq_things_total", ())] == 1
    assert not [k for k in samples if k[0].startswith("delayq_pending")]
    assert "per-topic and per-group series failed" in caplog.text
