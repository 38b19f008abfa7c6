"""Server settings (``server/config``): precedence of flag, environment, file and
default; bad values name their key; durations and times."""

from __future__ import annotations

from pathlib import Path

import pytest

from delayq.durations import duration_text, parse_duration_ms, parse_time_ms
from delayq.server.config import load
from delayq.settings import AttemptLimits, FlushPolicy


def test_flag_beats_env_beats_file_beats_default(tmp_path: Path) -> None:
    cfg = tmp_path / "delayq.toml"
    cfg.write_text('listen = "0.0.0.0:1"\nflush = "sync"\nprecision = "500ms"\nwindow = "1h"\n')
    s = load({}, {}, cfg)
    assert (s.listen, s.engine.flush, s.engine.precision_ms) == ("0.0.0.0:1", FlushPolicy.SYNC, 500)
    s = load({}, {"DELAYQ_LISTEN": "0.0.0.0:2"}, cfg)
    assert s.listen == "0.0.0.0:2"
    s = load({"listen": "0.0.0.0:3"}, {"DELAYQ_LISTEN": "0.0.0.0:2"}, cfg)
    assert s.listen == "0.0.0.0:3"
    assert load({}, {}).listen == "127.0.0.1:7420"
    assert load({}, {}).engine.data_dir == Path("delayq-data")


def test_bad_settings_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="flush"):
        load({"flush": "sometimes"}, {})
    with pytest.raises(ValueError, match="precision"):
        load({"precision": "fast"}, {})
    # a window shorter than ten checkpoints could lose timers across a kill
    with pytest.raises(ValueError, match=r"window_ms \(500\) .* flush_interval_ms \(100\)"):
        load({"window": "500ms", "flush_interval": "100ms", "precision": "50ms"}, {})
    assert load({"window": "1s", "flush_interval": "100ms", "precision": "50ms"}, {})
    with pytest.raises(ValueError, match="grpc_server: use native or grpcio"):
        load({}, {"DELAYQ_GRPC_SERVER": "tornado"})
    assert load({}, {}).grpc_server == "native"
    assert load({"grpc_server": "grpcio"}, {"DELAYQ_GRPC_SERVER": "native"}).grpc_server == "grpcio"
    cfg = tmp_path / "c.toml"
    cfg.write_text("colour = 'blue'\n")
    with pytest.raises(ValueError, match="unknown keys"):
        load({}, {}, cfg)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("listen", "127.0.0.1:99999"),
        ("listen", "garbage"),
        ("listen", "127.0.0.1:"),
        ("metrics_listen", "localhost:http"),
        ("advertise", "::1:7420"),
    ],
)
def test_bad_addresses_name_the_key(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=f"^{name}: "):
        load({name: value}, {})


def test_good_addresses_pass() -> None:
    got = load({"listen": "[::]:0", "metrics_listen": "off", "advertise": "dq-0.dq:7420"}, {})
    assert (got.listen, got.metrics_listen, got.advertise) == ("[::]:0", "off", "dq-0.dq:7420")
    assert load({"listen": ":7420"}, {"DELAYQ_METRICS_LISTEN": "0.0.0.0:9100"}).listen == ":7420"


def test_durations_and_times() -> None:
    assert parse_duration_ms("250") == 250
    assert parse_duration_ms("1.5s") == 1500
    assert parse_duration_ms("2d") == 172_800_000
    with pytest.raises(ValueError, match="bad duration"):
        parse_duration_ms("-1s")
    assert parse_time_ms("1970-01-01T00:00:01Z") == 1000
    assert parse_time_ms("1700000000000") == 1_700_000_000_000
    with pytest.raises(ValueError, match="zone"):
        parse_time_ms("2026-01-01T00:00:00")
    texts = [duration_text(ms) for ms in (0, 250, 1500, 90_000, 7_200_000, 172_800_000)]
    assert texts == ["0ms", "250ms", "1500ms", "90s", "2h", "2d"]
    assert all(parse_duration_ms(duration_text(ms)) == ms for ms in (0, 1, 61_000, 86_400_001))


def test_tls_and_admin_settings_in_all_three_forms(tmp_path: Path) -> None:
    cfg = tmp_path / "delayq.toml"
    cfg.write_text('tls_cert = "n.crt"\ntls_key = "n.key"\nadmin_listen = "0.0.0.0:9"\n')
    env = {"DELAYQ_TLS_CLIENT_CA": "clients.pem"}
    s = load({"admin_client_ca": "control.pem"}, env, cfg)
    assert (s.tls_cert, s.tls_key, s.admin_listen) == (Path("n.crt"), Path("n.key"), "0.0.0.0:9")
    assert (s.tls_client_ca, s.admin_client_ca) == (Path("clients.pem"), Path("control.pem"))
    peer = s.peer_tls
    assert peer is not None and (peer.ca, peer.cert) == (Path("control.pem"), Path("n.crt"))
    same = load({}, env, cfg)  # the admin port defaults to the clients' CA
    assert same.admin_client_ca == Path("clients.pem")
    plain = load({}, {})
    assert (plain.tls, plain.peer_tls, plain.admin_listen) == (False, None, "127.0.0.1:7422")
    assert s.public_tls and s.forward_tls == s.peer_tls
    cfg.write_text(cfg.read_text() + 'admin_client_ca = "c.pem"\npublic_tls = false\n')
    from_file = load({}, {}, cfg)
    assert (from_file.public_tls, from_file.forward_tls) == (False, None)
    assert from_file.peer_tls is not None  # replication still over TLS
    from_env = load({}, {"DELAYQ_PUBLIC_TLS": "off"}, cfg)
    assert from_env.public_tls is False


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        ({"tls_cert": "a"}, "tls_cert: give the certificate and its key"),
        ({"tls_key": "a"}, "tls_cert: give the certificate and its key"),
        ({"tls_client_ca": "a"}, "tls_client_ca: only with TLS"),
        ({"admin_client_ca": "a"}, "admin_client_ca: only with TLS"),
        ({"tls_cert": "a", "tls_key": "b"}, "admin_client_ca: with TLS the admin port"),
        ({"admin_listen": "nowhere"}, "admin_listen"),
        ({"public_tls": "false"}, "public_tls: only with TLS"),
        ({"tls_cert": "a", "tls_key": "b", "tls_client_ca": "c", "public_tls": "0"}, "plaintext"),
        (
            {"tls_cert": "a", "tls_key": "b", "admin_client_ca": "c", "public_tls": "y"},
            "public_tls",
        ),
    ],
)
def test_tls_settings_that_do_not_go_together(flags: dict[str, str], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        load(flags, {})


def test_max_delivery_attempts_a_default_and_per_group_in_all_three_forms(
    tmp_path: Path,
) -> None:
    f = tmp_path / "c.toml"
    f.write_text('max_delivery_attempts = "5 billing=2"\n')
    limits = load({}, {}, f).engine.delivery_attempts
    assert (limits.for_group("billing"), limits.for_group("x")) == (2, 5)
    env = {"DELAYQ_MAX_DELIVERY_ATTEMPTS": "0 audit=3"}
    limits = load({}, env, f).engine.delivery_attempts
    assert (limits.for_group("audit"), limits.for_group("billing")) == (3, 0)
    assert load({"max_delivery_attempts": "7"}, env, f).engine.delivery_attempts.default == 7
    assert load({}, {}).engine.delivery_attempts == AttemptLimits(16)
    for bad in ("many", "=3", "billing=", "billing=-1", "-2"):
        with pytest.raises(ValueError, match="max_delivery_attempts"):
            load({"max_delivery_attempts": bad}, {})


def test_push_settings_in_all_three_forms(tmp_path: Path) -> None:
    defaults = load({}, {})
    assert (defaults.push, defaults.push_allow, defaults.push_secret_dir) == (True, (), None)
    assert defaults.push_max_connections == 256
    cfg = tmp_path / "delayq.toml"
    cfg.write_text(
        'push_allow = ["10.0.0.0/8", "127.0.0.1"]\npush_secret_dir = "/etc/delayq-push"\n'
        "push_max_connections = 64\npush = false\n"
    )
    s = load({}, {}, cfg)
    assert s.push_allow == ("10.0.0.0/8", "127.0.0.1/32")
    assert (s.push, s.push_secret_dir, s.push_max_connections) == (
        False,
        Path("/etc/delayq-push"),
        64,
    )
    s = load({"push_allow": "127.0.0.1/32, 10.231.0.0/16"}, {"DELAYQ_PUSH": "true"}, cfg)
    assert s.push_allow == ("127.0.0.1/32", "10.231.0.0/16") and s.push
    assert load({}, {"DELAYQ_PUSH_ALLOW": "::1"}).push_allow == ("::1/128",)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        ({"push_allow": "10.0.0.0/33"}, "push_allow: .*'10.0.0.0/33'"),
        ({"push_allow": "intranet"}, "push_allow: .*'intranet'"),
        ({"push": "maybe"}, "push: use true or false"),
        ({"push_max_connections": "0"}, "push_max_connections: must be at least 1"),
    ],
)
def test_bad_push_settings_name_the_key(flags: dict[str, str], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        load(flags, {})
