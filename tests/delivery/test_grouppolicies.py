"""A shard's groups' policies (``delivery.grouppolicies``) with push targets: the
push groups among those set, a push group's backoff without one of its own, and
the target through a POLICY record's values and a checkpoint file, old ones too."""

from __future__ import annotations

import json
from pathlib import Path

from delayq.delivery.grouppolicies import GroupPolicies, policy_of, record_of
from delayq.delivery.policy import PUSH_BACKOFF, Backoff, GroupPolicy
from delayq.delivery.pushtarget import PushTarget
from delayq.settings import EngineSettings
from delayq.store.checkpoint import Checkpoint

TARGET = PushTarget(url="https://u:p@h.example/in?q=1", headers=(("x-a", "1"),), secret_ref="s")
PUSH = GroupPolicy(max_attempts=4, push=TARGET)


def _policies() -> GroupPolicies:
    return GroupPolicies(EngineSettings(data_dir=Path("unused")), seed=1)


def test_the_push_groups_are_those_set_with_a_target() -> None:
    p = _policies()
    p.set(1, "pushed", PUSH)
    p.set(1, "pulled", GroupPolicy(max_attempts=2))
    assert p.pushing == {(1, "pushed"): PUSH}
    p.set(1, "pushed", GroupPolicy(max_attempts=4))  # ``delayq group set --pull``
    assert p.pushing == {}


def test_a_push_group_without_a_backoff_backs_off_by_push_backoff() -> None:
    p = _policies()
    assert p.backoff(GroupPolicy()) is None, "a pull group: again at once"
    wait = p.backoff(PUSH)
    assert wait is not None
    waits = [wait(n) for n in range(1, 12)]
    assert all(0 <= w <= PUSH_BACKOFF.delay_ms(n) for n, w in enumerate(waits, 1))
    assert max(waits) > 1000, "grows past the first second (full jitter below each)"
    own = p.backoff(GroupPolicy(backoff=Backoff(initial_ms=50), push=TARGET))
    assert own is not None and own(5) == 50, "its own, when it has one"


def test_a_target_goes_through_a_record_and_a_checkpoint_file(tmp_path: Path) -> None:
    rec = record_of(1, "pushed", PUSH)
    assert policy_of(rec) == PUSH and rec.push
    assert not record_of(1, "pulled", GroupPolicy()).push
    p = _policies()
    p.set(1, "pushed", PUSH)
    p.set(2, "pulled", GroupPolicy(max_attempts=2))
    ckpt = Checkpoint(shard=0, epoch=1)
    p.save_to(ckpt)
    ckpt.save(tmp_path / "checkpoint.json")
    doc = json.loads((tmp_path / "checkpoint.json").read_text())["body"]
    assert "push" not in doc["policies"]["2"]["pulled"], "a pull group's as before push"
    again = _policies()
    loaded = Checkpoint.load(tmp_path / "checkpoint.json")
    assert loaded is not None
    again.restore(loaded)
    assert again.stored == p.stored and again.pushing == {(1, "pushed"): PUSH}
