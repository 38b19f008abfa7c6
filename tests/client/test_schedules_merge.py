"""A list of schedules over several shards (``client.schedules.merged``): every
shard's page after one name merged into the first ``page_size`` names of all,
each once, with the last name as the next token while any shard has more; paging
through with that token gives every schedule once, in name order, whatever the
shards held."""

from __future__ import annotations

import random

from delayq.client.schedules import Schedule, SchedulePage, merged
from delayq.recurrence.spec import MessageTemplate, ScheduleSpec

SPEC = ScheduleSpec(template=MessageTemplate(topic="t"), every_ms=1000)


def schedule(name: str, shard: int = 0) -> Schedule:
    return Schedule(name, SPEC, False, False, 0, 0, 0, 0, 0, 0, f"id-{shard}-{name}")


def shard_page(names: list[str], after: str, size: int) -> SchedulePage:
    """What one shard answers: its first ``size`` names after ``after``."""
    left = sorted(n for n in names if n > after)
    page = left[:size]
    return SchedulePage(tuple(schedule(n) for n in page), page[-1] if len(left) > size else "")


def test_paging_through_gives_every_name_once_in_order() -> None:
    rng = random.Random(66)
    names = [f"s{rng.randrange(10**6):06d}" for _ in range(500)]
    shards: list[list[str]] = [[], [], []]
    for n in set(names):
        shards[rng.randrange(3)].append(n)
    for size in (1, 7, 100, 1000):
        seen: list[str] = []
        token = ""
        while True:
            page = merged([shard_page(s, token, size) for s in shards], size)
            assert len(page.schedules) <= size
            seen += [s.name for s in page.schedules]
            token = page.next_page_token
            if not token:
                break
        assert seen == sorted(set(names)), size


def test_a_name_two_shards_answer_is_listed_once_and_a_gone_shard_left_out() -> None:
    a = SchedulePage((schedule("a", 0), schedule("m", 0)), "")
    b = SchedulePage((schedule("m", 1), schedule("z", 1)), "")
    page = merged([a, None, b], 10)
    assert [s.name for s in page.schedules] == ["a", "m", "z"]
    assert page.next_page_token == ""


def test_a_shard_that_says_more_keeps_the_token_even_when_all_it_gave_was_taken() -> None:
    page = merged([SchedulePage((schedule("a"),), "a"), SchedulePage((), "")], 5)
    assert (len(page.schedules), page.next_page_token) == (1, "a")
    assert merged([SchedulePage((), ""), SchedulePage((), "")], 5) == SchedulePage((), "")
