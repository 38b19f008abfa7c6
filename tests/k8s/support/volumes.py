"""The local kubelet's volumes (``kubelet.py``): where each of a pod's volumes
comes from (a PVC's hostPath PersistentVolume, a ConfigMap or a Secret written
the kubelet's way and followed while the pod runs, an emptyDir, a hostPath),
and the ownership ``fsGroup`` gives them."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from tests.k8s.support.pods import ContainerConfigError, NotYet, PodRuntime

VOLUME_SYNC_S = 1.0
"""How often a running pod's ConfigMap and Secret volumes are read again (a real
kubelet: within its sync period, up to a minute or so)."""


class PodVolumes:
    """The volume half of ``LocalKubelet``: its pods' volumes, read through the API
    server (``core``)."""

    core: k8s.CoreV1Api

    def _volume_source(self, rt: PodRuntime, volume: dict[str, Any]) -> Path:
        ns = rt.pod["metadata"]["namespace"]
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]["claimName"]
            pvc = self.core.read_namespaced_persistent_volume_claim(claim, ns)
            if not pvc.spec.volume_name or pvc.status.phase != "Bound":
                raise NotYet(f"persistentvolumeclaim {claim!r} is not bound")
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
        empty when an ``optional`` object does not exist. ``NotYet`` (the pod
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
                raise NotYet(
                    f'MountVolume.SetUp failed for volume "{volume["name"]}" : '
                    f'{what} "{name}" not found'
                ) from None
            return src, {}
        for item in src.get("items") or []:
            if item["key"] not in data and not src.get("optional"):
                raise NotYet(
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
                with contextlib.suppress(NotYet, ApiException):
                    self._write_api_volume(rt, volume, rt.root / "volumes" / volume["name"])

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
