"""Fake nodes for the test control plane: nodes without a kubelet, whose pods go
Running and Ready at once, for the tests that check the operator's objects
rather than running processes (the local kubelet, ``kubelet.py``, runs those).

Run as a component of the control plane (``python -m tests.k8s.support.fakenodes
KUBECONFIG COUNT``), it registers ``fake-node-0`` .. ``fake-node-{COUNT-1}``
and then, through the real API server:

- keeps each node Ready (status every 20 s, its Lease in ``kube-node-lease``
  every 10 s: without a heartbeat the node lifecycle controller taints it
  NotReady and later pods never schedule);
- a pod bound to a fake node that is still Pending turns Running, Initialized,
  ContainersReady and Ready, each container running and ready, with an IP from
  10.1.0.0/16. Nothing moves a pod back: a test may patch a pod's status to
  NotReady and it stays so;
- a pod marked for deletion is deleted at once (grace 0), as if its kubelet had
  stopped its containers.

Pods come from a watch of every namespace (re-listed whenever the watch ends),
so a pod is handled as soon as the scheduler binds it.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import sys
import threading
import time
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch
from kubernetes.client.rest import ApiException

NAME = "fake-node-{}"
LABELS = {"type": "fake"}
POD_CIDR = ipaddress.ip_network("10.1.0.0/16")
STATUS_S, LEASE_S = 20.0, 10.0


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def running_status(pod: dict[str, Any], ip: str) -> dict[str, Any]:
    """A status patch: the pod running and ready on ``ip``."""
    t = now()
    conditions = [
        {"type": kind, "status": "True", "lastTransitionTime": t}
        for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    ]
    containers = [
        {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "",
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": t}},
        }
        for c in pod["spec"].get("containers", [])
    ]
    return {
        "status": {
            "phase": "Running",
            "startTime": t,
            "conditions": conditions,
            "containerStatuses": containers,
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "hostIP": "10.2.0.1",
        }
    }


def renew_lease(coord: k8s.CoordinationV1Api, node: str) -> None:
    """The node's heartbeat: its Lease in ``kube-node-lease`` renewed (made if
    missing), as a kubelet does (the local kubelet calls this too)."""
    renew = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lease = {
        "metadata": {"name": node, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": renew},
    }
    try:
        coord.patch_namespaced_lease(
            node, "kube-node-lease", lease, _content_type="application/merge-patch+json"
        )
    except ApiException as e:
        if e.status != 404:
            raise
        coord.create_namespaced_lease("kube-node-lease", lease)


def delete_now(core: k8s.CoreV1Api, meta: dict[str, Any]) -> None:
    """Remove a pod whose containers have stopped, as a kubelet does: delete with
    grace 0 and its uid as precondition (nothing if it is gone already). The
    options go in the body: with a body the API server ignores the query's grace
    period, and a pod already terminating would stay so (the local kubelet calls
    this too)."""
    options = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
    with contextlib.suppress(ApiException):
        core.delete_namespaced_pod(meta["name"], meta["namespace"], body=options)


class FakeNodes:
    def __init__(self, kubeconfig: str, count: int) -> None:
        api = k8s_config.new_client_from_config(config_file=kubeconfig)
        self.core = k8s.CoreV1Api(api)
        self.coord = k8s.CoordinationV1Api(api)
        self.names = [NAME.format(i) for i in range(count)]
        self._ips = (str(ip) for ip in POD_CIDR.hosts())
        self._given: dict[str, str] = {}  # pod uid -> its IP

    def register(self) -> None:
        for name in self.names:
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **LABELS}},
            }
            with contextlib.suppress(ApiException):  # (there from an earlier start)
                self.core.create_node(node)
        self.heartbeat()

    def heartbeat(self, status: bool = True) -> None:
        t = now()
        for name in self.names:
            if status:
                ready = {
                    "type": "Ready",
                    "status": "True",
                    "reason": "FakeNodeReady",
                    "message": "a fake node: its pods run nowhere",
                    "lastHeartbeatTime": t,
                    "lastTransitionTime": t,
                }
                body = {
                    "status": {
                        "conditions": [ready],
                        "addresses": [{"type": "Hostname", "address": name}],
                        "capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                        "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                    }
                }
                self.core.patch_node_status(
                    name, body, _content_type="application/merge-patch+json"
                )
            renew_lease(self.coord, name)

    def beat(self) -> None:
        last_status = time.monotonic()
        while True:
            time.sleep(LEASE_S)
            with_status = time.monotonic() - last_status >= STATUS_S
            try:
                self.heartbeat(status=with_status)
            except Exception as exc:  # the API server restarting: try again next beat
                print(f"fake nodes: heartbeat failed: {exc}", file=sys.stderr, flush=True)
                continue
            if with_status:
                last_status = time.monotonic()

    def handle(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        if spec.get("nodeName") not in self.names:
            return
        if meta.get("deletionTimestamp"):
            delete_now(self.core, meta)
            self._given.pop(meta["uid"], None)
        elif (pod.get("status") or {}).get("phase", "Pending") == "Pending":
            ip = self._given.setdefault(meta["uid"], next(self._ips))
            with contextlib.suppress(ApiException):  # (deleted meanwhile)
                self.core.patch_namespaced_pod_status(
                    meta["name"],
                    meta["namespace"],
                    running_status(pod, ip),
                    _content_type="application/merge-patch+json",
                )

    def run(self) -> None:
        while True:
            try:
                resp = self.core.list_pod_for_all_namespaces(_preload_content=False)
                listed = json.loads(resp.data)
                for pod in listed["items"]:
                    self.handle(pod)
                events = watch.Watch().stream(
                    self.core.list_pod_for_all_namespaces,
                    resource_version=listed["metadata"]["resourceVersion"],
                    timeout_seconds=60,
                    deserialize=False,  # plain JSON: the models are slow to build
                )
                for event in events:
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self.handle(event["object"])
            except Exception as exc:  # an expired resource version, a restart: list again
                print(f"fake nodes: watch ended: {exc!r}", file=sys.stderr, flush=True)
                time.sleep(0.5)


def main(argv: list[str]) -> int:
    """``KUBECONFIG COUNT``; runs until killed."""
    kubeconfig, count = argv[0], int(argv[1])
    nodes = FakeNodes(kubeconfig, count)
    nodes.register()
    threading.Thread(target=nodes.beat, name="heartbeat", daemon=True).start()
    nodes.run()  # until the control plane stops the process
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
