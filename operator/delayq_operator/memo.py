"""The operator's typed memo: its settings and the long-lived parts every handler
uses (I/O: it holds the Kubernetes client).

kopf hands each handler its own memo (a ``kopf.Memo``, copied per topic). Ours
is one value of it, under ``KEY``, shared by every copy: ``Memo.start`` fills
it once, from the startup handler (``handlers.configure``), with the
``Settings`` and API client ``delayq-operator`` put in kopf's memo (defaults and
the kubeconfig under ``kopf run -m delayq_operator.handlers``); handlers read
its typed fields through ``Memo.of``.
"""

from __future__ import annotations

import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf

from delayq.control.keeper import KeeperSettings
from delayq.tls import TlsConfig

from .certificates import CertSettings
from .issuer import Issuer
from .keepers import TopicKeepers
from .kube import Cluster, load_client
from .netpolicy import OperatorPods
from .spec import IMAGE_DEFAULT, TopicDefaults
from .statuswriter import StatusWriter

__all__ = ["API", "KEY", "SETTINGS", "Memo", "Settings", "TopicLocks"]

KEY = "delayq"
"""Where kopf's memo holds ours."""
SETTINGS = "settings"
"""Where ``delayq-operator`` puts its ``Settings`` in kopf's memo for the startup handler."""
API = "api"
"""Where it puts the API client it loaded (to exit at once without credentials)."""


@dataclass(frozen=True, kw_only=True)
class Settings:
    """``delayq-operator``'s flags (``main.parse_args``); defaults under ``kopf run``."""

    default_image: str = IMAGE_DEFAULT
    """The shard pods' image for topics without ``spec.image``."""
    push_allow: tuple[str, ...] = ()
    """CIDRs every topic's pods may push to though private, besides its
    ``spec.pushEgress.allow`` (``--push-allow``, the chart's ``operator.push.allow``)."""
    keeper_settings: KeeperSettings = field(default_factory=KeeperSettings)
    """The shard keepers' lease and probe interval."""
    admin_tls: TlsConfig | None = None
    """The client certificate for the admin API of topics with ``spec.tls.secretName``
    (None: such topics are refused)."""
    operator_pods: OperatorPods = field(default_factory=OperatorPods)
    """The operator's own pods, which the topics' NetworkPolicies admit."""
    cert_settings: CertSettings = field(default_factory=CertSettings)
    """The lifetimes of the certificates the operator's CA issues."""
    certs_dir: Path = field(
        default_factory=lambda: Path(tempfile.gettempdir()) / "delayq-operator-certs"
    )
    """Where the keepers' client certificates are written."""

    @property
    def topic_defaults(self) -> TopicDefaults:
        """What a topic's spec leaves to these settings."""
        return TopicDefaults(image=self.default_image, push_allow=self.push_allow)


class TopicLocks:
    """One writer of a topic's status and shard map at a time (handlers, daemons
    and keepers run in threads). Thread-safe."""

    def __init__(self) -> None:
        self._guard = threading.Lock()  # guards the dict only, never held while a lock is
        self._locks: dict[tuple[str, str], threading.RLock] = {}

    def __call__(self, namespace: str, name: str) -> threading.RLock:
        with self._guard:
            return self._locks.setdefault((namespace, name), threading.RLock())


@dataclass(kw_only=True)
class Memo:
    settings: Settings
    cluster: Cluster
    issuer: Issuer
    locks: TopicLocks
    status: StatusWriter
    """The one writer of the topics' status."""
    keepers: dict[tuple[str, str], TopicKeepers]
    """Each running topic daemon's keepers, by (namespace, name)."""

    @classmethod
    def start(cls, memo: kopf.Memo) -> Memo:
        """Fill kopf's ``memo`` with ours (once: the startup handler's)."""
        settings: Settings = memo.get(SETTINGS) or Settings()
        cluster = Cluster(memo.get(API) or load_client())
        locks = TopicLocks()
        keepers: dict[tuple[str, str], TopicKeepers] = {}

        def lag(namespace: str, name: str, shard: int) -> tuple[int, int]:
            running = keepers.get((namespace, name))
            return running.lag(shard) if running else (0, 0)

        ours = cls(
            settings=settings,
            cluster=cluster,
            issuer=Issuer(cluster, settings.cert_settings, settings.certs_dir),
            locks=locks,
            status=StatusWriter(cluster, locks, lag),
            keepers=keepers,
        )
        memo[KEY] = ours
        return ours

    @staticmethod
    def of(memo: Any) -> Memo:
        """Ours, from the memo kopf hands a handler."""
        ours = memo.get(KEY)
        if not isinstance(ours, Memo):
            raise TypeError(f"kopf's memo holds {ours!r}: the startup handler fills it first")
        return ours
