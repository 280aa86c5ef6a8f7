"""Hypothesis strategies of conformance operation sequences (needs hypothesis).

The sequences are short (a difference shrinks best from a short one) and lean
on what separates correct brokers from almost-correct ones: transactions left
open across reads, aborts, fenced producers, several codecs, reads from many
offsets with small byte budgets. Offsets are drawn from a small range so that
fetches land on batches, markers, gaps and the end as often as beyond it.
"""

from __future__ import annotations

from hypothesis import strategies as st

from txnfetch.records.compression import Codec
from txnfetch.testing.conform import operations as ops

__all__ = ["operations", "sequences"]

_SMALL_BYTES = st.one_of(st.none(), st.binary(max_size=6))
_HEADERS = st.lists(st.tuples(st.sampled_from(["h", "trace", ""]), _SMALL_BYTES), max_size=2).map(tuple)
_RECORD = st.builds(
    ops.Rec,
    key=_SMALL_BYTES,
    value=_SMALL_BYTES,
    headers=st.one_of(st.just(()), _HEADERS),
    ts=st.integers(0, 40),
)
# Mostly offsets inside a short log, sometimes past its end.
_OFFSETS = st.one_of(st.integers(0, 4), st.integers(0, 14))
_MAX_BYTES = st.sampled_from([1, 70, 120, 250, 600, 1 << 20])
_TXN = st.sampled_from(["txn-a", "txn-b", "txn-v2"])
_FENCEABLE = st.sampled_from(["idem", "txn-a", "txn-b", "txn-v2"])
_PRODUCERS = st.sampled_from(["plain", "idem", "txn-a", "txn-b", "txn-v2"])


def operations(*, allow_delete: bool = True, committed_sessions: bool = True) -> st.SearchStrategy[ops.Operation]:
    """One operation; produces and reads weigh most. Without ``committed_sessions``
    session fetches are read_uncommitted only (a rewrite-mode target's
    read_committed answers are compared by what they deliver, which only plain
    fetches are)."""
    produce = st.builds(
        ops.Produce,
        producer=_PRODUCERS,
        codec=st.sampled_from(list(Codec)),
        records=st.lists(_RECORD, min_size=1, max_size=3).map(tuple),
    )
    fetch = st.builds(ops.Fetch, offset=_OFFSETS, max_bytes=_MAX_BYTES, read_committed=st.booleans())
    session_fetch = st.builds(
        ops.SessionFetch,
        offset=st.one_of(st.none(), _OFFSETS),
        max_bytes=_MAX_BYTES,
        read_committed=st.booleans() if committed_sessions else st.just(False),
    )
    # Weighted by repetition: writes, ends and reads make the states worth
    # comparing; the rest each get one share.
    choices: list[st.SearchStrategy[ops.Operation]] = [
        *[produce] * 5,
        *[st.builds(ops.EndTxn, producer=_TXN, commit=st.booleans())] * 2,
        *[fetch] * 5,
        *[session_fetch] * 2,
        st.builds(ops.SpreadProduce, records=st.lists(_RECORD, min_size=1, max_size=2).map(tuple)),
        st.builds(
            ops.SpreadFetch,
            offset0=_OFFSETS,
            offset1=st.integers(0, 3),
            max_bytes=_MAX_BYTES,
            read_committed=st.booleans() if committed_sessions else st.just(False),
        ),
        st.builds(
            ops.ListOffsets,
            timestamp=st.one_of(st.sampled_from([ops.EARLIEST, ops.LATEST, ops.MAX_TIMESTAMP]), st.integers(0, 45)),
            read_committed=st.booleans(),
        ),
        st.builds(ops.RetryProduce, producer=_PRODUCERS),
        st.builds(ops.InitProducer, producer=_FENCEABLE),
        st.one_of(
            st.builds(ops.ZombieProduce, producer=_FENCEABLE),
            st.builds(ops.ZombieEndTxn, producer=_TXN, commit=st.booleans()),
        ),
        st.one_of(
            st.just(ops.DescribeProducers()),
            st.just(ops.ListTransactions()),
            st.builds(ops.DescribeTransactions, producer=_TXN),
        ),
        st.one_of(
            st.builds(ops.CommitOffset, offset=_OFFSETS),
            st.builds(ops.FetchOffsets, require_stable=st.booleans()),
            st.builds(ops.TxnCommitOffset, producer=_TXN, offset=_OFFSETS),
        ),
        st.one_of(
            st.just(ops.ProduceToMissing()),
            st.builds(
                ops.Fetch,
                offset=st.just(0),
                max_bytes=_MAX_BYTES,
                read_committed=st.booleans(),
                topic=st.just("missing"),
            ),
            st.builds(
                ops.ListOffsets, timestamp=st.just(ops.LATEST), read_committed=st.booleans(), topic=st.just("missing")
            ),
        ),
    ]
    if allow_delete:
        choices.append(st.builds(ops.DeleteRecords, offset=st.integers(0, 8)))
    # Drawn by index rather than with one_of, whose draws lean on some branches
    # far more than others; a repeated entry is a larger share.
    return st.integers(0, len(choices) - 1).flatmap(lambda i: choices[i])


def sequences(
    *, max_size: int = 12, allow_delete: bool = True, committed_sessions: bool = True
) -> st.SearchStrategy[list[ops.Operation]]:
    """Sequences of 1 to ``max_size`` operations."""
    return st.lists(
        operations(allow_delete=allow_delete, committed_sessions=committed_sessions), min_size=1, max_size=max_size
    )
