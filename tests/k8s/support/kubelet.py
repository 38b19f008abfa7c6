"""A local kubelet for the Kubernetes tests: the pods scheduled to one node run
as real local processes.

``LocalKubelet`` registers the node ``local-node-0`` (label
``delayq.io/local-processes=true``, a NoSchedule taint of the same key: only
pods that ask for it land there) and then does for the node's pods what a
kubelet does, through the real API server:

- the node: Ready, capacity, a Lease renewed every 5 s (the node lifecycle
  controller would otherwise mark it unreachable and evict its pods);
- a pod bound to the node gets an IP from 127.1.0.0/16 (Linux serves all of
  127.0.0.0/8 locally, so the process can bind it), phase Running, and its
  containers started: the container's ``command`` or the image's entrypoint
  (``delayq``, as in the Dockerfile), ``args`` or the image's CMD, env with
  ``fieldRef`` (metadata.name/namespace/uid/labels/annotations, spec.nodeName,
  spec.serviceAccountName, status.podIP/hostIP), ``configMapKeyRef`` and
  ``secretKeyRef`` values (a Secret's decoded; ``optional`` honoured; read
  once, at the start) and ``$(VAR)`` expansion in env, command and args, as the
  kubelet does. The image ``delayq:*`` is this checkout: the venv's console
  scripts on PATH and the source tree on PYTHONPATH; any other image fails to
  pull;
- each container runs in its own mount namespace, chrooted into a tmpfs
  mirror of the host (``podinit.py``): its volumes are bind-mounted at their
  real ``mountPath`` (a PVC: the bound PersistentVolume's hostPath, so a
  recreated pod finds its data; a ConfigMap or a Secret: its keys, a Secret's
  base64-decoded, ``items`` if given, written under the pod's directory the
  kubelet's way, a ``..data`` symlink swapped when the object changes (read
  again every second), so an update (a rotated certificate) reaches the
  running container, each file
  ``defaultMode`` (0644) or its item's ``mode``, and with ``fsGroup``
  group-owned and ``ug+r`` as the kubelet makes them, so a non-root user in the
  fsGroup reads a 0440 key; always mounted read-only; one whose object (or an
  item's key) does not exist holds the pod's containers back, waiting
  ``ContainerCreating``, until it appears, unless ``optional``: then it is
  empty; an emptyDir: a directory of the pod), ``readOnly`` mounts and
  ``readOnlyRootFilesystem`` are read-only, ``fsGroup`` owns PVCs and
  emptyDirs (``OnRootMismatch`` honoured), the process runs as ``runAsUser`` /
  ``runAsGroup`` with the fsGroup and supplemental groups, and /etc/hosts is
  the cluster's DNS (below); /etc/passwd and /etc/group are the host's with
  the image's user and group added (``delayq``, 10001, as the Dockerfile makes
  them: a JVM, Spark's, needs a name for its uid). No path is rewritten;
- readiness: a ``grpc`` readiness probe (grpc.health.v1 Check on pod IP and
  port), an ``httpGet`` one (GET ``scheme://<pod IP or host>:<port><path>``,
  ``port`` a number or the name of a container port, with ``httpHeaders``;
  HTTPS without verifying the certificate, as the kubelet; a status from 200
  to 399 is ready, a redirect is not followed), each with a 1 s timeout, or,
  without one, a live process, decides the container's ``ready`` and the
  pod's Ready and ContainersReady conditions;
- a container that exits is restarted as the pod's ``restartPolicy`` says
  (``Always``: every exit; ``OnFailure``: a non-zero exit; ``Never``: none)
  with the kubelet's back-off (10 s, doubling, at most 300 s),
  ``restartCount`` counts it, ``lastState.terminated`` has its exit code and,
  with ``terminationMessagePolicy: FallbackToLogsOnError``, the last lines of
  its log (at most 80 lines / 2048 bytes, as the kubelet); while it waits the
  state is ``waiting: CrashLoopBackOff``. One that is not restarted stays
  ``state.terminated`` (same fields), and once every container has, the pod's
  phase is ``Succeeded`` (all exited 0) or ``Failed``: what the Job controller
  counts;
- a pod deleted gracefully gets SIGTERM, then SIGKILL once its grace period
  (``deletionGracePeriodSeconds``) is over, and is then removed (delete with
  grace 0, as the kubelet does); a pod that vanished at once (force delete) is
  SIGKILLed.

The cluster's DNS: one hosts file, bound on /etc/hosts in every container
(and given to ``run_in_cluster``): ``<pod>.<subdomain>.<ns>.svc[.cluster.local]``
for the node's pods (a StatefulSet pod's hostname and its headless Service),
and ``<service>.<ns>.svc[.cluster.local]`` for the Services of namespaces with
pods here, naming the pods their selector picks that are ready (or all, with
``publishNotReadyAddresses``), as the endpoint-slice controller would: it
cannot here, because the API server refuses loopback addresses in
EndpointSlices (so they stay empty). There is no kube-proxy: a Service name
resolves to its endpoints' IPs, not to a ClusterIP.

The one translation: a pod has its own network namespace, here all share the
host's. So an address ``0.0.0.0:PORT`` or ``[::]:PORT`` (all of the pod's
addresses) in args or env becomes ``<pod IP>:PORT`` after expansion; nothing
else is changed. (Two pods listening on 127.0.0.1 would clash here; none does.)

Not done: liveness and startup probes (a container that hangs stays),
``exec`` and ``tcpSocket`` readiness probes (a live process counts as ready);
probes run every second with a 1 s timeout whatever ``periodSeconds`` and
``timeoutSeconds`` say, from the start (no ``initialDelaySeconds``), and each
result decides (no ``failureThreshold`` / ``successThreshold``); init
containers, downward-API and projected volumes, ``envFrom``, ``subPath``,
Secret volumes on a tmpfs (they are files in the run's directory),
service-link env vars, resource limits, port-forward, logs and exec through
the API. It needs root (mount namespaces, chroot, setuid): the fixture says so
when it is not.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import http.client
import ipaddress
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch
from kubernetes.client.rest import ApiException

from tests.k8s.support.fakenodes import delete_now, renew_lease

NODE = "local-node-0"
NODE_LABEL = "delayq.io/local-processes"
NODE_IP = "127.0.0.1"
POD_CIDR = ipaddress.ip_network("127.1.0.0/16")
ROOT = Path(__file__).resolve().parents[3]
PODINIT = Path(__file__).with_name("podinit.py")
VENV_BIN = Path(sys.executable).parent
# The Dockerfile's ENTRYPOINT and CMD.
IMAGE_ENTRYPOINT = ["delayq"]
IMAGE_CMD = ["serve", "--data-dir", "/data", "--listen", "0.0.0.0:7420",
             "--metrics-listen", "0.0.0.0:7421"]  # fmt: skip
IMAGE_PREFIX = "delayq:"
# The image's user and group (Dockerfile: useradd --uid 10001 delayq).
IMAGE_USER = "delayq:x:10001:10001::/home/delayq:/bin/sh"
IMAGE_GROUP = "delayq:x:10001:"
BACKOFF_S, BACKOFF_MAX_S, BACKOFF_RESET_S = 10.0, 300.0, 600.0
MESSAGE_LINES, MESSAGE_BYTES = 80, 2048
TICK_S = 0.2
PROBE_S = 1.0
PROBE_TIMEOUT_S = 1.0
LEASE_S = 5.0
STATUS_S = 20.0
VOLUME_SYNC_S = 1.0
"""How often a running pod's ConfigMap and Secret volumes are read again (a real
kubelet: within its sync period, up to a minute or so)."""

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


def probe_port(container: dict[str, Any], port: int | str) -> int | None:
    """An httpGet probe's ``port``: a number, or the name of one of the
    container's ``ports`` (None when it has no such port: the probe fails)."""
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    return None


def http_probe(probe: dict[str, Any], container: dict[str, Any], ip: str) -> bool:
    """The kubelet's httpGet probe: GET ``scheme://host:port/path`` (host the pod
    IP unless given) with its headers and a 1 s timeout; success is a status
    from 200 to 399 (a redirect is not followed). HTTPS does not verify the
    certificate, as the kubelet does not."""
    port = probe_port(container, probe.get("port", ""))
    if port is None:
        return False
    host = probe.get("host") or ip
    headers = {"User-Agent": "kube-probe/local", "Accept": "*/*"}
    headers.update({h["name"]: h["value"] for h in probe.get("httpHeaders") or []})
    conn: http.client.HTTPConnection
    if str(probe.get("scheme", "HTTP")).upper() == "HTTPS":
        insecure = ssl.create_default_context()
        insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
        conn = http.client.HTTPSConnection(host, port, timeout=PROBE_TIMEOUT_S, context=insecure)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=PROBE_TIMEOUT_S)
    try:
        conn.request("GET", probe.get("path") or "/", headers=headers)
        resp = conn.getresponse()
        resp.read(10 * 1024)
        return 200 <= resp.status < 400
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


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


class LocalKubelet:
    """Start with :meth:`start`, stop with :meth:`stop` (SIGKILLs what runs)."""

    def __init__(self, kubeconfig: Path, root: Path) -> None:
        self.root = root
        self.hosts = root / "hosts"
        self.api = k8s_config.new_client_from_config(config_file=str(kubeconfig))
        self.core = k8s.CoreV1Api(self.api)
        self.coord = k8s.CoordinationV1Api(self.api)
        self.pods: dict[str, PodRuntime] = {}  # by uid
        self._next_ip = int(POD_CIDR.network_address) + 1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watcher: threading.Thread | None = None
        self._bound: dict[str, dict[str, Any]] | None = None  # uid -> pod; None: not listed yet
        self._bound_lock = threading.Lock()
        self._lease_at = 0.0
        self._status_at = 0.0
        self._dns_at = 0.0
        self._hosts_text = ""
        self.errors: list[str] = []

    # ---- lifecycle -----------------------------------------------------------

    def start(self) -> LocalKubelet:
        if os.geteuid() != 0:
            raise RuntimeError(
                "the local kubelet needs root (mount namespaces, chroot and setuid "
                "to run pods as their securityContext says)"
            )
        self.root.mkdir(parents=True, exist_ok=True)
        self._write_hosts(self._hosts_body([]))
        for name, entry in (("passwd", IMAGE_USER), ("group", IMAGE_GROUP)):
            host = Path("/etc", name).read_text()
            (self.root / name).write_text(with_entry(host, entry))
        self._register_node()
        self._watcher = threading.Thread(target=self._watch, name="local-kubelet-pods", daemon=True)
        self._watcher.start()
        self._thread = threading.Thread(target=self._loop, name="local-kubelet", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in (self._thread, self._watcher):
            if thread:
                thread.join(timeout=30)
        for rt in list(self.pods.values()):
            self._kill(rt, signal.SIGKILL)
            self._reap(rt)
        self.pods.clear()
        self.api.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # keep the node alive; the tests see the pods' state
                self.errors.append(traceback.format_exc())
                del self.errors[:-20]
            self._stop.wait(TICK_S)

    # ---- the node ------------------------------------------------------------

    def _register_node(self) -> None:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": NODE,
                "labels": {"kubernetes.io/hostname": NODE, NODE_LABEL: "true"},
            },
            "spec": {"taints": [{"key": NODE_LABEL, "value": "true", "effect": "NoSchedule"}]},
        }
        with contextlib.suppress(ApiException):
            self.core.create_node(node)
        self._node_status()

    def _node_status(self) -> None:
        t = now()
        status = {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "local kubelet: pods run as local processes",
                        "lastHeartbeatTime": t,
                        "lastTransitionTime": t,
                    }
                ],
                "addresses": [
                    {"type": "InternalIP", "address": NODE_IP},
                    {"type": "Hostname", "address": NODE},
                ],
                "capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"},
            }
        }
        self.core.patch_node_status(NODE, status, _content_type="application/merge-patch+json")
        self._status_at = time.monotonic()

    def _renew_lease(self) -> None:
        renew_lease(self.coord, NODE)
        self._lease_at = time.monotonic()

    # ---- the loop ------------------------------------------------------------

    def _watch(self) -> None:
        """Keep the node's pods (``_bound``) as the API server has them, as a kubelet
        does: a list, then a watch from its resource version (ended every few
        seconds, so that ``stop`` is quick), a list again when a watch fails."""
        selector = f"spec.nodeName={NODE}"
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    resp = self.core.list_pod_for_all_namespaces(
                        field_selector=selector, _preload_content=False
                    )
                    listed = json.loads(resp.data)
                    with self._bound_lock:
                        self._bound = {p["metadata"]["uid"]: p for p in listed["items"]}
                    version = listed["metadata"]["resourceVersion"]
                for event in watch.Watch().stream(
                    self.core.list_pod_for_all_namespaces,
                    field_selector=selector,
                    resource_version=version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=3,
                    deserialize=False,  # plain JSON: the models are slow to build
                ):
                    pod = event["object"]  # (an ERROR event, an expired version, raises)
                    version = pod["metadata"]["resourceVersion"]
                    if event["type"] == "BOOKMARK":
                        continue
                    with self._bound_lock:
                        assert self._bound is not None
                        if event["type"] == "DELETED":
                            self._bound.pop(pod["metadata"]["uid"], None)
                        else:
                            self._bound[pod["metadata"]["uid"]] = pod
            except Exception:  # the API server gone or the watch cut: list again
                version = ""
                if not self._stop.is_set():
                    self.errors.append(traceback.format_exc())
                    del self.errors[:-20]
                    self._stop.wait(0.5)

    def tick(self) -> None:
        mono = time.monotonic()
        if mono - self._lease_at >= LEASE_S:
            self._renew_lease()
        if mono - self._status_at >= STATUS_S:
            self._node_status()
        with self._bound_lock:
            if self._bound is None:
                return  # not listed yet
            pods = list(self._bound.values())
        seen: set[str] = set()
        for pod in pods:
            seen.add(pod["metadata"]["uid"])
            try:
                self._sync_pod(pod)
            except Exception:  # one pod's trouble must not stall the others
                self.errors.append(traceback.format_exc())
                del self.errors[:-20]
        for uid in set(self.pods) - seen:  # gone without a graceful delete
            rt = self.pods.pop(uid)
            self._kill(rt, signal.SIGKILL)
            self._reap(rt)
        if mono - self._dns_at >= 0.5:
            self._sync_dns()

    def _sync_pod(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        rt = self.pods.get(uid)
        if rt is None:
            if pod["metadata"].get("deletionTimestamp"):
                self._delete(pod)  # never started: nothing to stop
                return
            rt = self._admit(pod)
        rt.pod = pod
        if pod["metadata"].get("deletionTimestamp"):
            self._terminate(rt)
        else:
            self._sync_api_volumes(rt)
            for c in rt.containers:
                self._supervise(rt, c)
            self._report(rt)

    # ---- pods ----------------------------------------------------------------

    def _allocate_ip(self) -> str:
        ip = ipaddress.ip_address(self._next_ip)
        self._next_ip += 1
        if ip not in POD_CIDR:
            raise RuntimeError("pod CIDR exhausted")
        return str(ip)

    def _admit(self, pod: dict[str, Any]) -> PodRuntime:
        meta = pod["metadata"]
        root = self.root / "pods" / meta["namespace"] / f"{meta['name']}-{meta['uid'][:8]}"
        root.mkdir(parents=True, exist_ok=True)
        rt = PodRuntime(pod=pod, ip=self._allocate_ip(), root=root, started=now())
        for spec in pod["spec"].get("containers", []):
            rt.containers.append(Container(spec=spec, log_dir=root / "logs"))
        self.pods[meta["uid"]] = rt
        return rt

    def _delete(self, pod: dict[str, Any]) -> None:
        delete_now(self.core, pod["metadata"])

    def _terminate(self, rt: PodRuntime) -> None:
        """Graceful delete: SIGTERM, SIGKILL after the grace, then remove the pod."""
        grace = int(rt.pod["metadata"].get("deletionGracePeriodSeconds") or 0)
        mono = time.monotonic()
        if rt.term_sent is None:
            rt.term_sent = mono
            self._kill(rt, signal.SIGTERM if grace > 0 else signal.SIGKILL)
        elif mono - rt.term_sent >= grace:
            self._kill(rt, signal.SIGKILL)
        if all(c.proc is None or c.proc.poll() is not None for c in rt.containers):
            self._reap(rt)
            self.pods.pop(rt.pod["metadata"]["uid"], None)
            self._delete(rt.pod)

    def _kill(self, rt: PodRuntime, sig: int) -> None:
        for c in rt.containers:
            if c.proc is not None and c.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    c.proc.send_signal(sig)

    def _reap(self, rt: PodRuntime) -> None:
        for c in rt.containers:
            if c.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    c.proc.wait(timeout=10)
            if c.channel is not None:
                c.channel.close()
                c.channel = None

    # ---- volumes -------------------------------------------------------------

    def _volume_source(self, rt: PodRuntime, volume: dict[str, Any]) -> Path:
        ns = rt.pod["metadata"]["namespace"]
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            pvc = self.core.read_namespaced_persistent_volume_claim(claim, ns)
            if not pvc.spec.volume_name or pvc.status.phase != "Bound":
                raise _NotYet(f"persistentvolumeclaim {claim!r} is not bound")
            pv = self.core.read_persistent_volume(pvc.spec.volume_name)
            if pv.spec.host_path is None:
                raise ContainerConfigError(f"volume {pv.metadata.name}: only hostPath PVs run here")
            path = Path(pv.spec.host_path.path)
            path.mkdir(parents=True, exist_ok=True)
            self._fs_group(rt, path)
            return path
        if "configMap" in volume or "secret" in volume:
            path = rt.root / "volumes" / volume["name"]
            self._write_api_volume(rt, volume, path)
            return path
        if "emptyDir" in volume:
            path = rt.root / "volumes" / volume["name"]
            path.mkdir(parents=True, exist_ok=True)
            self._fs_group(rt, path)
            return path
        if "hostPath" in volume:
            return Path(volume["hostPath"]["path"])
        raise ContainerConfigError(f"volume {volume['name']}: kind not supported here")

    def _fs_group(self, rt: PodRuntime, path: Path) -> None:
        """fsGroup: the volume's files belong to the group, group-writable, setgid
        directories (only when the root does not match, with OnRootMismatch)."""
        sc = rt.pod["spec"].get("securityContext") or {}
        group = sc.get("fsGroup")
        if group is None:
            return
        if sc.get("fsGroupChangePolicy") == "OnRootMismatch" and path.stat().st_gid == group:
            return
        for p in [path, *path.rglob("*")]:
            if p.is_symlink():
                continue
            os.chown(p, -1, group)
            mode = p.stat().st_mode | 0o060
            if p.is_dir():
                mode |= 0o2010
            os.chmod(p, mode)

    def _api_volume(
        self, rt: PodRuntime, volume: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, bytes]]:
        """A ConfigMap or Secret volume's source and the object's data (decoded);
        empty when an ``optional`` object does not exist. ``_NotYet`` (the pod
        waits, as the kubelet's volume set-up is retried) when a required one
        does not, or lacks a key its ``items`` name."""
        kind = "configMap" if "configMap" in volume else "secret"
        src = volume[kind]
        name = src["name"] if kind == "configMap" else src["secretName"]
        what = "configmap" if kind == "configMap" else "secret"
        ns = rt.pod["metadata"]["namespace"]
        try:
            data = self._object_data(kind == "secret", name, ns)
        except ApiException as e:
            if e.status != 404:
                raise
            if not src.get("optional"):
                raise _NotYet(
                    f'MountVolume.SetUp failed for volume "{volume["name"]}" : '
                    f'{what} "{name}" not found'
                ) from None
            return src, {}
        for item in src.get("items") or []:
            if item["key"] not in data and not src.get("optional"):
                raise _NotYet(
                    f'MountVolume.SetUp failed for volume "{volume["name"]}" : '
                    f"{what} references non-existent key: {item['key']}"
                )
        return src, data

    def _write_api_volume(self, rt: PodRuntime, volume: dict[str, Any], path: Path) -> bool:
        """A ConfigMap or Secret volume, the kubelet's atomic writer: files in a
        timestamped directory, ``..data`` pointing at it (swapped in one rename
        when the data changed), each key a symlink through ``..data``; the
        files' mode ``defaultMode`` (or the item's ``mode``), and with the pod's
        fsGroup group-owned and group-readable, as the kubelet's ownership of a
        read-only volume. True if written."""
        src, data = self._api_volume(rt, volume)
        mode = int(src.get("defaultMode", 0o644))
        items = [
            i for i in (src.get("items") or [{"key": k, "path": k} for k in sorted(data)])
            if i["key"] in data
        ]  # fmt: skip
        digest = hashlib.sha256(
            json.dumps(
                [mode, items, {k: base64.b64encode(v).decode() for k, v in data.items()}],
                sort_keys=True,
            ).encode()
        ).hexdigest()
        if digest == rt.api_volumes.get(volume["name"]):
            return False
        path.mkdir(parents=True, exist_ok=True)
        stamp = f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns()}"
        tsdir = path / stamp
        tsdir.mkdir()
        for item in items:
            f = tsdir / item["path"]
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_bytes(data[item["key"]])
            os.chmod(f, int(item.get("mode", mode)))
        os.chmod(tsdir, 0o755)
        self._read_only_ownership(rt, path)
        tmp = path / "..data_tmp"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(stamp)
        os.replace(tmp, path / "..data")
        tops = {item["path"].split("/")[0] for item in items}
        for top in tops:
            link = path / top
            if not link.is_symlink():
                link.symlink_to(f"..data/{top}")
        for old in path.iterdir():
            if old.name.startswith("..20") and old.name != stamp:
                shutil.rmtree(old, ignore_errors=True)
            elif not old.name.startswith("..") and old.name not in tops and old.is_symlink():
                old.unlink()  # a key gone from the object
        rt.api_volumes[volume["name"]] = digest
        return True

    def _read_only_ownership(self, rt: PodRuntime, path: Path) -> None:
        """The kubelet's SetVolumeOwnership for a read-only volume (ConfigMap,
        Secret): with the pod's fsGroup, every file and directory belongs to
        the group, files get ``ug+r``, directories ``ug+rx`` and setgid."""
        group = (rt.pod["spec"].get("securityContext") or {}).get("fsGroup")
        if group is None:
            return
        for p in [path, *path.rglob("*")]:
            if p.is_symlink():
                os.lchown(p, -1, int(group))
                continue
            os.chown(p, -1, int(group))
            mode = p.stat().st_mode & 0o7777 | 0o440
            if p.is_dir():
                mode |= 0o2110
            os.chmod(p, mode)

    def _sync_api_volumes(self, rt: PodRuntime) -> None:
        """A running pod's ConfigMap and Secret volumes follow their objects."""
        if time.monotonic() - rt.volumes_at < VOLUME_SYNC_S:
            return
        rt.volumes_at = time.monotonic()
        for volume in rt.pod["spec"].get("volumes") or []:
            if volume["name"] in rt.api_volumes:
                with contextlib.suppress(_NotYet, ApiException):
                    self._write_api_volume(rt, volume, rt.root / "volumes" / volume["name"])

    # ---- containers ----------------------------------------------------------

    def _env(self, rt: PodRuntime, spec: dict[str, Any]) -> dict[str, str]:
        meta = rt.pod["metadata"]
        hostname = rt.pod["spec"].get("hostname") or meta["name"]
        env = {
            "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p.startswith(str(ROOT))),
            "HOSTNAME": hostname,
            "HOME": "/",
        }
        if spec.get("envFrom"):
            raise ContainerConfigError("envFrom is not supported by the local kubelet")
        for e in spec.get("env") or []:
            if "value" in e:
                env[e["name"]] = expand(str(e["value"]), env)
                continue
            src = e.get("valueFrom") or {}
            if "fieldRef" in src:
                env[e["name"]] = field_ref(rt.pod, src["fieldRef"]["fieldPath"], rt.ip)
            elif "configMapKeyRef" in src or "secretKeyRef" in src:
                value = self._key_ref(meta["namespace"], src)
                if value is not None:
                    env[e["name"]] = value
            else:
                raise ContainerConfigError(f"env {e['name']}: source not supported here")
        return {k: bind_pod_ip(v, rt.ip) for k, v in env.items()}

    def _key_ref(self, ns: str, src: dict[str, Any]) -> str | None:
        """An env value from a ConfigMap's or a Secret's key (a Secret's decoded);
        None when an ``optional`` one lacks it (the variable is not set)."""
        kind = "ConfigMap" if "configMapKeyRef" in src else "Secret"
        ref = src["configMapKeyRef"] if kind == "ConfigMap" else src["secretKeyRef"]
        try:
            # (as the kubelet: an env value comes from a ConfigMap's data, not binaryData)
            data = self._object_data(kind == "Secret", ref["name"], ns, binary=False)
        except ApiException as err:
            if err.status == 404 and ref.get("optional"):
                return None
            if err.status == 404:
                raise ContainerConfigError(f'{kind.lower()} "{ref["name"]}" not found') from err
            raise
        if ref["key"] not in data:
            if ref.get("optional"):
                return None
            raise ContainerConfigError(
                f"couldn't find key {ref['key']} in {kind} {ns}/{ref['name']}"
            )
        return data[ref["key"]].decode(errors="replace")

    def _object_data(
        self, secret: bool, name: str, ns: str, *, binary: bool = True
    ) -> dict[str, bytes]:
        """A Secret's data, or a ConfigMap's data and (``binary``) binaryData,
        decoded to bytes; ``ApiException`` (404 when it does not exist)."""
        if secret:
            raw = self.core.read_namespaced_secret(name, ns).data or {}
            return {k: base64.b64decode(v) for k, v in raw.items()}
        cm = self.core.read_namespaced_config_map(name, ns)
        data = {k: v.encode() for k, v in (cm.data or {}).items()}
        if binary:
            data.update({k: base64.b64decode(v) for k, v in (cm.binary_data or {}).items()})
        return data

    def _argv(self, rt: PodRuntime, spec: dict[str, Any], env: dict[str, str]) -> list[str]:
        image = str(spec.get("image", ""))
        if not image.startswith(IMAGE_PREFIX):
            raise _ImageError(
                f"image {image!r}: only the project's image ({IMAGE_PREFIX}*) runs here"
            )
        command = spec.get("command")
        args = spec.get("args")
        if command is None:
            argv = [*IMAGE_ENTRYPOINT, *(IMAGE_CMD if args is None else args)]
        else:
            argv = [*command, *(args or [])]
        return [bind_pod_ip(expand(str(a), env), rt.ip) for a in argv]

    def _plan(self, rt: PodRuntime, c: Container) -> dict[str, Any]:
        spec = c.spec
        env = self._env(rt, spec)
        argv = self._argv(rt, spec, env)
        volumes = {v["name"]: v for v in rt.pod["spec"].get("volumes") or []}
        mounts = [
            {"source": str(self.root / f), "target": f"/etc/{f}", "readOnly": True}
            for f in ("hosts", "passwd", "group")
        ]
        for m in spec.get("volumeMounts") or []:
            if m["name"] not in volumes:
                raise ContainerConfigError(f"volume {m['name']!r} is not defined in the pod")
            volume = volumes[m["name"]]
            source = self._volume_source(rt, volume)
            # ConfigMap and Secret volumes are always mounted read-only
            api = "configMap" in volume or "secret" in volume
            mounts.append(
                {
                    "source": str(source),
                    "target": m["mountPath"],
                    "readOnly": bool(m.get("readOnly")) or api,
                }
            )
        psc = rt.pod["spec"].get("securityContext") or {}
        csc = spec.get("securityContext") or {}
        uid = int(csc.get("runAsUser", psc.get("runAsUser", 0)))
        gid = int(csc.get("runAsGroup", psc.get("runAsGroup", 0)))
        groups = [gid, *psc.get("supplementalGroups", [])]
        if psc.get("fsGroup") is not None:
            groups.append(int(psc["fsGroup"]))
        if (csc.get("runAsNonRoot") or psc.get("runAsNonRoot")) and uid == 0:
            raise ContainerConfigError("container has runAsNonRoot and image will run as root")
        (rt.root / "rootfs").mkdir(exist_ok=True)
        return {
            "rootfs": str(rt.root / "rootfs"),
            "readOnlyRootFilesystem": bool(csc.get("readOnlyRootFilesystem")),
            "image": [sys.base_prefix, str(VENV_BIN.parent), str(ROOT)],
            "mounts": mounts,
            "uid": uid,
            "gid": gid,
            "groups": sorted(set(groups)),
            "cwd": spec.get("workingDir") or "/",
            "argv": argv,
            "env": env,
        }

    def _start(self, rt: PodRuntime, c: Container) -> None:
        c.next_start = time.monotonic() + 1.0  # when this attempt cannot start
        try:
            plan = self._plan(rt, c)
        except _NotYet as e:
            c.waiting = {"reason": "ContainerCreating", "message": str(e)}
            return
        except ApiException as e:  # a volume's object could not be read: wait
            c.waiting = {"reason": "ContainerCreating", "message": f"{e.status} {e.reason}"}
            return
        except _ImageError as e:
            c.waiting = {"reason": "ErrImagePull", "message": str(e)}
            return
        except ContainerConfigError as e:
            c.waiting = {"reason": "CreateContainerConfigError", "message": str(e)}
            return
        c.log_dir.mkdir(parents=True, exist_ok=True)
        plan_file = rt.root / f"{c.name}.plan.json"
        plan_file.write_text(json.dumps(plan, indent=1))
        c.log = c.log_dir / f"{c.name}-{c.restarts}.log"
        with open(c.log, "wb") as out:  # the child keeps its own descriptor
            c.proc = subprocess.Popen(
                ["unshare", "--mount", "--propagation", "private", "--",
                 sys.executable, str(PODINIT), str(plan_file)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        c.started_at, c.started_mono, c.waiting, c.ready = now(), time.monotonic(), None, False

    def _supervise(self, rt: PodRuntime, c: Container) -> None:
        mono = time.monotonic()
        if c.terminated is not None:
            return  # done for good (restartPolicy)
        if c.proc is None:
            if mono >= c.next_start:
                self._start(rt, c)
            return
        code = c.proc.poll()
        if code is None:
            self._probe(rt, c)
            return
        # exited: record it; restart after the back-off if the policy says so
        ran = mono - c.started_mono
        state = {
            "exitCode": code if code >= 0 else 128 - code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": c.started_at,
            "finishedAt": now(),
        }
        if code < 0:
            state["signal"] = -code
        message = self._message(c, code)
        if message:
            state["message"] = message
        c.proc = None
        c.ready = False
        if c.channel is not None:
            c.channel.close()
            c.channel = None
        if not restarts(str(rt.pod["spec"].get("restartPolicy", "Always")), code):
            c.terminated = state
            return
        c.last_terminated = state
        c.backoff_s = BACKOFF_S if ran >= BACKOFF_RESET_S or not c.backoff_s else c.backoff_s * 2
        c.backoff_s = min(c.backoff_s, BACKOFF_MAX_S)
        c.next_start = mono + c.backoff_s
        c.restarts += 1
        meta = rt.pod["metadata"]
        c.waiting = {
            "reason": "CrashLoopBackOff",
            "message": f"back-off {c.backoff_s:.0f}s restarting failed container={c.name} "
            f"pod={meta['name']}_{meta['namespace']}({meta['uid']})",
        }

    def _message(self, c: Container, code: int) -> str:
        policy = c.spec.get("terminationMessagePolicy", "File")
        if policy != "FallbackToLogsOnError" or code == 0 or c.log is None:
            return ""
        lines = c.log.read_bytes().splitlines()[-MESSAGE_LINES:]
        return b"\n".join(lines)[-MESSAGE_BYTES:].decode(errors="replace")

    def _probe(self, rt: PodRuntime, c: Container) -> None:
        probe = c.spec.get("readinessProbe") or {}
        if "grpc" not in probe and "httpGet" not in probe:
            c.ready = True
            return
        mono = time.monotonic()
        if c.probed_at + PROBE_S > mono:
            return
        c.probed_at = mono
        if "httpGet" in probe:
            c.ready = http_probe(probe["httpGet"], c.spec, rt.ip)
            return
        grpc_probe = probe["grpc"]
        if c.channel is None:
            c.channel = grpc.insecure_channel(f"{rt.ip}:{grpc_probe['port']}")
        try:
            got = health_pb2_grpc.HealthStub(c.channel).Check(
                health_pb2.HealthCheckRequest(service=grpc_probe.get("service", "")), timeout=1.0
            )
            c.ready = got.status == health_pb2.HealthCheckResponse.SERVING
        except grpc.RpcError:
            c.ready = False

    # ---- status --------------------------------------------------------------

    def _container_status(self, c: Container) -> dict[str, Any]:
        if c.proc is not None:
            state: dict[str, Any] = {"running": {"startedAt": c.started_at}}
        elif c.terminated is not None:
            state = {"terminated": c.terminated}
        else:
            state = {"waiting": c.waiting or {"reason": "ContainerCreating"}}
        out: dict[str, Any] = {
            "name": c.name,
            "image": c.spec.get("image", ""),
            "imageID": "",
            "ready": c.ready,
            "started": c.proc is not None,
            "restartCount": c.restarts,
            "state": state,
            "lastState": {"terminated": c.last_terminated} if c.last_terminated else {},
        }
        if c.proc is not None:
            out["containerID"] = f"local://{c.proc.pid}"
        return out

    def _report(self, rt: PodRuntime) -> None:
        statuses = [self._container_status(c) for c in rt.containers]
        ready = all(c.ready for c in rt.containers)
        key = json.dumps([statuses, ready], sort_keys=True)
        if key == rt.last_status:
            return
        old = {c["type"]: c for c in (rt.pod.get("status") or {}).get("conditions") or []}
        t = now()

        def cond(type_: str, ok: bool, reason: str = "") -> dict[str, Any]:
            status = "True" if ok else "False"
            prev = old.get(type_) or {}
            since = prev.get("lastTransitionTime") if prev.get("status") == status else t
            out = {"type": type_, "status": status, "lastTransitionTime": since or t}
            if not ok and reason:
                out["reason"] = reason
            return out

        conditions = [
            cond("PodReadyToStartContainers", True),
            cond("Initialized", True),
            cond("Ready", ready, "ContainersNotReady"),
            cond("ContainersReady", ready, "ContainersNotReady"),
            old.get("PodScheduled") or cond("PodScheduled", True),
        ]
        started = any(
            c.proc is not None or c.last_terminated or c.terminated for c in rt.containers
        )
        body = {
            "status": {
                "phase": pod_phase(started, [c.terminated for c in rt.containers]),
                "hostIP": NODE_IP,
                "hostIPs": [{"ip": NODE_IP}],
                "podIP": rt.ip,
                "podIPs": [{"ip": rt.ip}],
                "startTime": rt.started,
                "conditions": conditions,
                "containerStatuses": statuses,
            }
        }
        meta = rt.pod["metadata"]
        try:
            self.core.patch_namespaced_pod_status(
                meta["name"], meta["namespace"], body, _content_type="application/merge-patch+json"
            )
        except ApiException as e:
            if e.status != 404:
                raise
            return
        rt.last_status = key

    # ---- cluster DNS ---------------------------------------------------------

    def _sync_dns(self) -> None:
        self._dns_at = time.monotonic()
        entries: list[tuple[str, str]] = []
        namespaces = set()
        for rt in self.pods.values():
            meta, spec = rt.pod["metadata"], rt.pod["spec"]
            namespaces.add(meta["namespace"])
            if spec.get("subdomain"):
                host = spec.get("hostname") or meta["name"]
                entries.append((rt.ip, f"{host}.{spec['subdomain']}.{meta['namespace']}.svc"))
        for ns in sorted(namespaces):
            resp = self.core.list_namespaced_service(ns, _preload_content=False)
            for svc in json.loads(resp.data)["items"]:
                selector = svc["spec"].get("selector")
                if not selector:
                    continue
                anyway = bool(svc["spec"].get("publishNotReadyAddresses"))
                for rt in self.pods.values():
                    meta = rt.pod["metadata"]
                    labels = meta.get("labels") or {}
                    if meta["namespace"] != ns or meta.get("deletionTimestamp"):
                        continue
                    ready = all(c.ready for c in rt.containers)
                    if (ready or anyway) and all(labels.get(k) == v for k, v in selector.items()):
                        entries.append((rt.ip, f"{svc['metadata']['name']}.{ns}.svc"))
        text = self._hosts_body(entries)
        if text != self._hosts_text:
            self._write_hosts(text)

    def _hosts_body(self, entries: list[tuple[str, str]]) -> str:
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        lines += [f"{ip} {name}.cluster.local {name}" for ip, name in sorted(set(entries))]
        return "\n".join(lines) + "\n"

    def _write_hosts(self, text: str) -> None:
        """In place: the file is bind-mounted into running containers."""
        mode = "r+" if self.hosts.exists() else "w"
        with open(self.hosts, mode) as f:
            f.write(text)
            f.truncate()
        self._hosts_text = text

    # ---- for tests -----------------------------------------------------------

    def run_in_cluster(
        self, argv: list[str], *, timeout_s: float = 120, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a command on this machine as a client inside the cluster would: the
        cluster's DNS on /etc/hosts (its own mount namespace), everything else
        as the test process has it."""
        return subprocess.run(
            self._in_cluster(argv, env), capture_output=True, text=True, timeout=timeout_s
        )

    def start_in_cluster(
        self, argv: list[str], *, env: dict[str, str] | None = None
    ) -> subprocess.Popen[str]:
        """``run_in_cluster`` in the background (stdout and stderr piped)."""
        return subprocess.Popen(
            self._in_cluster(argv, env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def _in_cluster(self, argv: list[str], env: dict[str, str] | None) -> list[str]:
        plan = {
            "mounts": [{"source": str(self.hosts), "target": "/etc/hosts", "readOnly": True}],
            "argv": argv,
            "env": {**os.environ, **(env or {})},
            "cwd": str(ROOT),
        }
        plan_file = self.root / f"client-{time.monotonic_ns()}.plan.json"
        plan_file.write_text(json.dumps(plan))
        return ["unshare", "--mount", "--propagation", "private", "--",
                sys.executable, str(PODINIT), str(plan_file)]  # fmt: skip

    def runtime(self, namespace: str, name: str) -> PodRuntime | None:
        for rt in list(self.pods.values()):
            m = rt.pod["metadata"]
            if (m["namespace"], m["name"]) == (namespace, name):
                return rt
        return None

    def logs(self, namespace: str, name: str) -> Iterator[str]:
        rt = self.runtime(namespace, name)
        if rt is None:
            return
        for c in rt.containers:
            if c.log is not None and c.log.exists():
                yield c.log.read_text(errors="replace")


class _NotYet(Exception):
    """A volume is not ready yet (the kubelet waits: ContainerCreating)."""


class _ImageError(Exception):
    """An image the local kubelet cannot run (ErrImagePull)."""


def pod_selector() -> dict[str, Any]:
    """What a pod spec (a DelayTopic's ``affinity`` and ``tolerations``) needs to
    land on the local node."""
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": NODE_LABEL, "operator": "In", "values": ["true"]}
                            ]
                        }
                    ]
                }
            }
        },
        "tolerations": [
            {"key": NODE_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
        ],
    }
