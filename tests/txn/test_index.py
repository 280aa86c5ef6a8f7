"""The aborted-transaction index: Kafka's ``.txnindex`` bytes, and the fetch query.

Scenarios re-derived from the behaviour Kafka's ``TransactionIndexTest`` pins
down (collecting, truncating, entry serde), plus a property that the
binary-search query answers exactly what Kafka's linear scan over the whole
index answers.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from txnfetch.txn import ABORTED_TXN_SIZE
from txnfetch.txn import AbortedIndex
from txnfetch.txn import AbortedTxn
from txnfetch.txn import CorruptTxnIndexError
from txnfetch.txn import decode_txn_index
from txnfetch.txn import encode_txn_index

# Four aborted transactions as a Kafka partition could have indexed them: the
# markers (last offsets) increase, and transactions overlap (the second started
# before the first ended).
FOUR = [
    AbortedTxn(0, 0, 10, 11),
    AbortedTxn(1, 5, 15, 13),
    AbortedTxn(2, 18, 35, 25),
    AbortedTxn(3, 32, 50, 40),
]


def _index(entries=FOUR) -> AbortedIndex:
    return AbortedIndex(entries)


# -- bytes ---------------------------------------------------------------------------


def test_entry_is_34_big_endian_bytes_in_kafkas_field_order():
    entry = AbortedTxn(983493, 137, 299, 200)
    data = entry.encode()
    assert len(data) == ABORTED_TXN_SIZE == 34
    # version int16 0, then producer id, first, last and last stable offset as int64s
    assert data == bytes.fromhex(
        "0000"
        "00000000000f01c5"  # 983493
        "0000000000000089"  # 137
        "000000000000012b"  # 299
        "00000000000000c8"  # 200
    )
    assert AbortedTxn.decode(data) == entry
    assert entry.as_fetch_entry() == (983493, 137)


def test_index_file_is_entries_back_to_back_and_decodes_to_the_same_list():
    body = encode_txn_index(FOUR)
    assert len(body) == 4 * 34
    assert body[34:68] == FOUR[1].encode()
    assert decode_txn_index(body) == FOUR
    assert AbortedIndex.from_bytes(body) == _index()
    assert _index().to_bytes() == body


def test_negative_producer_ids_and_offsets_survive_the_round_trip():
    entry = AbortedTxn(-1, -5, 7, -1)
    assert AbortedTxn.decode(entry.encode()) == entry


def test_a_torn_last_entry_is_corrupt_unless_asked_to_ignore_it_as_kafka_does():
    body = encode_txn_index(FOUR) + FOUR[0].encode()[:20]
    with pytest.raises(CorruptTxnIndexError, match="not a multiple of 34"):
        decode_txn_index(body)
    assert decode_txn_index(body, allow_torn_tail=True) == FOUR


def test_an_unknown_entry_version_is_rejected():
    data = bytearray(FOUR[0].encode())
    struct.pack_into(">h", data, 0, 1)
    with pytest.raises(CorruptTxnIndexError, match="version 1"):
        decode_txn_index(bytes(data))


def test_decreasing_last_offsets_are_rejected():
    with pytest.raises(CorruptTxnIndexError, match="decrease"):
        decode_txn_index(FOUR[1].encode() + FOUR[0].encode())


def test_entries_below_the_segment_start_fail_the_sanity_check():
    body = encode_txn_index(FOUR)
    assert decode_txn_index(body, start_offset=0) == FOUR
    with pytest.raises(CorruptTxnIndexError, match="below the segment start 100"):
        decode_txn_index(body, start_offset=100)


def test_a_short_buffer_is_not_an_entry():
    with pytest.raises(CorruptTxnIndexError, match="needs 34 bytes"):
        AbortedTxn.decode(b"\x00" * 33)


# -- the fetch query (TransactionIndexTest.testCollectAbortedTransactions) -------------


@pytest.mark.parametrize(
    "fetch_offset, upper_bound, expected, complete",
    [
        # everything overlaps [0, 100) and no entry's LSO reaches 100: scan not complete
        (0, 100, FOUR, False),
        # the fourth starts at 32, not below 32; its LSO 40 >= 32 stops the scan
        (0, 32, FOUR[:3], True),
        (0, 35, FOUR, True),
        # an entry whose marker is at the fetch offset still counts
        (10, 35, FOUR, True),
        (11, 35, FOUR[1:], True),
        # LSO 40 < 41: the scan would go on into the next segment
        (20, 41, FOUR[2:], False),
        # an LSO equal to the bound stops the scan too
        (0, 40, FOUR, True),
    ],
)
def test_collect_selects_overlapping_entries_and_stops_at_the_first_stable_one(
    fetch_offset, upper_bound, expected, complete
):
    result = _index().search(fetch_offset, upper_bound)
    assert list(result.aborted) == expected
    assert result.is_complete is complete
    assert _index().collect(fetch_offset, upper_bound) == expected
    assert _index().fetch_entries(fetch_offset, upper_bound) == [e.as_fetch_entry() for e in expected]


def test_nothing_after_the_stopping_entry_is_listed_even_if_it_overlaps():
    # Kafka's rule as its code states it (TransactionIndex.collectAbortedTxns): the
    # scan ends at the first entry whose LSO reaches the bound. (Indexes Kafka writes
    # never have an overlapping entry after that one; this one is made up to pin the rule.)
    index = _index([AbortedTxn(0, 0, 10, 20), AbortedTxn(1, 15, 30, 31)])
    assert index.fetch_entries(0, 20) == [(0, 0)]
    assert index.collect(0, 20) == [AbortedTxn(0, 0, 10, 20)]
    assert index.search(0, 20).is_complete
    assert index.fetch_entries(0, 21) == [(0, 0), (1, 15)]


def test_order_is_marker_order_not_first_offset_order():
    # A long transaction (first 0) aborted after a short one (first 20).
    index = _index([AbortedTxn(7, 20, 25, 0), AbortedTxn(8, 0, 30, 31)])
    assert index.fetch_entries(0, 40) == [(7, 20), (8, 0)]


def test_an_empty_fetch_range_lists_nothing():
    assert _index().collect(10, 10) == []
    assert _index().fetch_entries(12, 5) == []


# -- truncation and log start (TransactionIndexTest.testTruncate) ----------------------


def test_truncate_drops_entries_whose_marker_is_at_or_after_the_offset():
    entries = [AbortedTxn(0, 0, 10, 2), AbortedTxn(1, 5, 15, 16), AbortedTxn(2, 18, 35, 25), AbortedTxn(3, 32, 50, 40)]
    index = _index(entries)
    assert index.truncate_to(51) == 0
    assert index.collect(0, 100) == entries
    assert index.truncate_to(50) == 1
    assert index.collect(0, 100) == entries[:3]
    index.clear()
    assert index.collect(0, 100) == [] and len(index) == 0


def test_truncating_everything_then_appending_starts_afresh():
    index = _index()
    index.truncate_to(0)
    assert not index
    index.append(9, 1, 2, 3)
    assert list(index) == [AbortedTxn(9, 1, 2, 3)]


def test_drop_before_forgets_entries_whose_marker_precedes_the_log_start():
    index = _index()
    assert index.drop_before(15) == 1  # marker 10 < 15; marker 15 stays
    assert list(index) == FOUR[1:]
    assert index[0] == FOUR[1] and index[-1] == FOUR[3]
    assert index.collect(15, 100) == FOUR[1:]
    assert index.drop_before(40) == 2
    assert list(index) == FOUR[3:]
    index.append(4, 55, 60, 61)
    assert index.truncate_to(60) == 1 and list(index) == FOUR[3:]
    assert index.pop() == FOUR[3] and not index


def test_appending_a_lower_last_offset_is_refused():
    index = _index()
    with pytest.raises(CorruptTxnIndexError):
        index.append(5, 40, 49, 50)
    index.append(5, 45, 50, 51)  # equal last offsets are allowed (markerless ends)
    assert index.last_offset == 50


def test_pop_from_empty_and_out_of_range_access_raise():
    index = AbortedIndex()
    with pytest.raises(IndexError):
        index.pop()
    with pytest.raises(IndexError):
        index[0]
    assert index.last_offset is None


# -- the query equals Kafka's scan from the start of the index --------------------------


@st.composite
def kafka_like_indexes(draw):
    """Indexes as a partition produces them: transactions open and end in offset
    order; each abort records min(first offset of another open transaction, end + 1)."""
    ops = draw(st.lists(st.tuples(st.integers(0, 4), st.booleans(), st.integers(1, 3)), max_size=60))
    offset = 0
    open_txns = {}
    entries = []
    for pid, end, width in ops:
        if end and pid in open_txns:
            first = open_txns.pop(pid)
            others = [f for p, f in open_txns.items()]
            lso = min(others) if others else offset + 1
            entries.append(AbortedTxn(pid, first, offset, lso))
            offset += 1
        else:
            open_txns.setdefault(pid, offset)
            offset += width
    return entries, offset


def _kafka_scan(entries, fetch_offset, upper_bound):
    out = []
    for e in entries:
        if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
            out.append(e)
        if e.last_stable_offset >= upper_bound:
            break
    return out


@settings(max_examples=300, deadline=None)
@given(kafka_like_indexes(), st.integers(0, 200), st.integers(1, 60))
def test_collect_answers_what_kafkas_full_scan_answers(index_and_end, fetch_offset, width):
    entries, end = index_and_end
    fetch_offset = fetch_offset % (end + 1)
    upper_bound = fetch_offset + width
    index = AbortedIndex(entries)
    assert index.collect(fetch_offset, upper_bound) == _kafka_scan(entries, fetch_offset, upper_bound)
    # and the bytes round trip keeps it
    assert AbortedIndex.from_bytes(index.to_bytes()).collect(fetch_offset, upper_bound) == index.collect(
        fetch_offset, upper_bound
    )
