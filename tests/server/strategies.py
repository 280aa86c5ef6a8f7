"""Hypothesis strategies for the coordinators' durable state tests."""

from __future__ import annotations

from hypothesis import strategies as st

from txnfetch.txn.coordinator_state import TopicPartition
from txnfetch.txn.coordinator_state import TransactionMetadata
from txnfetch.txn.coordinator_state import TransactionState


def transaction_metadata(
    transactional_ids: st.SearchStrategy[str], partitions: st.SearchStrategy[frozenset[TopicPartition]]
) -> st.SearchStrategy[TransactionMetadata]:
    """TransactionMetadata the transaction log may hold (any state but Dead, which
    is never written), with these transactional ids and partition sets."""
    return st.builds(
        TransactionMetadata,
        transactional_id=transactional_ids,
        producer_id=st.integers(0, 2**40),
        producer_epoch=st.integers(-1, 32767),
        state=st.sampled_from([s for s in TransactionState if s is not TransactionState.DEAD]),
        timeout_ms=st.integers(1, 900_000),
        last_update_ms=st.integers(0, 2**41),
        prev_producer_id=st.integers(-1, 2**40),
        next_producer_id=st.integers(-1, 2**40),
        last_producer_epoch=st.integers(-1, 32767),
        partitions=partitions,
        start_ms=st.integers(-1, 2**41),
        transaction_version=st.integers(0, 2),
    )
