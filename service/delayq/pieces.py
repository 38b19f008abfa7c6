"""The old name of ``batchops`` (batch operations in single C calls), kept only
while ``timers/`` imports it: another branch is moving those modules now. New
code imports ``batchops``; delete this once nothing imports it."""

from .batchops import (
    FEW,
    TopicIds,
    by_topic,
    first_of_each,
    high,
    join_rows,
    low,
    rows_at,
    spans,
    strided,
    take_rows,
)

__all__ = [
    "FEW",
    "TopicIds",
    "by_topic",
    "first_of_each",
    "high",
    "join_rows",
    "low",
    "rows_at",
    "spans",
    "strided",
    "take_rows",
]
