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

Here: the node, its pods' lifecycle (admission, graceful deletion), the
cluster's DNS and the clients run in the cluster; a container's start,
restarts, probes and status are in ``containers.py``, the volumes in
``volumes.py``, a pod's state and the pure rules in ``pods.py``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch
from kubernetes.client.rest import ApiException

from tests.k8s.support.containers import PodContainers
from tests.k8s.support.fakenodes import delete_now, renew_lease
from tests.k8s.support.pods import (
    NODE,
    NODE_IP,
    NODE_LABEL,
    POD_CIDR,
    PODINIT,
    ROOT,
    Container,
    PodRuntime,
    now,
    with_entry,
)

# The image's user and group (Dockerfile: useradd --uid 10001 delayq).
IMAGE_USER = "delayq:x:10001:10001::/home/delayq:/bin/sh"
IMAGE_GROUP = "delayq:x:10001:"
TICK_S = 0.2
LEASE_S = 5.0
STATUS_S = 20.0


class LocalKubelet(PodContainers):
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
            self.in_cluster_command(argv, env), capture_output=True, text=True, timeout=timeout_s
        )

    def start_in_cluster(
        self, argv: list[str], *, env: dict[str, str] | None = None
    ) -> subprocess.Popen[str]:
        """``run_in_cluster`` in the background (stdout and stderr piped)."""
        return subprocess.Popen(
            self.in_cluster_command(argv, env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def in_cluster_command(self, argv: list[str], env: dict[str, str] | None = None) -> list[str]:
        """The command line that runs ``argv`` as ``run_in_cluster`` does (for a
        caller that starts the process itself)."""
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
