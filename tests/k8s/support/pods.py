"""The local kubelet's pods (``kubelet.py``): what it keeps of a pod and of each
of its containers (``PodRuntime``, ``Container``), the node it plays, and its
pure rules: ``$(VAR)`` expansion, ``fieldRef`` values, the restart policy, the
pod's phase, the image's user, and the one translation (the pod's addresses
are its IP)."""

from __future__ import annotations

import datetime
import ipaddress
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

NODE = "local-node-0"
NODE_LABEL = "delayq.io/local-processes"
NODE_IP = "127.0.0.1"
POD_CIDR = ipaddress.ip_network("127.1.0.0/16")
ROOT = Path(__file__).resolve().parents[3]
PODINIT = Path(__file__).with_name("podinit.py")
VENV_BIN = Path(sys.executable).parent

_ANY_ADDRESS = re.compile(r"(?<![\w.:\]])(?:0\.0\.0\.0|\[::\]):(\d+)\b")
_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion: a defined VAR is replaced, an undefined
    one left as written, ``$$`` is a literal ``$``."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env.get(name, m.group(0))

    return _VAR.sub(sub, text)


def restarts(policy: str, code: int) -> bool:
    """Whether a container that exited with ``code`` is started again under the
    pod's ``restartPolicy`` (default ``Always``)."""
    if policy == "Never":
        return False
    return policy != "OnFailure" or code != 0


def pod_phase(started: bool, terminated: list[dict[str, Any] | None]) -> str:
    """The pod's phase from its containers: ``terminated`` holds each one's final
    state (None while it runs or will run again)."""
    if terminated and all(t is not None for t in terminated):
        return "Succeeded" if all(t and t["exitCode"] == 0 for t in terminated) else "Failed"
    return "Running" if started else "Pending"


def with_entry(text: str, entry: str) -> str:
    """A passwd or group file's ``text`` with ``entry`` added, unless its name or
    id is taken."""
    name, _, ident = entry.split(":")[:3]
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) > 2 and (fields[0] == name or fields[2] == ident):
            return text
    return text.rstrip("\n") + "\n" + entry + "\n"


def bind_pod_ip(text: str, ip: str) -> str:
    """The one translation: all of the pod's addresses (0.0.0.0 or [::]) is its IP."""
    return _ANY_ADDRESS.sub(lambda m: f"{ip}:{m.group(1)}", text)


class ContainerConfigError(Exception):
    """The container cannot be configured (the kubelet's CreateContainerConfigError)."""


class NotYet(Exception):
    """A volume is not ready yet (the kubelet waits: ContainerCreating)."""


class ImageError(Exception):
    """An image the local kubelet cannot run (ErrImagePull)."""


def field_ref(pod: dict[str, Any], path: str, ip: str) -> str:
    meta, spec = pod["metadata"], pod["spec"]
    simple = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta["uid"],
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": ip,
        "status.podIPs": ip,
        "status.hostIP": NODE_IP,
        "status.hostIPs": NODE_IP,
    }
    if path in simple:
        return str(simple[path])
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    raise ContainerConfigError(f"fieldRef {path} is not supported by the local kubelet")


@dataclass
class Container:
    spec: dict[str, Any]
    log_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    started_at: str = ""
    started_mono: float = 0.0
    restarts: int = 0
    backoff_s: float = 0.0
    next_start: float = 0.0
    last_terminated: dict[str, Any] | None = None
    terminated: dict[str, Any] | None = None
    """Its final state: it exited and the restart policy does not restart it."""
    waiting: dict[str, str] | None = None
    ready: bool = False
    channel: grpc.Channel | None = None
    probed_at: float = 0.0

    @property
    def name(self) -> str:
        return str(self.spec["name"])


@dataclass
class PodRuntime:
    pod: dict[str, Any]
    ip: str
    root: Path
    started: str
    containers: list[Container] = field(default_factory=list)
    term_sent: float | None = None
    last_status: str = ""
    api_volumes: dict[str, str] = field(default_factory=dict)  # ConfigMap/Secret: hash
    volumes_at: float = 0.0  # when its ConfigMap and Secret volumes were last synced

    @property
    def key(self) -> str:
        m = self.pod["metadata"]
        return f"{m['namespace']}/{m['name']}"
