"""EventConsumer._close_gaps: a fetch that skips offsets of a partition is cut at the hole and
the partition read again from it; a hole that stays is skipped after GAP_RETRIES fetches and
GAP_PATIENCE_SECONDS.

The embedded broker leaves a record out only now and then (about one 30-second run in ten of
three concurrent writers), so these cases feed the consumer the fetch results such a broker
gives, as aiokafka hands them over (ConsumerRecord per offset), and check what is delivered
and where the partition is read from next.
"""
from __future__ import annotations

import logging
import time

import pytest
from aiokafka import ConsumerRecord, TopicPartition

from schedmesh.bus import consumer as consumer_module
from schedmesh.bus.consumer import EventConsumer

PODS = TopicPartition("schedmesh.pods", 0)
EVENTS = TopicPartition("schedmesh.events", 1)


class SeekLog:
    """What _close_gaps asks of the aiokafka consumer: only seek."""

    def __init__(self) -> None:
        self.seeks: list[tuple[TopicPartition, int]] = []

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks.append((tp, offset))


def records(tp: TopicPartition, *offsets: int, age: float = 0.0) -> list[ConsumerRecord]:
    """Records written `age` seconds ago."""
    written = int((time.time() - age) * 1000)
    return [ConsumerRecord(tp.topic, tp.partition, o, written, 0, b"k", str(o).encode(), None, 1, 1, ())
            for o in offsets]


def consumer_at(**next_offsets: int) -> EventConsumer:
    c = EventConsumer("127.0.0.1:1", ["schedmesh.pods", "schedmesh.events"], probe_interval=None)
    by_name = {"pods": PODS, "events": EVENTS}
    c._next_offset = {by_name[k]: v for k, v in next_offsets.items()}
    return c


def offsets(batches: dict) -> dict[str, list[int]]:
    return {tp.topic.split(".")[1]: [m.offset for m in msgs] for tp, msgs in batches.items()}


@pytest.mark.parametrize("fetched, delivered, seek, next_pods", [
    pytest.param({PODS: (5, 6, 7)}, {"pods": [5, 6, 7]}, None, 8, id="contiguous: all of it"),
    pytest.param({PODS: (6, 7)}, {}, 5, 5, id="hole at the start: nothing, read again from it"),
    pytest.param({PODS: (5, 6, 8, 9)}, {"pods": [5, 6]}, 7, 7, id="hole inside: up to it, read again from it"),
    pytest.param({PODS: (6, 7), EVENTS: (3, 4)}, {"events": [3, 4]}, 5,
                 5, id="another partition is unaffected"),
])
def test_a_fetch_is_cut_at_a_hole(fetched, delivered, seek, next_pods) -> None:
    c, log = consumer_at(pods=5, events=3), SeekLog()
    out = c._close_gaps(log, {tp: records(tp, *o) for tp, o in fetched.items()})
    assert offsets(out) == delivered
    assert log.seeks == ([(PODS, seek)] if seek is not None else [])
    assert c._next_offset[PODS] == next_pods


def test_the_refetch_that_finds_the_record_delivers_it_in_order() -> None:
    c, log = consumer_at(pods=5), SeekLog()
    assert offsets(c._close_gaps(log, {PODS: records(PODS, 6, 7)})) == {}
    assert offsets(c._close_gaps(log, {PODS: records(PODS, 5, 6, 7)})) == {"pods": [5, 6, 7]}
    assert log.seeks == [(PODS, 5)] and c._next_offset[PODS] == 8 and not c._gaps


def test_a_hole_that_stays_is_skipped_after_the_retries_and_the_patience(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    clock = [100.0]
    monkeypatch.setattr(consumer_module.time, "monotonic", lambda: clock[0])
    c, log = consumer_at(pods=5), SeekLog()
    for _ in range(consumer_module.GAP_RETRIES + 1):  # the first sight, then the retries
        assert offsets(c._close_gaps(log, {PODS: records(PODS, 7, 8)})) == {}
    clock[0] += consumer_module.GAP_PATIENCE_SECONDS / 2  # enough fetches, not long enough
    assert offsets(c._close_gaps(log, {PODS: records(PODS, 7, 8)})) == {}
    assert log.seeks == [(PODS, 5)] * (consumer_module.GAP_RETRIES + 2)
    clock[0] += consumer_module.GAP_PATIENCE_SECONDS
    with caplog.at_level(logging.WARNING, logger="schedmesh.bus.consumer"):
        assert offsets(c._close_gaps(log, {PODS: records(PODS, 7, 8)})) == {"pods": [7, 8]}
    assert "offsets 5-6 of" in caplog.text and c._next_offset[PODS] == 9 and not c._gaps


def test_a_hole_among_old_records_is_taken_at_once() -> None:
    """Apache Kafka's compaction leaves holes among records older than GAP_FRESH_SECONDS: a
    replay reads through them without fetching again."""
    c, log = consumer_at(pods=5), SeekLog()
    old = records(PODS, 7, 9, 12, age=consumer_module.GAP_FRESH_SECONDS + 5)
    assert offsets(c._close_gaps(log, {PODS: old})) == {"pods": [7, 9, 12]}
    assert log.seeks == [] and c._next_offset[PODS] == 13 and not c._gaps


def test_a_partition_not_tracked_yet_takes_what_comes() -> None:
    c, log = consumer_at(), SeekLog()
    assert offsets(c._close_gaps(log, {PODS: records(PODS, 40, 41)})) == {"pods": [40, 41]}
    assert log.seeks == [] and c._next_offset[PODS] == 42
