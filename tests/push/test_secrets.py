"""Secrets by reference under the secret dir: a file of lines, a Kubernetes-style
Secret directory (``..data`` symlink swapped on update), rotation seen after the
look interval, refs that would leave the dir refused, missing ones None."""

from __future__ import annotations

import base64
import os
from asyncio import run
from pathlib import Path

from delayq.push.secrets import LOOK_S, SecretStore, inside
from delayq.push.signing import parse_key


def _secret(c: bytes) -> str:
    return "whsec_" + base64.b64encode(c * 32).decode()


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _kube_secret(root: Path, name: str, version: str, data: dict[str, str]) -> None:
    """A Secret volume as the kubelet writes it: ..<version>/ files, a ..data link
    swapped atomically, and each key a link through ..data."""
    d = root / name
    d.mkdir(exist_ok=True)
    (d / version).mkdir()
    for k, v in data.items():
        (d / version / k).write_text(v)
    tmp = d / "..data_tmp"
    tmp.symlink_to(version)
    os.replace(tmp, d / "..data")
    for k in data:
        if not (d / k).is_symlink():
            (d / k).symlink_to(f"..data/{k}")


def test_a_file_of_lines_and_unsigned_without_a_ref(tmp_path: Path) -> None:
    (tmp_path / "hook").write_text(f"{_secret(b'a')}\n\n{_secret(b'b')}\n")
    s = SecretStore(tmp_path, _Clock())
    assert run(s.keys("hook")) == (parse_key(_secret(b"a")), parse_key(_secret(b"b")))
    assert run(s.keys("")) == ()


def test_a_kubernetes_secret_dir_rotates_in_place(tmp_path: Path) -> None:
    clock = _Clock()
    _kube_secret(tmp_path, "hooks", "..v1", {"current": _secret(b"a")})
    s = SecretStore(tmp_path, clock)
    assert run(s.keys("hooks")) == (parse_key(_secret(b"a")),)
    assert run(s.keys("hooks/current")) == (parse_key(_secret(b"a")),)
    _kube_secret(tmp_path, "hooks", "..v2", {"current": _secret(b"c"), "previous": _secret(b"a")})
    assert run(s.keys("hooks")) == (parse_key(_secret(b"a")),)  # not looked at again yet
    clock.t += LOOK_S
    assert run(s.keys("hooks")) == (parse_key(_secret(b"c")), parse_key(_secret(b"a")))


def test_missing_invalid_and_outside_refs_have_no_keys(tmp_path: Path) -> None:
    (tmp_path / "bad").write_text("not a secret\n")
    (tmp_path / "empty").write_text("\n")
    s = SecretStore(tmp_path, _Clock())
    for ref in ("absent", "bad", "empty", "../etc", "/etc/passwd", "hooks/..data", "a/b/c"):
        assert run(s.keys(ref)) is None, ref
        assert not s.resolves(ref)
    assert run(SecretStore(None, _Clock()).keys("hook")) is None
    assert not inside("..") and not inside(".hidden") and inside("name/key")


def test_resolves_reads_afresh(tmp_path: Path) -> None:
    s = SecretStore(tmp_path, _Clock())
    assert not s.resolves("late")
    (tmp_path / "late").write_text(_secret(b"z"))
    assert s.resolves("late")
