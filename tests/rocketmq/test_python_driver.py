"""The harness around the official RocketMQ 5 Python client, with no server: its
venv is made from the pins and stamped, the driver's arguments are checked, and a
closed or silent port ends a run with a clear failure, never a hang."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rocketmq import pyclient

pytestmark = pytest.mark.timeout(300)  # the first test may make the venv (~45 s from PyPI)


@pytest.fixture(scope="module")
def client_python() -> Path:
    return pyclient.ensure_venv()


@pytest.fixture
def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"  # nothing listens once it is closed


@pytest.fixture
def silent_port() -> Iterator[str]:
    """A port that takes connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield f"127.0.0.1:{s.getsockname()[1]}"


def test_the_venv_has_the_pinned_client_and_is_stamped(client_python: Path) -> None:
    where = client_python.parent.parent
    assert where == pyclient.venv_dir()
    assert where.name.startswith(pyclient.client_version() + "-")
    assert (where / pyclient.STAMP).read_text().startswith(pyclient.REQUIREMENTS.read_text())
    out = subprocess.run(
        [str(client_python), "-c", "import importlib.metadata as m, rocketmq; "
         "print(m.version('rocketmq-python-client'), m.version('protobuf'))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.split() == [pyclient.client_version(), _pin("protobuf")]
    began = time.monotonic()
    assert pyclient.ensure_venv() == client_python
    assert time.monotonic() - began < 1, "a stamped venv is used as it is"


def test_other_pins_get_another_venv(tmp_path: Path) -> None:
    changed = tmp_path / "requirements.txt"
    changed.write_text(pyclient.REQUIREMENTS.read_text() + "# another pin\n")
    assert pyclient.venv_dir(requirements=changed) != pyclient.venv_dir()
    assert pyclient.venv_dir(requirements=changed).name.startswith(pyclient.client_version())


def _pin(name: str) -> str:
    for line in pyclient.REQUIREMENTS.read_text().splitlines():
        if line.startswith(name + "=="):
            return line.split("==", 1)[1]
    raise AssertionError(f"{name} is not pinned")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["produce", "--topic", "t"], "nothing to send"),
        (["produce", "--normal", "1"], "--topic"),
        (["produce", "--topic", "t", "--message", "{"], "not JSON"),
        (["produce", "--topic", "t", "--message", '{"tag": "x"}'], '"body"'),
        (["produce", "--topic", "t", "--property", "novalue"], "K=V"),
        (["simple-consume", "--topic", "t"], "--group"),
        (["simple-consume", "--topic", "t", "--group", "g", "--count", "-1"], "negative"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2_with_usage(
    client_python: Path, closed_port: str, args: list[str], says: str
) -> None:
    result = pyclient.run(args[0], *args[1:], endpoint=closed_port, timeout_s=20, check=False)
    assert result.returncode == 2, result.report()
    assert says in result.stderr and "usage:" in result.stderr
    assert result.lines == []


def test_help_names_every_command(client_python: Path) -> None:
    out = subprocess.run(
        [str(client_python), str(pyclient.DRIVER), "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0
    for command in ("produce", "recall", "simple-consume"):
        assert command in out.stdout


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("produce", ["--topic", "t", "--normal", "1"]),
        ("recall", ["--topic", "t"]),
        ("simple-consume", ["--topic", "t", "--group", "g", "--count", "1"]),
    ],
)
def test_a_closed_port_fails_fast_and_says_so(
    client_python: Path, closed_port: str, command: str, args: list[str]
) -> None:
    began = time.monotonic()
    result = pyclient.run(command, *args, endpoint=closed_port, timeout_s=60, check=False)
    assert time.monotonic() - began < 20
    assert result.returncode == pyclient.EXIT_FAILED, result.report()
    assert result.one("started")["client_version"] == pyclient.client_version()
    error = result.one("error")
    assert "route" in error["message"]  # the client's words: failed to fetch topic:t route
    assert any("Connection refused" in w for w in error["client_warnings"])
    assert f"{command} failed during" in result.stderr
    with pytest.raises(pyclient.DriverFailed, match="failed to fetch topic:t route"):
        pyclient.run(command, *args, endpoint=closed_port, timeout_s=60)


def test_a_silent_port_is_cut_off_at_the_timeout(client_python: Path, silent_port: str) -> None:
    """The client would wait 30 s a request here; the driver's watchdog ends it.
    (8 s: importing the client alone takes 1.5-2 s here.)"""
    began = time.monotonic()
    result = pyclient.run(
        "simple-consume", "--topic", "t", "--group", "g",
        endpoint=silent_port, timeout_s=8, check=False,
        request_timeout_s=30,
    )  # fmt: skip
    took = time.monotonic() - began
    assert result.returncode == pyclient.EXIT_TIMEOUT, result.report()
    assert 8 <= took < 15
    error = result.one("error")
    assert error["type"] == "Timeout" and error["phase"] == "consumer startup"
    assert "timed out after 8 s" in result.stderr


def test_leaving_the_block_ends_a_driver_still_running(
    client_python: Path, silent_port: str
) -> None:
    began = time.monotonic()
    with pyclient.start(
        "simple-consume", "--topic", "t", "--group", "g", endpoint=silent_port, timeout_s=60
    ) as running:
        pass  # a test that failed here
    assert time.monotonic() - began < 5
    assert running.result(check=False).returncode == -9


def test_stdout_that_is_not_json_fails_the_run() -> None:
    lines = pyclient._parse('{"event": "sent"}\nTraceback (most recent call last):\n[1]')
    assert [line["event"] for line in lines] == ["sent", "not JSON", "not JSON"]
    assert lines[1]["line"].startswith("Traceback")
