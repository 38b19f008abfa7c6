"""The local kubelet's containers (``kubelet.py``): how a container is started
(the image's entrypoint and CMD, env with ``fieldRef``, ``configMapKeyRef`` and
``secretKeyRef``, ``$(VAR)`` expansion, its mounts and user, run by
``podinit.py``), supervised (restarts with the kubelet's back-off, the
termination message), probed for readiness (``grpc`` or ``httpGet``) and
reported in the pod's status."""

from __future__ import annotations

import http.client
import json
import os
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from kubernetes.client.rest import ApiException

from tests.k8s.support.pods import (
    NODE_IP,
    PODINIT,
    ROOT,
    VENV_BIN,
    Container,
    ContainerConfigError,
    ImageError,
    NotYet,
    PodRuntime,
    bind_pod_ip,
    expand,
    field_ref,
    now,
    pod_phase,
    restarts,
)
from tests.k8s.support.volumes import PodVolumes

# The Dockerfile's ENTRYPOINT and CMD.
IMAGE_ENTRYPOINT = ["delayq"]
IMAGE_CMD = ["serve", "--data-dir", "/data", "--listen", "0.0.0.0:7420",
             "--metrics-listen", "0.0.0.0:7421"]  # fmt: skip
IMAGE_PREFIX = "delayq:"
BACKOFF_S, BACKOFF_MAX_S, BACKOFF_RESET_S = 10.0, 300.0, 600.0
MESSAGE_LINES, MESSAGE_BYTES = 80, 2048
PROBE_S = 1.0
PROBE_TIMEOUT_S = 1.0


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


class PodContainers(PodVolumes):
    """The container half of ``LocalKubelet``: starts, supervises, probes and
    reports its pods' containers (``root``: the kubelet's directory, whose
    ``hosts``, ``passwd`` and ``group`` every container mounts)."""

    root: Path

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

    def _argv(self, rt: PodRuntime, spec: dict[str, Any], env: dict[str, str]) -> list[str]:
        image = str(spec.get("image", ""))
        if not image.startswith(IMAGE_PREFIX):
            raise ImageError(
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
        except NotYet as e:
            c.waiting = {"reason": "ContainerCreating", "message": str(e)}
            return
        except ApiException as e:  # a volume's object could not be read: wait
            c.waiting = {"reason": "ContainerCreating", "message": f"{e.status} {e.reason}"}
            return
        except ImageError as e:
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
