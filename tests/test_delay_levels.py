"""RocketMQ 4's delay-level list: ``durations.parse_delay_levels`` and the engine
setting it feeds (``EngineSettings.delay_levels_ms``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from delayq.durations import DEFAULT_DELAY_LEVELS, parse_delay_levels
from delayq.settings import EngineSettings


def test_a_list_gives_each_level_in_ms() -> None:
    assert parse_delay_levels("1s 5s 10s 30s 1m 2h 1d") == (
        1000,
        5000,
        10_000,
        30_000,
        60_000,
        7_200_000,
        86_400_000,
    )
    assert parse_delay_levels("  3s\t7m \n") == (3000, 420_000), "any whitespace separates"


def test_the_default_is_rocketmqs_and_the_engines() -> None:
    levels = parse_delay_levels(DEFAULT_DELAY_LEVELS)
    assert len(levels) == 18
    assert levels[:4] == (1000, 5000, 10_000, 30_000) and levels[-1] == 7_200_000
    assert EngineSettings(data_dir=Path("d")).delay_levels_ms == levels


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("1s 5x 10s", "item 2, '5x'"),
        ("1s 500ms", "item 2, '500ms'"),  # RocketMQ's units are s, m, h, d only
        ("1.5s", "item 1, '1.5s'"),
        ("10", "item 1, '10'"),  # a bare number is no RocketMQ level
        ("1s -5s", "item 2, '-5s'"),
        ("1s,5s", "item 1, '1s,5s'"),
    ],
)
def test_a_bad_item_is_named(text: str, bad: str) -> None:
    with pytest.raises(ValueError, match=f"^delay_levels: {bad}, is not a whole number"):
        parse_delay_levels(text)


@pytest.mark.parametrize("text", ["", "   "])
def test_an_empty_list_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"^delay_levels: give at least one duration"):
        parse_delay_levels(text)


@pytest.mark.parametrize(
    ("levels", "message"),
    [
        ((), "give at least one level"),
        ((1000, 0), "level 2 is 0 ms"),
        ((1000, 2 * 86_400_000), r"level 2 is 172800000 ms; .* max_delay_ms \(86400000\)"),
    ],
)
def test_the_engine_setting_refuses_what_no_message_could_use(
    levels: tuple[int, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=f"^delay_levels_ms: {message}"):
        EngineSettings(data_dir=Path("d"), delay_levels_ms=levels, max_delay_ms=86_400_000)
