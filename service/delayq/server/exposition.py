"""The /metrics answer: prometheus_client's text for the node's few series, and
the families with a series per topic or per (topic, group) written here.

Why two writers: prometheus_client formats each sample through its general
path (label-name validation, escaping, a tuple per sample), ~10 µs a series;
a node with 1,000 topics of 10 groups serves ~65,000 such series, which took a
second of CPU a scrape (``bench.scrape``). Their label values are topic and
group names, which ``argchecks`` limits to ``[A-Za-z0-9._-]``, so they need no
escaping, and their names and types are fixed: one f-string a series.

Format: Prometheus' text format 0.0.4 (what Prometheus accepts by default;
OpenMetrics is not offered), gzip when the scraper asks for it.
"""

from __future__ import annotations

import gzip
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import HistogramMetricFamily

from ..timers.memory.lateness import LatenessHistogram

__all__ = ["CONTENT_TYPE", "Family", "labels", "lateness_family", "render", "wsgi_app"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

log = logging.getLogger("delayq.server")


class Family(NamedTuple):
    """One family's series: ``name`` as exposed (a counter's with ``_total``),
    ``type`` (``gauge`` or ``counter``), and a (labels, value) row per series, the
    labels as ``labels`` writes them (made once, shared by the families of one
    key)."""

    name: str
    type: str
    help: str
    rows: list[tuple[str, float]]


def labels(**pairs: str) -> str:
    """``topic="a",group="g"``: label values must be names ``argchecks`` accepts."""
    return ",".join(f'{k}="{v}"' for k, v in pairs.items())


def lateness_family(name: str, doc: str, hist: LatenessHistogram) -> HistogramMetricFamily:
    """A lateness histogram of the engine's (ms buckets) as a family in seconds."""
    return HistogramMetricFamily(
        name,
        doc,
        buckets=[(_seconds(le), n) for le, n in hist.cumulative()],
        sum_value=hist.sum_ms / 1000,
    )


def _seconds(le_ms: str) -> str:
    """A bucket bound in ms as Prometheus writes one in seconds (``+Inf`` as is)."""
    return le_ms if le_ms == "+Inf" else repr(int(le_ms) / 1000)


def _number(v: float) -> str:
    return str(v) if type(v) is int else repr(float(v))


def render(families: Iterable[Family]) -> Iterator[str]:
    """The families in the text format, a chunk each."""
    for f in families:
        name = f.name
        lines = [f"{name}{{{text}}} {_number(n)}\n" for text, n in f.rows]
        yield f"# HELP {name} {f.help}\n# TYPE {name} {f.type}\n" + "".join(lines)


def wsgi_app(
    registry: CollectorRegistry, families: Callable[[], Iterable[Family]]
) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    """GET anything: ``registry``'s text, then ``families()``'s."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        try:
            bulk = "".join(render(families()))
        except Exception:  # the rest still answers: a node whose series all went stale
            log.exception("metrics: the per-topic and per-group series failed")
            bulk = ""  # would look down to every alert that reads them
        body = generate_latest(registry) + bulk.encode()
        headers = [("Content-Type", CONTENT_TYPE)]
        if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
            body = gzip.compress(body, compresslevel=1)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", [*headers, ("Content-Length", str(len(body)))])
        return [body]

    return app
