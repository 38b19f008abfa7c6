"""The certificate fetcher of a TLS port (``server/tls.Reloader``): nothing new
while the files stay, a new configuration once they change, the old one kept
while a rotation is half written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from delayq.cluster.certs import LOCAL_HOSTS, issue, new_ca
from delayq.server.tls import CertFiles, Reloader


def _put(path: Path, data: bytes, mtime_ns: int) -> None:
    path.write_bytes(data)
    os.utime(path, ns=(mtime_ns, mtime_ns))


def test_reloads_on_change_and_keeps_the_old_while_half_written(tmp_path: Path) -> None:
    ca = new_ca()
    first, second = (issue(ca, "node", hosts=LOCAL_HOSTS, server=True) for _ in range(2))
    files = CertFiles(cert=tmp_path / "n.crt", key=tmp_path / "n.key")
    _put(files.cert, first.cert, 1_000)
    _put(files.key, first.key, 1_000)
    r = Reloader(files, "public")
    assert r() is None and r.reloads == 0, "unchanged: nothing to hand gRPC"

    _put(files.cert, second.cert, 2_000)  # the certificate first, its key not yet
    assert r() is None and r.reloads == 0, "a key of another certificate: the old stays"
    _put(files.key, second.key, 2_000)
    assert r() is not None and r.reloads == 1
    assert r() is None

    _put(files.cert, b"not PEM", 3_000)
    assert r() is None and r.reloads == 1
    files.cert.unlink()
    assert r() is None, "a file missing for a moment: the old stays"


def test_a_port_whose_files_cannot_be_read_does_not_start(tmp_path: Path) -> None:
    files = CertFiles(cert=tmp_path / "missing.crt", key=tmp_path / "missing.key")
    with pytest.raises(OSError):
        Reloader(files, "public")
