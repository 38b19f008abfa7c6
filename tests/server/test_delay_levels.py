"""The server's RocketMQ 4 delay-level list (``--delay-levels``): its text
(``durations.parse_delay_levels``) and where it comes from (flag, environment,
file). The engine setting it feeds (``EngineSettings.delay_levels_ms``) is
tested in ``tests/engine/test_delay_levels.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from delayq.durations import DEFAULT_DELAY_LEVELS, parse_delay_levels
from delayq.server.config import load


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


def test_the_default_is_rocketmqs() -> None:
    levels = parse_delay_levels(DEFAULT_DELAY_LEVELS)
    assert len(levels) == 18
    assert levels[:4] == (1000, 5000, 10_000, 30_000) and levels[-1] == 7_200_000


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


def test_delay_levels_from_flag_env_and_file(tmp_path: Path) -> None:
    assert len(load({}, {}).engine.delay_levels_ms) == 18, "RocketMQ's 18 by default"
    cfg = tmp_path / "delayq.toml"
    cfg.write_text('delay_levels = "1s 1m"\n')
    assert load({}, {}, cfg).engine.delay_levels_ms == (1000, 60_000)
    env = {"DELAYQ_DELAY_LEVELS": "2s 2m"}
    assert load({}, env, cfg).engine.delay_levels_ms == (2000, 120_000)
    assert load({"delay_levels": "3h"}, env, cfg).engine.delay_levels_ms == (10_800_000,)
    with pytest.raises(ValueError, match=r"^delay_levels: item 2, '5q'"):
        load({"delay_levels": "1s 5q"}, {})
    with pytest.raises(ValueError, match=r"delay_levels_ms: level 1 is 0 ms"):
        load({"delay_levels": "0s"}, {})
    with pytest.raises(ValueError, match=r"delay_levels_ms: level 2 .* max_delay_ms"):
        load({"delay_levels": "1h 2d", "max_delay": "1d"}, {})
