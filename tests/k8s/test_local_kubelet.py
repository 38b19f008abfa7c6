"""The local kubelet's pure pieces: the kubelet's ``$(VAR)`` expansion, fieldRef
values, and its one translation (all of a pod's addresses is its IP)."""

from __future__ import annotations

import pytest

from tests.support.kubelet import ContainerConfigError, bind_pod_ip, expand, field_ref

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
