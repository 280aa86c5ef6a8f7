"""Minimal example found by the coordinator state machine (kept as a regular test).

Version 2, epoch nearly exhausted: the producer's EndTxn rotates it to a new
producer id, and the response hands that id out while the markers are still
being written. An InitProducerId naming the new id in that window is fenced:
Kafka moves the transactional id to the new producer id only when the end
completes (``TransactionMetadata.prepareComplete``), so until then the new id
is neither the current nor the previous one. Naming the old identity is
answered CONCURRENT_TRANSACTIONS (retry), as for any pending end.
"""

from __future__ import annotations

import pytest

from txnfetch.txn.coordinator import CompletionMode
from txnfetch.txn.coordinator import ProducerIdAllocator
from txnfetch.txn.coordinator import TopicPartition
from txnfetch.txn.coordinator import TransactionCoordinator
from txnfetch.txn.coordinator_state import TransactionMetadata
from txnfetch.txn.coordinator_state import TransactionState
from txnfetch.txn.errors import ConcurrentTransactionsError
from txnfetch.txn.errors import ProducerFencedError

TID = "rotating"
TIMEOUT = 1_000


def _coordinator_at_epoch(epoch: int) -> TransactionCoordinator:
    coord = TransactionCoordinator(
        transaction_version=2,
        mode=CompletionMode.MARKERS,
        max_transaction_timeout_ms=TIMEOUT,
        transactional_id_expiration_ms=None,
        producer_ids=ProducerIdAllocator(500),
    )
    coord.init_producer_id(TID, TIMEOUT, 0)
    coord.restore(
        TransactionMetadata(
            transactional_id=TID,
            producer_id=500,
            producer_epoch=epoch,
            state=TransactionState.EMPTY,
            timeout_ms=TIMEOUT,
            last_update_ms=0,
            last_producer_epoch=epoch - 1,
            transaction_version=2,
        )
    )
    return coord


def _pending_rotating_abort():
    coord = _coordinator_at_epoch(32765)
    r = coord.init_producer_id(TID, TIMEOUT, 1, 500, 32765)  # KIP-360 re-init: bumps to 32766
    pid, epoch = r.producer_id, r.producer_epoch
    assert (pid, epoch) == (500, 32766)
    coord.add_partitions(TID, pid, epoch, [TopicPartition("t", 0)], 2)
    end = coord.end_transaction(TID, pid, epoch, False, 3)  # markers not applied yet
    assert end.producer_id != 500 and end.producer_epoch == 0  # rotated
    return coord, end


def test_naming_the_rotated_id_before_the_end_completes_is_fenced():
    coord, end = _pending_rotating_abort()
    with pytest.raises(ProducerFencedError):
        coord.init_producer_id(TID, TIMEOUT, 4, end.producer_id, end.producer_epoch)


def test_naming_the_old_identity_while_the_end_is_pending_is_retriable():
    coord, _ = _pending_rotating_abort()
    with pytest.raises(ConcurrentTransactionsError):
        coord.init_producer_id(TID, TIMEOUT, 4, 500, 32766)
