"""The topic book (``timers/topics``): topic ids and per-topic counts, through a checkpoint."""

from __future__ import annotations

import numpy as np

from delayq.store.checkpoint import Checkpoint
from delayq.timers.memory.topics import TopicBook


def test_the_topic_book_counts_each_way_a_message_leaves_and_survives_a_checkpoint() -> None:
    book = TopicBook()
    for name in ("a", "b"):
        book.define(book.next_id(), name)
    assert book.ids == {"a": 1, "b": 2} and book.names == {1: "a", 2: "b"}
    now = 1_000_000
    dues = np.array([now + 10, now + 20, now + 90_000, now + 30], dtype=np.int64)
    book.accepted([1, 2, 1, 1], dues, now)  # one row of b among a's
    book.accepted(2, dues[:2], now)  # one topic for the whole batch
    book.left(np.array([1]), dues[:1], cancelled=True)
    book.left(np.array([2]), dues[1:2], cancelled=False)  # rescheduled: not a cancel
    book.delivered(1, [now + 30])
    assert book.counts(1) == (1, 1, 1) and book.counts(2) == (2, 0, 0)
    assert book.total_pending() == 3 and book.counts(9) == (0, 0, 0)
    assert book.pending_by_name() == {"a": 1, "b": 2}
    pending_by_due = {t: sum(c for _, c in book.due_counts(t).histogram(now)) for t in (1, 2)}
    assert pending_by_due == {1: 1, 2: 2}, "due counts hold exactly the pending ones"
    ckpt = Checkpoint(shard=0, epoch=1)
    book.save_to(ckpt)
    again = TopicBook()
    again.load_from(ckpt)
    assert (again.ids, again.names) == (book.ids, book.names)
    assert [again.counts(t) for t in (1, 2)] == [book.counts(t) for t in (1, 2)]
    assert again.due_counts(2).histogram(now) == book.due_counts(2).histogram(now)
    assert again.next_id() == 3
