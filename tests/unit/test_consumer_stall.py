"""The runner's stall check: which assigned partitions hold records the consumer has not delivered."""

from confluent_kafka import OFFSET_INVALID, TopicPartition

from services.bus.stall import behind, stall_after_s


def test_a_partition_whose_position_is_below_its_end_is_behind_and_one_at_its_end_is_not():
    positions = [TopicPartition("sessions", 0, 120), TopicPartition("sessions", 1, 80)]
    ends = {("sessions", 0): (0, 451), ("sessions", 1): (0, 80)}
    assert behind(positions, {}, ends) == ["sessions[0] at 120 of 451"]


def test_before_anything_is_consumed_the_committed_offset_counts_and_without_one_the_start():
    positions = [TopicPartition("s", p, OFFSET_INVALID) for p in range(4)]
    committed = {("s", 0): 50, ("s", 1): 10, ("s", 2): OFFSET_INVALID}
    ends = {("s", 0): (0, 50), ("s", 1): (0, 50), ("s", 2): (0, 7), ("s", 3): (0, 0)}
    # caught up at its commit; behind its commit; never committed with records; empty
    assert behind(positions, committed, ends) == ["s[1] at 10 of 50", "s[2] at 0 of 7"]


def test_records_deleted_by_retention_below_the_position_do_not_count():
    assert behind([TopicPartition("s", 0, OFFSET_INVALID)], {("s", 0): 3}, {("s", 0): (40, 40)}) == []


def test_the_check_waits_twice_the_transaction_timeout_and_at_least_a_minute():
    assert stall_after_s(60_000) == 120.0 and stall_after_s(10_000) == 60.0
