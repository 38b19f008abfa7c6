"""``delayq verify`` on directories a real engine wrote, healthy and damaged:
each kind of damage is named, and after ``--fix`` an engine opens the directory
and delivers every message that was intact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from delayq import Engine, FakeClock, Forwarded
from delayq.cli.main import main
from delayq.engine import CancelOutcome, MessageState, ScheduleRequest
from delayq.formats.fileheader import FileHeader
from delayq.formats.timer import TIMER_RECORD_SIZE
from delayq.store.wheel import MAGIC as WHEEL_MAGIC
from delayq.store.wheel import TimerWheel
from delayq.verify import DirectoryError, Report, verify
from tests.support.engines import START_MS, small_settings
from tests.verify.datadirs import Made, deliver_all, flip, message_positions, segment_of

Make = Callable[..., Made]


def kinds(report: Report, *, left: bool = False) -> set[str]:
    found = report.damaged if left else [f for f in report.findings if f.damage]
    return {f.kind for f in found}


@pytest.mark.parametrize("kill", [False, True], ids=["closed", "killed"])
def test_a_healthy_directory_verifies_clean(made: Make, kill: bool) -> None:
    m = made(kill=kill)
    report = verify(m.data)
    assert report.exit_code == 0 and kinds(report) == set()
    notes = {f.kind for f in report.findings}
    assert notes == ({"warm-tail"} if kill else set()), "a kill's warm tail is a note"
    assert {r.status for r in report.files.values()} == {"OK"}
    assert deliver_all(m.data, m.clock) == sorted(m.bodies)


def test_a_torn_commitlog_tail_is_named_and_cut(made: Make) -> None:
    m = made(kill=True)
    pos, length = message_positions(m.data)[m.after[-1]]
    path, base = segment_of(m.data, "commitlog", pos)
    os.truncate(path, pos - base + length // 2)  # the last record cut mid-way
    report = verify(m.data)
    assert kinds(report) == {"torn-tail"} and report.exit_code == 1
    [torn] = report.damaged
    assert torn.fixable and torn.position == pos and torn.file.startswith("commitlog/")
    fixed = verify(m.data, fix=True)
    assert fixed.exit_code == 0 and fixed.files[torn.file].status == "FIXED"
    assert os.path.getsize(path) == pos - base, "cut after the last valid record"
    assert verify(m.data).exit_code == 0
    assert deliver_all(m.data, m.clock) == sorted(m.bodies[:-1])


def test_a_torn_timerlog_tail_is_named_and_cut(made: Make) -> None:
    m = made(kill=True)
    tl = m.data / "timerlog"
    [path] = sorted(tl.glob("*.seg"))
    data = path.read_bytes().rstrip(b"\0")
    os.truncate(path, len(data) - TIMER_RECORD_SIZE // 2)
    # the cut record's slot now points past the end too (as after a power loss)
    assert kinds(verify(m.data)) == {"torn-tail", "slot-past-end"}
    assert verify(m.data, fix=True).exit_code == 0
    assert verify(m.data).exit_code == 0
    # the cut record's message is linked again from its CommitLog record on start
    assert deliver_all(m.data, m.clock) == sorted(m.bodies)


def test_a_flipped_byte_before_the_checkpoint_is_named_not_cut(made: Make) -> None:
    m = made()
    victim = m.before[10]
    pos, length = message_positions(m.data)[victim]
    path, base = segment_of(m.data, "commitlog", pos)
    size = os.path.getsize(path)
    flip(path, pos - base + length - 2)  # in the body
    report = verify(m.data)
    assert kinds(report) == {"corrupt-record"} and report.exit_code == 1
    [bad] = report.damaged
    assert bad.position == pos and not bad.fixable
    assert "valid records follow" in bad.detail and "quarantined" in bad.detail
    fixed = verify(m.data, fix=True)
    assert fixed.exit_code == 1, "damage --fix cannot repair is left, and said so"
    assert fixed.damaged[0].action.startswith("not repaired")
    assert os.path.getsize(path) == size, "no valid record was cut"
    intact = sorted(b for b in m.bodies if b != victim)
    assert deliver_all(m.data, m.clock) == intact


def test_a_flipped_byte_after_the_checkpoint_warns_that_a_start_cuts_there(made: Make) -> None:
    m = made(kill=True)
    pos, length = message_positions(m.data)[m.after[3]]
    path, base = segment_of(m.data, "commitlog", pos)
    flip(path, pos - base + length - 1)
    size = os.path.getsize(path)
    report = verify(m.data, fix=True)
    [bad] = report.damaged
    assert bad.kind == "corrupt-record" and "would cut the log here" in bad.detail
    assert report.exit_code == 1
    assert os.path.getsize(path) == size, "the valid records after it are still there"


def test_a_damaged_length_field_does_not_hide_the_valid_records_after_it(made: Make) -> None:
    # one bit of a record's length flipped: stepping over by it lands in the warm tail,
    # past four valid records; they must be seen (corrupt-record, nothing cut), not
    # taken for a torn tail that --fix would cut
    m = made(kill=True)
    pos, _ = message_positions(m.data)[m.after[5]]
    path, base = segment_of(m.data, "commitlog", pos)
    flip(path, pos - base + 1)  # the length's second byte: +16384
    size = os.path.getsize(path)
    report = verify(m.data, fix=True)
    assert kinds(report) == {"corrupt-record"}, report.damaged
    [bad] = report.damaged
    assert bad.position == pos and "valid records follow" in bad.detail
    assert os.path.getsize(path) == size, "no valid record was cut"


def test_a_wheel_slot_past_the_timerlog_end_is_rebuilt(made: Make) -> None:
    m = made()
    path = m.data / "timerwheel"
    with open(path, "rb") as fh:
        head = FileHeader.decode(fh.read(32), WHEEL_MAGIC, "wheel")
    end = sum(os.path.getsize(p) for p in (m.data / "timerlog").glob("*.seg"))
    wheel = TimerWheel(path, head.base, head.param, START_MS)
    try:
        slot, entry = max(wheel.occupied())  # a slot holding some of the messages
        wheel.put(slot, entry.first, end + 10 * TIMER_RECORD_SIZE, entry.num + 10)
        stray = slot + 3  # and one with no records at all
        assert wheel.get(stray) is None
        wheel.put(stray, end + TIMER_RECORD_SIZE, end + TIMER_RECORD_SIZE, 1)
        wheel.flush()
    finally:
        wheel.close()
    report = verify(m.data)
    assert kinds(report) == {"slot-past-end"}
    assert {f.position for f in report.damaged} == {slot, stray}
    fixed = verify(m.data, fix=True)
    assert fixed.exit_code == 0
    actions = {f.position: f.action for f in fixed.findings}
    assert actions[slot].startswith(f"rebuilt from its {entry.num} ")
    assert actions[stray].startswith("cleared")
    assert verify(m.data).exit_code == 0
    assert deliver_all(m.data, m.clock) == sorted(m.bodies)


def test_a_wheel_slot_with_a_wrong_count_is_rebuilt(made: Make) -> None:
    m = made()
    path = m.data / "timerwheel"
    with open(path, "rb") as fh:
        head = FileHeader.decode(fh.read(32), WHEEL_MAGIC, "wheel")
    wheel = TimerWheel(path, head.base, head.param, START_MS)
    try:
        slot, entry = max(wheel.occupied())
        wheel.put(slot, entry.first, entry.last, entry.num + 5)
    finally:
        wheel.close()
    assert kinds(verify(m.data)) == {"slot-mismatch"}
    assert verify(m.data, fix=True).exit_code == 0
    assert verify(m.data).exit_code == 0


@pytest.mark.parametrize("kill", [False, True], ids=["closed", "killed"])
def test_a_missing_checkpoint_is_named_and_the_next_start_replays(made: Make, kill: bool) -> None:
    m = made(kill=kill)
    (m.data / "checkpoint.json").unlink()
    report = verify(m.data)
    assert kinds(report) == {"checkpoint-missing"} and report.exit_code == 1
    fixed = verify(m.data, fix=True)
    assert fixed.exit_code == 0 and "replays the whole CommitLog" in fixed.findings[0].action
    e = Engine(small_settings(m.data), m.clock, background=False).start()
    try:
        assert e.recovery["checkpoint"] is False
        assert e.recovery["commitlog_replayed"] >= len(m.bodies), "replayed from the start"
    finally:
        e.close()
    assert deliver_all(m.data, m.clock) == sorted(m.bodies)


def test_a_corrupt_checkpoint_is_set_aside(made: Make) -> None:
    m = made()
    path = m.data / "checkpoint.json"
    path.write_text(path.read_text().replace('"next_seq":', '"next_seq":1'))
    assert kinds(verify(m.data)) == {"checkpoint-corrupt"}
    fixed = verify(m.data, fix=True)
    assert fixed.exit_code == 0 and (m.data / "checkpoint.json.bad").exists()
    assert deliver_all(m.data, m.clock) == sorted(m.bodies)


def test_the_epoch_history_is_reported_and_its_damage_named_never_repaired(made: Make) -> None:
    from delayq.epochs import EpochHistory
    from delayq.store.epochfile import EPOCHS_FILE, save_epochs

    m = made()
    report = verify(m.data)
    assert report.files[EPOCHS_FILE].facts["entries"][0][0] == 1 and report.exit_code == 0
    path = m.data / EPOCHS_FILE
    save_epochs(path, EpochHistory.of([(1, 0), (2, 10**12)]))  # an epoch whose writes were lost
    report = verify(m.data)
    assert report.exit_code == 0 and {f.kind for f in report.findings} == {"epochs-ahead"}
    path.write_text(path.read_text().replace('"entries"', '"entriez"'))
    report = verify(m.data, fix=True)
    assert kinds(report, left=True) == {"epochs-corrupt"} and report.exit_code == 1


def test_a_checkpoint_past_the_log_end_is_set_aside(made: Make) -> None:
    m = made()
    pos, _ = message_positions(m.data)[m.before[-1]]
    path, base = segment_of(m.data, "commitlog", pos)
    os.truncate(path, pos - base + 5)  # the checkpoint covered what is cut now
    report = verify(m.data)
    assert kinds(report) == {"torn-tail", "checkpoint-ahead"}
    assert verify(m.data, fix=True).exit_code == 0
    assert verify(m.data).exit_code == 1, "no checkpoint until the next start writes one"
    assert deliver_all(m.data, m.clock) == sorted(m.before[:-1])


def test_a_state_byte_that_contradicts_a_delivery_is_set(tmp_path: Path) -> None:
    clock = FakeClock(START_MS)
    data = tmp_path / "data"
    e = Engine(small_settings(data), clock, background=False).start()
    [out] = e.schedule([ScheduleRequest(topic="t", body=b"x", delay_ms=200)])
    assert out.id is not None
    while clock.now_ms() < START_MS + 1_000:
        clock.advance(50)
        e.pump()
    assert e.lookup(out.id).state is MessageState.DELIVERED
    e.close()
    seq = 1  # the first message's
    chunk = data / "state" / f"{0:012d}.map"
    with open(chunk, "r+b") as fh:
        fh.seek(64 + seq)  # the chunk's entries start at byte 64 (see store/statemap.py)
        fh.write(b"\0")
    report = verify(data)
    assert kinds(report) == {"state-mismatch"} and report.damaged[0].position == seq
    assert verify(data, fix=True).exit_code == 0
    assert verify(data).exit_code == 0


def test_forwards_verify_clean_and_a_lost_side_file_is_made_again(tmp_path: Path) -> None:
    """A forward to shard 5 (the byte names it) and one to shard 700 (byte 5 and
    the side file ``state/*.fwd``): clean; without the side file, a replay makes
    it again."""
    clock = FakeClock(START_MS)
    data = tmp_path / "data"
    e = Engine(small_settings(data), clock, background=False).start()
    sent = [o.id for o in e.schedule([ScheduleRequest(topic="t", body=b"x", delay_ms=9_000)] * 3)]
    assert all(sent)
    e.moving.release([str(sent[0])], target=5)
    e.moving.release([str(sent[1])], target=700)
    e.close()
    assert verify(data).exit_code == 0 and kinds(verify(data)) == set()
    os.unlink(data / "state" / f"{0:012d}.fwd")
    report = verify(data)
    assert kinds(report) == {"missing"} and report.damaged[0].file == "state/000000000000.fwd"
    assert verify(data, fix=True).exit_code == 0
    e = Engine(small_settings(data), clock, background=False).start()
    try:
        with pytest.raises(Forwarded) as moved:
            e.lookup(str(sent[1]))
        assert moved.value.target == 700
        assert e.cancel([str(sent[0]), str(sent[2])])[1] is CancelOutcome.CANCELLED
    finally:
        e.close()
    assert verify(data).exit_code == 0


def test_a_directory_held_by_an_engine_is_refused(made: Make) -> None:
    m = made()
    e = Engine(small_settings(m.data), m.clock, background=False).start()
    try:
        with pytest.raises(DirectoryError, match="in use"):
            verify(m.data)
        assert main(["verify", str(m.data)]) == 2
    finally:
        e.close()
    assert verify(m.data).exit_code == 0


def test_what_is_no_data_directory_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verify", str(tmp_path / "nope")]) == 2
    assert "no such directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["verify", str(tmp_path / "empty")]) == 2
    assert "not a delayq data directory" in capsys.readouterr().err


def test_json_report_parses(made: Make, capsys: pytest.CaptureFixture[str]) -> None:
    m = made(kill=True)
    (m.data / "checkpoint.json").unlink()
    assert main(["verify", str(m.data), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_code"] == 1 and doc["summary"]["DAMAGED"] == 1
    [ckpt] = [f for f in doc["files"] if f["file"] == "checkpoint.json"]
    assert ckpt["status"] == "DAMAGED"
    assert ckpt["findings"][0]["kind"] == "checkpoint-missing"


def test_the_command_in_a_subprocess(made: Make) -> None:
    m = made(kill=True)
    pos, length = message_positions(m.data)[m.after[-1]]
    path, base = segment_of(m.data, "commitlog", pos)
    os.truncate(path, pos - base + length - 3)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "delayq.cli.main", "verify", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=os.environ)

    helped = run("--help")
    assert helped.returncode == 0 and "--fix" in helped.stdout and "torn tails" in helped.stdout
    checked = run(str(m.data))
    assert checked.returncode == 1
    assert "DAMAGED  commitlog/" in checked.stdout and "torn-tail" in checked.stdout
    repaired = run(str(m.data), "--fix")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "FIXED    commitlog/" in repaired.stdout
    again = run(str(m.data), "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["exit_code"] == 0


def test_a_damaged_receipt_key_is_named_never_repaired(made: Make) -> None:
    from delayq.store.receiptkey import RECEIPT_KEY_FILE

    m = made()
    path = m.data / RECEIPT_KEY_FILE
    assert path.exists() and verify(m.data).exit_code == 0
    path.write_bytes(path.read_bytes()[:-1])
    report = verify(m.data, fix=True)
    assert kinds(report, left=True) == {"receipt-key-corrupt"} and report.exit_code == 1


@pytest.mark.parametrize("kill", [False, True], ids=["closed", "killed"])
def test_group_policies_and_hand_outs_verify_clean_and_survive_a_fix(
    tmp_path: Path, kill: bool
) -> None:
    """POLICY and HANDOUT records (before and after the checkpoint) are records
    ``verify`` reads like any other; a torn HANDOUT is named and cut, and the
    engine opens the directory with the policy and the attempts it had."""
    from delayq.engine import GroupPolicy

    clock, data = FakeClock(START_MS), tmp_path / "data"
    e = Engine(small_settings(data), clock, background=False).start()
    e.set_group_policy("t", "g", GroupPolicy(max_attempts=3))
    e.schedule([ScheduleRequest(topic="t", body=b"%d" % i, delay_ms=10) for i in range(6)])
    for _ in range(10):
        clock.advance(10)
        e.pump()
    assert len(e.receive("t", "g", max_messages=3)) == 3
    e.checkpoint()
    assert len(e.receive("t", "g", max_messages=3)) == 3
    end = e.commitlog_end
    if kill:
        e.abandon()
    else:
        e.close()
    report = verify(data)
    assert report.exit_code == 0 and kinds(report) == set()
    want = [2] * 6  # all six handed out once: their next attempt is the second
    if kill:
        path, base = segment_of(data, "commitlog", end - 1)
        os.truncate(path, end - base - 5)  # the last record, a HANDOUT, torn
        assert kinds(verify(data)) == {"torn-tail"}
        assert verify(data, fix=True).exit_code == 0
        want = [1, 1, 1, 2, 2, 2]  # the torn hand-out's three: never handed out
    again = Engine(small_settings(data), clock, background=False).start()
    try:
        assert again.group_policy("t", "g") == GroupPolicy(max_attempts=3)
        clock.advance(60_000)
        got = again.receive("t", "g", max_messages=10)
        assert sorted(m.attempt for m in got) == want
    finally:
        again.close()


def test_a_checkpoint_holding_an_offset_past_its_ready_queue_is_set_aside(made: Make) -> None:
    from delayq.store import jsonfile
    from delayq.store.checkpoint import FORMAT, VERSION

    m = made()
    path = m.data / "checkpoint.json"
    body = jsonfile.load(path, FORMAT, VERSION, "checkpoint")
    assert body is not None
    body["groups"] = {"1": {"g": {"committed": 0, "acked": [], "inflight": [[99, 1, 0, 0]]}}}
    jsonfile.save(path, FORMAT, VERSION, body)
    report = verify(m.data)
    assert kinds(report) == {"checkpoint-ahead"}
    assert report.files["checkpoint.json"].facts["in_flight"] == 1
    assert verify(m.data, fix=True).exit_code == 0
    assert deliver_all(m.data, m.clock) == sorted(m.bodies), "replayed from the log"
