"""The local kubelet's pure pieces: the kubelet's ``$(VAR)`` expansion, fieldRef
values, its one translation (all of a pod's addresses is its IP), and what a
container's exit means under the pod's ``restartPolicy``; and one container
started for real by its podinit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.kubelet import (
    PODINIT,
    ROOT,
    VENV_BIN,
    ContainerConfigError,
    bind_pod_ip,
    expand,
    field_ref,
    pod_phase,
    restarts,
    with_entry,
)

POD = {
    "metadata": {
        "name": "t-shard-0-0",
        "namespace": "dq-1",
        "uid": "u-1",
        "labels": {"delayq.io/shard": "0"},
    },
    "spec": {"nodeName": "local-node-0"},
}


def test_expansion_is_the_kubelets() -> None:
    env = {"POD_NAME": "p-0", "PORT": "7420"}
    assert expand("$(POD_NAME).svc:$(PORT)", env) == "p-0.svc:7420"
    assert expand("$(UNSET)-x", env) == "$(UNSET)-x", "undefined: left as written"
    assert expand("$$(POD_NAME)", env) == "$(POD_NAME)", "$$ escapes"
    assert expand("a$b", env) == "a$b"


def test_field_refs() -> None:
    assert field_ref(POD, "metadata.name", "127.1.0.9") == "t-shard-0-0"
    assert field_ref(POD, "metadata.namespace", "127.1.0.9") == "dq-1"
    assert field_ref(POD, "status.podIP", "127.1.0.9") == "127.1.0.9"
    assert field_ref(POD, "spec.nodeName", "127.1.0.9") == "local-node-0"
    assert field_ref(POD, "metadata.labels['delayq.io/shard']", "127.1.0.9") == "0"
    with pytest.raises(ContainerConfigError, match=r"status\.phase"):
        field_ref(POD, "status.phase", "127.1.0.9")


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ("0.0.0.0:7420", "127.1.0.9:7420"),
        ("[::]:7421", "127.1.0.9:7421"),
        ("--listen=0.0.0.0:7420", "--listen=127.1.0.9:7420"),
        ("127.0.0.1:7420", "127.0.0.1:7420"),
        ("10.0.0.0:7420", "10.0.0.0:7420"),
        ("p-0.t-shard-0-pods.dq-1.svc:7420", "p-0.t-shard-0-pods.dq-1.svc:7420"),
        ("/data/0.0.0.0", "/data/0.0.0.0"),
    ],
)
def test_only_the_any_address_becomes_the_pod_ip(given: str, want: str) -> None:
    assert bind_pod_ip(given, "127.1.0.9") == want


def test_restart_policy() -> None:
    assert restarts("Always", 0) and restarts("Always", 1)
    assert restarts("OnFailure", 1) and not restarts("OnFailure", 0)
    assert not restarts("Never", 0) and not restarts("Never", 1)


def test_pod_phase_follows_its_containers_final_states() -> None:
    ok, failed = {"exitCode": 0}, {"exitCode": 1}
    assert pod_phase(False, [None]) == "Pending"
    assert pod_phase(True, [None]) == "Running"
    assert pod_phase(True, [ok, None]) == "Running", "one still runs"
    assert pod_phase(True, [ok]) == "Succeeded"
    assert pod_phase(True, [ok, failed]) == "Failed"


def test_the_images_user_is_added_unless_taken() -> None:
    passwd = "root:x:0:0:root:/root:/bin/bash\n"
    user = "delayq:x:10001:10001::/home/delayq:/bin/sh"
    assert with_entry(passwd, user) == passwd + user + "\n"
    assert with_entry(passwd + user + "\n", user) == passwd + user + "\n"
    taken = "other:x:10001:10001::/:/bin/sh\n"
    assert with_entry(taken, user) == taken, "the uid is taken: left as it is"


def test_a_volume_over_the_checkouts_parent_leaves_the_image_reachable(tmp_path: Path) -> None:
    """An emptyDir at /tmp (the rebalance Job has one) with this checkout under
    /tmp, as in a CI clone: the container still finds the venv's scripts and the
    source tree, as a real image keeps its files outside /tmp. A real podinit run
    (a mount namespace, a tmpfs root, chroot)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("the local kubelet needs root and unshare (as every k8s test does)")
    (tmp_path / "rootfs").mkdir()
    (tmp_path / "empty").mkdir()
    plan = {
        "rootfs": str(tmp_path / "rootfs"),
        "image": [sys.base_prefix, str(VENV_BIN.parent), str(ROOT)],
        "mounts": [{"source": str(tmp_path / "empty"), "target": str(ROOT.parent)}],
        "readOnlyRootFilesystem": True,
        "argv": ["delayq-spark", "--help"],
        "env": {"PATH": f"{VENV_BIN}:/usr/bin:/bin", "HOME": "/"},
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--",
         sys.executable, str(PODINIT), str(tmp_path / "plan.json")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rebalance" in done.stdout
