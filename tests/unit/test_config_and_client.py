"""Pure pieces of the server and client: settings precedence, durations, routing,
retry policy."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from delayq.addresses import check_target
from delayq.cli.main import main
from delayq.client import AsyncClient, Client
from delayq.client.core import RetryPolicy, jump_hash, retry_after_ms
from delayq.durations import parse_duration_ms, parse_time_ms
from delayq.server.config import load
from delayq.settings import FlushPolicy


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


def test_jump_hash_is_stable_and_moves_little_when_growing() -> None:
    keys = range(10_000)
    before = [jump_hash(k * 0x9E3779B97F4A7C15, 4) for k in keys]
    after = [jump_hash(k * 0x9E3779B97F4A7C15, 5) for k in keys]
    assert set(before) == {0, 1, 2, 3}
    moved = sum(a != b for a, b in zip(before, after, strict=True))
    assert all(b == 4 for a, b in zip(before, after, strict=True) if a != b)
    assert 0.15 < moved / 10_000 < 0.25  # about 1/5


def test_retry_policy_honours_retry_after_and_gives_up() -> None:
    p = RetryPolicy(attempts=3, base_s=0.01, max_s=0.05)
    assert p.delay_s(1, grpc.StatusCode.INVALID_ARGUMENT, None) is None
    assert p.delay_s(1, grpc.StatusCode.RESOURCE_EXHAUSTED, 200) == pytest.approx(0.2)
    assert 0 <= (p.delay_s(2, grpc.StatusCode.UNAVAILABLE, None) or 0) <= 0.05
    assert p.delay_s(3, grpc.StatusCode.UNAVAILABLE, None) is None
    assert retry_after_ms([("retry-after-ms", "150")]) == 150
    assert retry_after_ms(None) is None


def test_route_table_sends_keys_and_ids_to_their_shards() -> None:
    from delayq.client.core import Outgoing, RouteTable, gather
    from delayq.ids import MessageId
    from delayq.v1 import delayq_pb2 as pb

    resp = pb.GetRouteResponse(
        topology_epoch=3,
        shard_count=3,
        shards=[pb.ShardRoute(index=i, master=f"h{i}:1") for i in (2, 0, 1)],
    )
    table = RouteTable.from_response(resp)
    assert table.masters == ("h0:1", "h1:1", "h2:1")
    msgs = [Outgoing(topic="t", body=b"x", key=k) for k in ("a", "b", "a", "")]
    groups = table.schedule_groups(msgs, spread=0)
    shard_of = {i: s for s, idx in groups.items() for i in idx}
    assert shard_of[0] == shard_of[2], "one key, one shard"
    assert table.id_groups([str(MessageId(2, 1, 99)), "junk"]) == {2: [0], 0: [1]}
    assert gather(3, [([2, 0], ["c", "a"]), ([1], ["b"])]) == ["a", "b", "c"]
    single = RouteTable(1, ("only:1",))
    assert single.shard_for_key("anything", 7) == single.shard_for_id("junk") == 0
    with pytest.raises(ValueError, match="incomplete"):
        RouteTable.from_response(pb.GetRouteResponse(shards=[pb.ShardRoute(index=1)]))


@pytest.mark.parametrize(
    "target",
    [
        "127.0.0.1:7420",
        "[::1]:7420",
        "dq-0.dq.svc:1",
        ":7420",
        "dns:///dq:7420",
        "unix:/tmp/dq.sock",
    ],
)
def test_client_targets_that_can_be_dialled_pass(target: str) -> None:
    check_target(target)
    Client(target).close()  # the client takes them too (gRPC connects lazily)


@pytest.mark.parametrize(
    "target", ["127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1", "host:http", "::1:7420", "localhost:"]
)
def test_client_targets_gRPC_would_misread_are_refused_naming_the_field(target: str) -> None:
    with pytest.raises(ValueError, match=r"^address: "):
        check_target(target)
    with pytest.raises(ValueError, match=r"^address: "):
        Client(target)  # 127.0.0.1:99999 would otherwise dial port 34463
    with pytest.raises(ValueError, match=r"^address: "):
        AsyncClient(target)


def test_the_cli_names_its_flag_for_a_server_it_cannot_dial(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["stats", "--server", "127.0.0.1:99999"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("delayq stats: --server: '127.0.0.1:99999' is not host:port"), err
