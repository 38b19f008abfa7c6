"""Certificates for DelayTopics with ``spec.tls`` in the Kubernetes tests, made the
way an operator of the cluster would with cert-manager: one CA; per topic a
Secret (``tls.crt``, ``tls.key``, ``ca.crt``) whose certificate names the pods
through their headless Services and the topic's Services, for server and client
use; and the operator's client certificate of the same CA."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from delayq.cluster.certs import Issued, issue, new_ca

__all__ = ["DelayqCa"]


@dataclass(frozen=True)
class DelayqCa:
    ca: Issued
    dir: Path

    @classmethod
    def make(cls, dir: Path) -> DelayqCa:
        dir.mkdir(parents=True, exist_ok=True)
        ca = new_ca("delayq test CA")
        (dir / "ca.crt").write_bytes(ca.cert)
        issue(ca, "delayq-operator", client=True).write(dir / "operator.crt", dir / "operator.key")
        return cls(ca, dir)

    def operator_args(self) -> list[str]:
        return [
            "--tls-cert", str(self.dir / "operator.crt"),
            "--tls-key", str(self.dir / "operator.key"),
            "--tls-ca", str(self.dir / "ca.crt"),
        ]  # fmt: skip

    def client_env(self) -> dict[str, str]:
        """``DELAYQ_TLS_*`` of a client that verifies the pods and shows no certificate."""
        return {"DELAYQ_TLS_CA": str(self.dir / "ca.crt")}

    def topic_secret(
        self, name: str, topic: str, namespace: str, shards: int, *, ca: Issued | None = None
    ) -> dict[str, Any]:
        """The Secret ``name`` for ``topic``'s pods (``ca``: sign with another CA)."""
        signer = ca or self.ca
        hosts = [f"*.{topic}-shard-{i}-pods.{namespace}.svc" for i in range(shards)]
        hosts.append(f"*.{namespace}.svc")  # the topic's Services (the jobs' server)
        node = issue(signer, f"{topic}.{namespace}", hosts=hosts, server=True, client=True)
        data = {"tls.crt": node.cert, "tls.key": node.key, "ca.crt": signer.cert}
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": name},
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        }
