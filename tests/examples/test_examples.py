"""The examples in examples/ run as their READMEs say, against a real server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CRD = EXAMPLES.parent / "manifests" / "crds" / "delaytopics.delayq.io.yaml"


def _run(cmd: list[str], server: str) -> str:
    """Run an example with the server in $DELAYQ_SERVER and this venv's `delayq` on PATH."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = dict(os.environ, DELAYQ_SERVER=server, PATH=path)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{cmd} exited {done.returncode}\n{done.stdout}{done.stderr}"
    return done.stdout


def test_python_client_example(server: str) -> None:
    script = EXAMPLES / "01-embedded" / "schedule_cancel_receive.py"
    out = _run([sys.executable, str(script)], server)
    received = re.findall(r"^received (ship #\d)", out, re.M)
    assert sorted(received) == ["ship #1", "ship #3"], out
    assert "cancel ship #2: cancelled (state cancelled)" in out
    assert "refused ship #4: messages[0].delay_ms" in out
    assert out.rstrip().endswith("done: 2 received and acked, 1 cancelled")


def test_keys_example(server: str) -> None:
    out = _run([sys.executable, str(EXAMPLES / "06-keys" / "reminders_by_key.py")], server)
    lines = out.splitlines()
    first, replaced = lines[0].split()[1], lines[1].split()[2]
    assert lines[0].endswith("(new)") and lines[1].endswith("(replaced)"), out
    assert first != replaced and f"retry: already there as {replaced}: True" in lines, out
    assert f"pending for order-42: {replaced} 'pay order 42!' (pending)" in lines, out
    assert lines[-2:] == ["cancelled 1 for order-42", "nothing pending for order-42"], out


def test_cli_example(server: str) -> None:
    out = _run(["sh", str(EXAMPLES / "02-cli" / "walkthrough.sh")], server)
    # `delayq receive` prints: ID  DELIVER-AT  +LATEms  BODY
    received = re.findall(r"^\S+  \S+Z  \+\d+ms  (.*)$", out, re.M)
    assert received == ["call Alice"], out
    assert re.search(r"^\S+: cancelled$", out, re.M), out
    stats = [line.split() for line in out.splitlines() if line.startswith("example-reminders")]
    assert stats == [["example-reminders", "0", "1", "1"]], out  # pending, delivered, cancelled


def test_cluster_example(tmp_path: Path) -> None:
    from tests.support.cluster import PORTS_PER_NODE, free_base_port

    base = free_base_port(3 * PORTS_PER_NODE)
    script = EXAMPLES / "04-cluster" / "walkthrough.sh"
    out = _run(["sh", str(script), str(tmp_path / "c"), str(base)], "unused:1")
    assert "cluster up: 3 shard(s)" in out, out
    received = re.findall(r"^\S+  \S+Z  \+\d+ms  order of (\w+)$", out, re.M)
    assert sorted(received) == ["alice", "bob", "carol", "dave", "erin", "frank"], out
    assert out.count("shard ") >= 3 and out.count("serving") >= 3, out


def test_kubernetes_example_fits_the_crd() -> None:
    topic = yaml.safe_load((EXAMPLES / "03-kubernetes" / "delaytopic.yaml").read_text())
    crd = yaml.safe_load(CRD.read_text())
    [version] = crd["spec"]["versions"]
    assert topic["apiVersion"] == f"{crd['spec']['group']}/{version['name']}"
    assert topic["kind"] == crd["spec"]["names"]["kind"]
    fields = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert set(topic["spec"]) <= set(fields)
    # the README shows the columns `kubectl get dt` prints
    readme = (EXAMPLES / "03-kubernetes" / "README.md").read_text()
    header = next(line.split() for line in readme.splitlines() if line.strip().startswith("NAME"))
    assert header == ["NAME"] + [c["name"].upper() for c in version["additionalPrinterColumns"]]


def test_rocketmq_client_example(tmp_path: Path) -> None:
    from tests.rocketmq.pyclient import ensure_venv
    from tests.support.servers import ServerProcess

    python = ensure_venv()
    srv = ServerProcess(tmp_path / "data", ["--rocketmq-listen", "127.0.0.1:0"]).start()
    try:
        script = EXAMPLES / "05-rocketmq-client" / "send_recall_receive.py"
        env = dict(os.environ, ENDPOINT=srv.rocketmq_address, HOME=str(tmp_path))
        done = subprocess.run([str(python), str(script)], env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        out = done.stdout
        assert done.returncode == 0, f"{out}{done.stderr}"
        assert sorted(re.findall(r"^received (ship #\d)$", out, re.M)) == ["ship #1", "ship #3"]
        assert "EARLY" not in out and "recalled ship #2" in out
        assert out.rstrip().endswith("done: 2 received and acked, 1 recalled")
    finally:
        srv.stop()


def test_schedules_example(server: str) -> None:
    script = EXAMPLES / "07-schedules" / "heartbeat_and_nightly.py"
    lines = _run([sys.executable, str(script)], server).splitlines()
    readme = (EXAMPLES / "07-schedules" / "README.md").read_text()
    shown = [line.strip() for line in readme.splitlines() if line.startswith("    ")]
    start = next(i for i, line in enumerate(shown) if line.startswith("nightly preview"))
    assert lines == shown[start : start + len(lines)], "the README shows what it prints"
    assert lines[0].endswith("2027-03-14 03:00 EDT, 2027-03-15 02:30 EDT")


def test_push_example() -> None:
    script = EXAMPLES / "08-push" / "push_to_a_receiver.py"
    lines = _run([sys.executable, str(script)], "unused:1").splitlines()
    readme = (EXAMPLES / "08-push" / "README.md").read_text()
    shown = [line.strip() for line in readme.splitlines() if line.startswith("    ")]
    start = next(i for i, line in enumerate(shown) if line.startswith("received "))
    assert lines == shown[start : start + len(lines)], "the README shows what it prints"
