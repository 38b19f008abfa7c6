"""Set up one container of the local kubelet (``tests/k8s/support/kubelet.py``) and
exec its command: run as ``unshare --mount --propagation private -- python
podinit.py PLAN.json``, so every mount below lives in the container's own mount
namespace and vanishes with it.

The plan (JSON) gives:
  rootfs      a directory: a tmpfs is mounted there and filled with bind mounts
              of the host's top-level entries (the "image": the project's venv
              and source tree are under them), read-only when the container
              asks for ``readOnlyRootFilesystem``; a directory on the way to a
              mount target is recreated in the tmpfs and its other entries bound
              one by one, so no mount point is ever created on the host
  mounts      [{source, target, readOnly}]: the pod's volumes at their
              ``mountPath`` (a bind mount; ``readOnly`` makes it read-only)
  image       paths the container's user must reach (the interpreter, the venv,
              the source tree): directories on their way are made traversable,
              and one under a volume's target is bound again over the volume
  uid, gid, groups   who the process runs as (the pod's securityContext)
  cwd, argv, env     what it runs; ``argv[0]`` is looked up on ``env["PATH"]``
              inside the new root
Without ``rootfs`` only the mounts are made (used to run a command in the
cluster's network view: the cluster's hosts file bound on /etc/hosts) and the
process keeps its user. Any failure is one line on stderr and exit code 127,
which the kubelet shows in the pod's status, as a container runtime would.

Standalone on purpose: it runs before the project is importable (no imports
from ``tests`` or ``delayq``).
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from typing import Any

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384

_libc = ctypes.CDLL(None, use_errno=True)


def mount(
    source: str, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    rc = _libc.mount(
        source.encode(),
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _flags_of(path: str) -> int:
    """The locking flags of the mount holding ``path`` (a read-only remount of a
    bind mount must keep nosuid/nodev/noexec)."""
    st = os.statvfs(path)
    flags = 0
    for bit, name in ((MS_NOSUID, "ST_NOSUID"), (MS_NODEV, "ST_NODEV"), (MS_NOEXEC, "ST_NOEXEC")):
        if st.f_flag & getattr(os, name):
            flags |= bit
    return flags


def bind(source: str, target: str, *, read_only: bool) -> None:
    mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        mount("none", target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | _flags_of(target))


def _on_the_way(path: str, targets: list[str]) -> bool:
    return any(t.startswith(path.rstrip("/") + "/") for t in targets)


def _chmod_traversable(path: str) -> None:
    os.chmod(path, 0o755)


def populate(host_dir: str, new_dir: str, targets: list[str], *, read_only: bool) -> None:
    """Mirror ``host_dir`` into ``new_dir`` (a tmpfs directory) by bind mounts,
    descending only into the directories that lead to a mount target."""
    for entry in sorted(os.listdir(host_dir)):
        host = os.path.join(host_dir, entry)
        new = os.path.join(new_dir, entry)
        if host in targets:
            continue  # a volume goes there
        if os.path.islink(host):
            os.symlink(os.readlink(host), new)
        elif os.path.isdir(host):
            os.mkdir(new)
            if _on_the_way(host, targets):
                _chmod_traversable(new)
                populate(host, new, targets, read_only=read_only)
            else:
                bind(host, new, read_only=read_only and entry not in ("proc", "sys", "dev"))
        elif os.path.exists(host):
            open(new, "a").close()
            bind(host, new, read_only=read_only)


def _make_target(path: str, *, is_file: bool) -> None:
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    if is_file:
        if not os.path.exists(path):
            open(path, "a").close()
    else:
        os.makedirs(path, exist_ok=True)


def run(plan: dict[str, Any]) -> None:
    mounts: list[dict[str, Any]] = plan.get("mounts", [])
    rootfs = plan.get("rootfs")
    if rootfs:
        mount("tmpfs", rootfs, "tmpfs", 0, "mode=755")
        targets = [os.path.normpath(m["target"]) for m in mounts]
        # the image's files (the interpreter, the venv, the source tree) must be
        # reachable by the container's user: the directories on their way are
        # recreated traversable (a host's /root is not)
        ways = targets + [os.path.join(os.path.realpath(p), "") for p in plan.get("image", [])]
        populate("/", rootfs, ways, read_only=bool(plan.get("readOnlyRootFilesystem")))
        for m in mounts:
            where = rootfs + os.path.normpath(m["target"])
            _make_target(where, is_file=os.path.isfile(m["source"]))
            bind(m["source"], where, read_only=bool(m.get("readOnly")))
        # a volume over a directory that holds the image's files (an emptyDir at
        # /tmp, with this checkout under /tmp) must not hide them: a real image's
        # files are elsewhere, so they are bound again on top
        for image in (os.path.realpath(p) for p in plan.get("image", [])):
            if any(_on_the_way(t, [image]) for t in targets):
                _make_target(rootfs + image, is_file=False)
                bind(image, rootfs + image, read_only=True)
        if plan.get("readOnlyRootFilesystem"):
            mount("none", rootfs, None, MS_REMOUNT | MS_RDONLY)
        os.chroot(rootfs)
    else:
        for m in mounts:
            bind(m["source"], m["target"], read_only=bool(m.get("readOnly")))
    os.chdir(plan.get("cwd") or "/")
    if "uid" in plan:
        os.setgroups([int(g) for g in plan.get("groups", [])])
        os.setgid(int(plan["gid"]))
        os.setuid(int(plan["uid"]))
    env: dict[str, str] = plan["env"]
    argv: list[str] = plan["argv"]
    os.execvpe(argv[0], argv, env)


def main() -> None:
    with open(sys.argv[1]) as f:
        plan = json.load(f)
    try:
        run(plan)
    except OSError as e:
        # what a container runtime reports: the start failed, the reason in one line
        print(f"container start failed: {e}", file=sys.stderr, flush=True)
        os._exit(127)


if __name__ == "__main__":
    main()
