"""A shard keeper's probes (``Probes``): what it knows of each node and the
``Status`` round that refreshes it.

Every round sends each node a ``Status`` carrying the recorded epoch, the lease
and in-sync set, and the token of that node's latest answer (so the probe grants
a lease counted from that answer: ``failover``'s notes, "Leases"); answers are
noted at their *receipt* time (``views.Watch.observe``). A request is never
retried within a round: a node that did not answer in time is unreachable for
that round. One keeper thread owns it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from .admin import Admin, status_request
from .record import ShardRecord
from .views import Answer, Watch, answers_of

__all__ = ["Probes"]


class Probes:
    def __init__(
        self,
        nodes: Sequence[tuple[str, str]],
        admin: Admin,
        *,
        timeout_ms: int,
        lease_ms: int,
        clock_ms: Callable[[], int],
    ) -> None:
        """``nodes``: (name, address) of each node of the shard, in node order."""
        self.admin = admin
        self._timeout_s = timeout_ms / 1000
        self._lease_ms = lease_ms
        self._clock = clock_ms
        now = clock_ms()
        self.watches = {
            name: Watch(name=name, address=address, seen_ms=now, in_ms=now)
            for name, address in nodes
        }

    def round(self, rec: ShardRecord) -> int:
        """Probe every node at once; the time the probes were sent."""
        requests = {
            name: status_request(rec.epoch, self._lease_ms, rec.insync, w.lease_token)
            for name, w in self.watches.items()
        }
        sent = self._clock()
        answers = self.admin.statuses(requests, self._timeout_s)
        got = self._clock()
        for name, w in self.watches.items():
            w.observe(answers.get(name), got)
        return sent

    def tell(self, name: str, rec: ShardRecord, insync: frozenset[str]) -> Answer | None:
        """Probe node ``name`` alone with in-sync set ``insync`` (the master, told a
        smaller set before it is recorded); its answer (None: none in time)."""
        w = self.watches[name]
        request = status_request(rec.epoch, self._lease_ms, insync, w.lease_token)
        told = self.admin.statuses({name: request}, self._timeout_s).get(name)
        w.observe(told, self._clock())
        return told

    def answer(self, name: str) -> Answer | None:
        """Node ``name``'s answer to the last probe (None: none)."""
        return self.watches[name].answer

    def answers(self) -> Mapping[str, Answer | None]:
        return answers_of(self.watches.values())

    def up(self, name: str) -> bool:
        """Node ``name`` answered the last probe and is not recovering."""
        return self.watches[name].up

    def address(self, name: str) -> str:
        return self.watches[name].address

    def in_sync_since(self, ms: int, names: Sequence[str] | None = None) -> None:
        """Count ``names`` (every node when None) as in sync with the master as of
        ``ms``: when there is no master to be in touch with, or a new one begins."""
        for name in self.watches if names is None else names:
            self.watches[name].in_ms = ms
