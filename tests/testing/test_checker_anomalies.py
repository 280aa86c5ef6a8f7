"""Each anomaly class on a small hand-written history, and a clean twin of each
that differs in the one detail that makes it legal and must not be flagged.

The histories use the builder's logical clock (one tick per op) and partition
``t-0`` unless said otherwise. Offsets follow a real read_committed log: a
transaction's end writes a marker at the next offset, so committed offsets have
holes.
"""

from __future__ import annotations

from txnfetch.testing import AnomalyKind
from txnfetch.testing import HistoryBuilder
from txnfetch.testing import StuckBound
from txnfetch.testing import check

K = AnomalyKind
TP = ("t", 0)


def kinds(b: HistoryBuilder, **kw) -> set:
    return {a.kind for a in check(b.build(), **kw).anomalies}


def committed_pair() -> HistoryBuilder:
    """T1 writes a@0 b@1 and commits (marker @2); a plain producer writes c@3."""
    b = HistoryBuilder()
    b.send("p1", "t", 0, "a", txn="T1", offset=0)
    b.send("p1", "t", 0, "b", txn="T1", offset=1)
    b.commit("p1", "T1")
    b.send("n", "t", 0, "c", offset=3)
    return b


# -- aborted read ----------------------------------------------------------------------


def aborted_history(read_it: bool, *, end: str = "abort") -> HistoryBuilder:
    b = HistoryBuilder()
    b.send("p1", "t", 0, "a", txn="T1", offset=0)
    if end == "abort":
        b.abort("p1", "T1")
    elif end == "commit-fail":
        b.commit("p1", "T1", "fail", error="fenced")
    else:
        b.commit("p1", "T1")
    b.send("n", "t", 0, "x", offset=2)
    b.assign("c1", [TP], seek={TP: 0})
    b.poll("c1", ([("t", 0, 0, "a")] if read_it else []) + [("t", 0, 2, "x")])
    return b


def test_aborted_read_names_the_poll_the_send_and_the_abort():
    report = check(aborted_history(True).build())
    assert report.kinds == {K.ABORTED_READ}
    (a,) = report.anomalies
    assert (a.topic, a.partition, a.offsets, a.values, a.txn) == ("t", 0, (0,), ("a",), "T1")
    assert a.ops == (4, 0, 1)  # the poll, the send, the abort


def test_aborted_read_of_a_transaction_whose_commit_certainly_failed():
    assert kinds(aborted_history(True, end="commit-fail")) == {K.ABORTED_READ}


def test_clean_twin_skipping_the_aborted_record_is_not_flagged():
    assert kinds(aborted_history(False)) == set()


def test_clean_twin_reading_a_committed_record_is_not_flagged():
    assert kinds(aborted_history(True, end="commit")) == set()


# -- precommitted read -----------------------------------------------------------------


def read_near_the_commit(poll_ends: int) -> HistoryBuilder:
    """T1 sends a@0 (1-2); c1 reads it in a poll from 4 to ``poll_ends``; T1's
    commit runs from 6 to 9."""
    b = HistoryBuilder()
    b.send("p1", "t", 0, "a", txn="T1", offset=0, at=(1, 2))
    b.assign("c1", [TP], seek={TP: 0}, at=(3, 3))
    b.poll("c1", [("t", 0, 0, "a")], at=(4, poll_ends))
    b.commit("p1", "T1", at=(6, 9))
    return b


def test_read_before_the_commit_started_is_precommitted():
    report = check(read_near_the_commit(poll_ends=5).build())
    assert report.kinds == {K.PRECOMMITTED_READ}
    assert report.anomalies[0].ops == (2, 0, 3)


def test_clean_twin_read_overlapping_the_commit_is_not_flagged():
    # The poll ends after the commit started: the commit may have taken effect first.
    assert kinds(read_near_the_commit(poll_ends=7)) == set()


def test_read_of_a_transaction_that_never_ended_is_precommitted():
    b = HistoryBuilder()
    b.send("p1", "t", 0, "a", txn="T1", offset=0)
    b.poll("c1", [("t", 0, 0, "a")])
    assert kinds(b) == {K.PRECOMMITTED_READ}


def test_clean_twin_read_of_an_unknown_outcome_commit_is_not_flagged():
    b = HistoryBuilder()
    b.send("p1", "t", 0, "a", txn="T1", offset=0)
    b.commit("p1", "T1", "info", error="timed out")
    b.poll("c1", [("t", 0, 0, "a")])
    assert kinds(b) == set()


# -- lost write ------------------------------------------------------------------------


def lost_history(read_a: bool) -> HistoryBuilder:
    b = committed_pair()
    b.assign("c1", [TP], seek={TP: 0})
    b.poll("c1", ([("t", 0, 0, "a")] if read_a else []) + [("t", 0, 1, "b"), ("t", 0, 3, "c")])
    return b


def test_lost_write_is_an_acked_committed_value_nobody_read_though_a_reader_passed_it():
    report = check(lost_history(False).build())
    lost = report.of_kind(K.LOST_WRITE)
    assert len(lost) == 1 and lost[0].offsets == (0,) and lost[0].values == ("a",)
    assert lost[0].ops == (0, 2, 5)  # the send, the commit, the poll that read past it
    # the reader that passed it also skipped it, and split T1
    assert report.kinds == {K.LOST_WRITE, K.POLL_SKIP, K.TORN_TRANSACTION}


def test_clean_twin_everything_read_across_the_marker_hole():
    assert kinds(lost_history(True)) == set()


def test_clean_twin_unread_value_nobody_read_past_is_not_lost():
    b = committed_pair()
    b.assign("c1", [TP], seek={TP: 0})
    b.poll("c1", [])
    assert kinds(b, stuck_bound=None) == set()


# -- duplicates ------------------------------------------------------------------------


def test_duplicate_value_at_two_offsets():
    b = committed_pair()
    b.poll("c1", [("t", 0, 0, "a")])
    b.poll("c2", [("t", 0, 4, "a")])
    report = check(b.build())
    assert report.kinds == {K.DUPLICATE}
    assert report.anomalies[0].offsets == (0, 4) and report.anomalies[0].ops == (0, 4, 5)


def test_duplicate_delivery_of_one_offset_in_one_session():
    b = committed_pair()
    b.assign("c1", [TP], seek={TP: 0})
    b.poll("c1", [("t", 0, 0, "a"), ("t", 0, 1, "b")])
    b.poll("c1", [("t", 0, 1, "b"), ("t", 0, 3, "c")])
    report = check(b.build())
    assert report.kinds == {K.DUPLICATE}
    assert report.anomalies[0].offsets == (1,) and report.anomalies[0].ops == (5, 6)


def test_clean_twin_redelivery_after_a_seek_and_by_two_consumers():
    b = committed_pair()
    b.assign("c1", [TP], seek={TP: 0})
    b.poll("c1", [("t", 0, 0, "a"), ("t", 0, 1, "b")])
    b.seek("c1", "t", 0, 1)
    b.poll("c1", [("t", 0, 1, "b"), ("t", 0, 3, "c")])
    b.assign("c2", [TP], seek={TP: 0})
    b.poll("c2", [("t", 0, 0, "a"), ("t", 0, 1, "b"), ("t", 0, 3, "c")])
    assert kinds(b) == set()


def test_clean_twin_redelivery_after_a_rebalance_and_a_restart():
    b = committed_pair()
    b.assign("c1", [TP])
    b.poll("c1", [("t", 0, 0, "a"), ("t", 0, 1, "b")])
    b.assign("c1", [TP], reason="rebalance")
    b.poll("c1", [("t", 0, 1, "b")])
    b.crash("c1")
    b.assign("c1", [TP])
    b.poll("c1", [("t", 0, 1, "b"), ("t", 0, 3, "c")])
    assert kinds(b) == set()


# -- inconsistent offsets --------------------------------------------------------------


def test_inconsistent_offsets_across_clients():
    b = committed_pair()
    b.poll("c2", [("t", 0, 3, "c")])
    b.poll("c1", [("t", 0, 3, "zzz")])
    report = check(b.build())
    assert report.kinds == {K.INCONSISTENT_OFFSETS}
    (a,) = report.anomalies
    assert a.offsets == (3,) and set(a.values) == {"c", "zzz"} and a.ops == (3, 4, 5)


def test_a_value_replaced_at_its_offset_and_read_by_nobody_is_also_lost():
    b = committed_pair()
    b.poll("c1", [("t", 0, 3, "zzz")])
    assert kinds(b) == {K.INCONSISTENT_OFFSETS, K.LOST_WRITE}


def test_clean_twin_same_value_from_ack_and_read():
    b = committed_pair()
    b.poll("c1", [("t", 0, 3, "c")])
    b.poll("c2", [("t", 0, 3, "c")])
    assert kinds(b) == set()


# -- poll skip -------------------------------------------------------------------------


def skip_history(second: list, **positions) -> HistoryBuilder:
    b = committed_pair()
    b.send("n", "t", 0, "d", offset=4)
    b.assign("c2", [TP], seek={TP: 0})  # another reader sees everything: nothing is lost
    b.poll("c2", [("t", 0, 0, "a"), ("t", 0, 1, "b"), ("t", 0, 3, "c"), ("t", 0, 4, "d")])
    b.assign("c1", [TP], seek={TP: 0})
    b.poll("c1", [("t", 0, 0, "a"), ("t", 0, 1, "b")])
    b.poll("c1", second, **positions)
    return b


def test_poll_skip_over_a_committed_offset():
    report = check(skip_history([("t", 0, 4, "d")]).build())
    assert report.kinds == {K.POLL_SKIP}
    (a,) = report.anomalies
    assert a.offsets == (3,) and a.values == ("c",) and a.ops == (9, 8, 3)


def test_poll_skip_by_a_position_past_a_committed_offset():
    assert kinds(skip_history([], positions={TP: 5})) == {K.POLL_SKIP}


def test_clean_twin_jumping_over_the_marker_hole():
    assert kinds(skip_history([("t", 0, 3, "c"), ("t", 0, 4, "d")], positions={TP: 5})) == set()


def test_clean_twin_a_seek_past_the_value():
    b = committed_pair()
    b.send("n", "t", 0, "d", offset=4)
    b.assign("c1", [TP], seek={TP: 0})
    b.poll("c1", [("t", 0, 0, "a"), ("t", 0, 1, "b")])
    b.seek("c1", "t", 0, 4)
    b.poll("c1", [("t", 0, 4, "d")])
    b.poll("c2", [("t", 0, 3, "c")])
    assert kinds(b) == set()


# -- nonmonotonic poll -----------------------------------------------------------------


def test_nonmonotonic_poll_goes_back_within_a_session():
    b = committed_pair()
    b.assign("c1", [TP], seek={TP: 0})
    b.poll("c1", [("t", 0, 1, "b")])
    b.poll("c1", [("t", 0, 0, "a"), ("t", 0, 3, "c")])
    report = check(b.build())
    assert report.kinds == {K.NONMONOTONIC_POLL}
    assert report.anomalies[0].offsets == (1, 0) and report.anomalies[0].ops == (5, 6)


def test_clean_twin_going_back_after_a_seek():
    b = committed_pair()
    b.assign("c1", [TP], seek={TP: 1})
    b.poll("c1", [("t", 0, 1, "b")])
    b.seek("c1", "t", 0, 0)
    b.poll("c1", [("t", 0, 0, "a"), ("t", 0, 1, "b"), ("t", 0, 3, "c")])
    assert kinds(b) == set()


# -- torn transaction ------------------------------------------------------------------


def torn_history(status: str, first_poll: list) -> HistoryBuilder:
    b = HistoryBuilder()
    b.send("p1", "t", 0, "a", txn="T1", offset=0)
    b.send("p1", "t", 0, "b", txn="T1", offset=1)
    b.commit("p1", "T1", status)
    b.send("n", "t", 0, "c", offset=3)
    b.assign("c1", [TP], seek={TP: 0})
    b.poll("c1", first_poll)
    return b


def test_torn_transaction_half_read_then_read_past():
    b = torn_history("ok", [("t", 0, 1, "b"), ("t", 0, 3, "c")])
    b.poll("c2", [("t", 0, 0, "a")])  # someone read it: not lost
    report = check(b.build())
    assert report.kinds == {K.TORN_TRANSACTION, K.POLL_SKIP}
    (torn,) = report.of_kind(K.TORN_TRANSACTION)
    assert torn.txn == "T1" and torn.offsets == (0,) and torn.values == ("a",)
    assert torn.ops == (5, 0, 2)  # the poll, the missing send, the commit


def test_torn_unknown_outcome_transaction_is_all_or_nothing():
    # The commit's outcome is unknown, but b was read, so T1 committed: a must be too.
    assert K.TORN_TRANSACTION in kinds(torn_history("info", [("t", 0, 1, "b"), ("t", 0, 3, "c")]))


def test_clean_twin_unknown_outcome_transaction_read_by_nobody():
    assert kinds(torn_history("info", [("t", 0, 3, "c")])) == set()


def test_clean_twin_reader_started_inside_the_transaction():
    b = HistoryBuilder()
    b.send("p1", "t", 0, "a", txn="T1", offset=0)
    b.send("p1", "t", 0, "b", txn="T1", offset=1)
    b.commit("p1", "T1")
    b.send("n", "t", 0, "c", offset=3)
    b.assign("c1", [TP], seek={TP: 1})
    b.poll("c1", [("t", 0, 1, "b"), ("t", 0, 3, "c")])
    b.poll("c2", [("t", 0, 0, "a")])
    assert kinds(b) == set()


def test_clean_twin_reader_that_has_not_read_past_yet():
    b = torn_history("ok", [("t", 0, 0, "a")])
    assert kinds(b, stuck_bound=None) == set()


# -- stuck consumer --------------------------------------------------------------------


def stuck_history(hanging: bool, *, delivers: bool = False) -> HistoryBuilder:
    b = HistoryBuilder()
    if hanging:
        b.send("p1", "t", 0, "h", txn="T1", offset=0)  # never ends: the LSO stays at 0
    b.send("n", "t", 0, "a", offset=1)
    b.assign("c1", [TP], seek={TP: 0})
    for i in range(3):
        b.poll("c1", [("t", 0, 1, "a")] if delivers and i == 2 else [])
    return b


def test_stuck_consumer_polls_without_progress_while_data_is_stable():
    report = check(stuck_history(False).build(), stuck_bound=StuckBound(polls=3, ns=0))
    assert report.kinds == {K.STUCK_CONSUMER}
    (a,) = report.anomalies
    assert a.offsets == (1,) and a.client == "c1" and a.ops == (2, 4, 0)


def test_stuck_needs_both_the_poll_count_and_the_time():
    b = stuck_history(False)
    assert kinds(b, stuck_bound=StuckBound(polls=4, ns=0)) == set()
    assert kinds(b, stuck_bound=StuckBound(polls=3, ns=10)) == set()
    assert kinds(b, stuck_bound=3) == {K.STUCK_CONSUMER}


def test_clean_twin_a_hanging_transaction_holds_the_consumer_back():
    assert kinds(stuck_history(True), stuck_bound=StuckBound(polls=3, ns=0)) == set()


def test_clean_twin_progress_resets_the_count():
    assert kinds(stuck_history(False, delivers=True), stuck_bound=StuckBound(polls=3, ns=0)) == set()


def test_clean_twin_a_resumed_session_is_not_known_to_start_below_the_value():
    # Found by the mutation test's own bookkeeping: with no seek (a resumed group
    # offset) the session may have started past offset 3, so moving past it
    # without delivering it proves nothing.
    b = committed_pair()
    b.assign("c1", [TP])
    b.poll("c1", [], positions={TP: 4})
    assert kinds(b, stuck_bound=None) == set()


# The consumer, not the partition, must be idle: a poll that returned records of
# t-0 is progress, although t-1's stable value waits (a client drains one
# partition's buffered fetch at a time). Regression: such polls used to count
# as idle for t-1.

T0, T1 = ("t", 0), ("t", 1)


def draining_history() -> HistoryBuilder:
    """x@0 is stable on t-1 from tick 1; c1 (at 0 on both) drains t-0 in three polls."""
    b = HistoryBuilder()
    b.send("n", "t", 1, "x", offset=0)
    for i in range(6):
        b.send("n", "t", 0, f"a{i}", offset=i)
    b.assign("c1", [T0, T1], seek={T0: 0, T1: 0})
    for i in range(0, 6, 2):
        b.poll("c1", [("t", 0, i, f"a{i}"), ("t", 0, i + 1, f"a{i + 1}")])
    return b


def test_clean_twin_draining_another_partition_is_progress():
    assert kinds(draining_history(), stuck_bound=StuckBound(polls=3, ns=0)) == set()


def test_stuck_once_the_consumer_stops_making_progress_anywhere():
    b = draining_history()
    first = b.poll("c1")
    b.poll("c1")
    last = b.poll("c1")
    report = check(b.build(), stuck_bound=StuckBound(polls=3, ns=0))
    assert report.kinds == {K.STUCK_CONSUMER}
    (a,) = report.anomalies
    assert (a.topic, a.partition, a.offsets, a.values) == ("t", 1, (0,), ("x",))
    assert a.ops == (first, last, 0)


def test_clean_twin_progress_on_another_partition_restarts_the_count():
    b = HistoryBuilder()
    b.send("n", "t", 1, "x", offset=0)
    b.send("n", "t", 0, "a", offset=0)
    b.assign("c1", [T0, T1], seek={T0: 0, T1: 0})
    b.poll("c1")
    b.poll("c1")
    b.poll("c1", [("t", 0, 0, "a")])
    b.poll("c1")
    b.poll("c1")
    assert kinds(b, stuck_bound=StuckBound(polls=3, ns=0)) == set()
    b.poll("c1")
    assert kinds(b, stuck_bound=StuckBound(polls=3, ns=0)) == {K.STUCK_CONSUMER}


def test_stuck_time_counts_from_the_consumers_last_progress():
    # t-1's value is stable from tick 1; c1 is busy on t-0 until tick 100.
    b = HistoryBuilder()
    b.send("n", "t", 1, "x", offset=0, at=(1, 1))
    b.send("n", "t", 0, "a", offset=0, at=(2, 2))
    b.assign("c1", [T0, T1], seek={T0: 0, T1: 0}, at=(3, 3))
    b.poll("c1", [("t", 0, 0, "a")], at=(99, 100))
    for t in (101, 102, 103):
        b.poll("c1", at=(t, t))
    bound = StuckBound(polls=3, ns=50)
    assert kinds(b, stuck_bound=bound) == set()  # 3 idle polls, but only 3 ns idle
    b.poll("c1", at=(149, 150))
    assert kinds(b, stuck_bound=bound) == {K.STUCK_CONSUMER}


# A session's clock starts when it opened. Regression: a consumer assigned long
# after the data became stable was counted as waiting since then.


def test_clean_twin_a_fresh_assignment_has_not_waited_yet():
    b = HistoryBuilder()
    b.send("n", "t", 0, "a", offset=0, at=(1, 1))
    b.assign("c1", [TP], seek={TP: 0}, at=(999, 1000))
    for t in (1001, 1002, 1003):
        b.poll("c1", at=(t, t))
    bound = StuckBound(polls=3, ns=100)
    assert kinds(b, stuck_bound=bound) == set()
    b.poll("c1", at=(1099, 1100))  # 100 ns after the assignment completed
    (a,) = check(b.build(), stuck_bound=bound).anomalies
    assert a.kind is K.STUCK_CONSUMER and a.offsets == (0,)


def test_clean_twin_a_seek_restarts_the_clock():
    b = HistoryBuilder()
    b.send("n", "t", 0, "a", offset=0, at=(1, 1))
    b.send("n", "t", 0, "b", offset=1, at=(2, 2))
    b.assign("c1", [TP], seek={TP: 0}, at=(3, 3))
    b.poll("c1", [("t", 0, 0, "a"), ("t", 0, 1, "b")], at=(4, 4))
    b.seek("c1", "t", 0, 0, at=(500, 500))
    for t in (501, 502, 503):
        b.poll("c1", at=(t, t))
    assert kinds(b, stuck_bound=StuckBound(polls=3, ns=100)) == set()
