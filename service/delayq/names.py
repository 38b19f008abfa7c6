"""The old name of ``argchecks`` (argument checks), kept only while ``engine/``,
``timers/`` and ``server/admin.py`` import it: other branches are editing those
now. New code imports ``argchecks``; delete this once nothing imports it."""

from .argchecks import (
    MAX_INVISIBLE_MS,
    MAX_TOPIC_LEN,
    check_group,
    check_lengths,
    check_receive,
    check_topic,
    name_problem,
)

__all__ = [
    "MAX_INVISIBLE_MS",
    "MAX_TOPIC_LEN",
    "check_group",
    "check_lengths",
    "check_receive",
    "check_topic",
    "name_problem",
]
