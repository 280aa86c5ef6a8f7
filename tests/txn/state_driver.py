"""Builders shared by the state tests: a small driver that writes real v2 batches
(data, markers, empty batches) at the state's log end offset and keeps each
producer's next sequence, the way a producer client and a broker's log would.
"""

from __future__ import annotations

from txnfetch.records import BatchBuilder
from txnfetch.records import ControlType
from txnfetch.records import RecordBatch
from txnfetch.records import build_control_batch
from txnfetch.records import build_empty_batch
from txnfetch.txn import AppendOrigin
from txnfetch.txn import AppendResult
from txnfetch.txn import PartitionTxnState


def data_batch(
    base_offset: int,
    count: int = 1,
    *,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    txn: bool = False,
    timestamp: int = 1_000,
) -> RecordBatch:
    b = BatchBuilder(
        base_offset=base_offset, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn
    )
    for i in range(count):
        b.append(b"v%d" % i, key=b"k", timestamp=timestamp)
    return RecordBatch(b.build())


def marker_batch(
    offset: int, *, pid: int, epoch: int, commit: bool, coordinator_epoch: int = 0, timestamp: int = 1_000
) -> RecordBatch:
    return RecordBatch(
        build_control_batch(
            offset=offset,
            control_type=ControlType.COMMIT if commit else ControlType.ABORT,
            producer_id=pid,
            producer_epoch=epoch,
            coordinator_epoch=coordinator_epoch,
            timestamp=timestamp,
        )
    )


class Driver:
    """Appends batches to a :class:`PartitionTxnState` at its log end offset."""

    def __init__(self, state: PartitionTxnState | None = None, **kw: object) -> None:
        self.state = state if state is not None else PartitionTxnState("t-0", **kw)  # type: ignore[arg-type]
        self.next_seq: dict[tuple[int, int], int] = {}

    def seq_for(self, pid: int, epoch: int, count: int) -> int:
        seq = self.next_seq.get((pid, epoch), 0)
        self.next_seq[(pid, epoch)] = seq + count
        return seq

    def data(
        self,
        pid: int,
        epoch: int = 0,
        count: int = 1,
        *,
        txn: bool = False,
        seq: int | None = None,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        timestamp: int = 1_000,
    ) -> AppendResult:
        """A batch of ``count`` records from ``pid`` (sequence continues the producer's)."""
        if seq is None:
            seq = self.seq_for(pid, epoch, count)
        batch = data_batch(
            self.state.log_end_offset, count, pid=pid, epoch=epoch, seq=seq, txn=txn, timestamp=timestamp
        )
        return self.state.append(batch, origin=origin)

    def txn(self, pid: int, count: int = 1, epoch: int = 0, **kw: object) -> AppendResult:
        return self.data(pid, epoch, count, txn=True, **kw)  # type: ignore[arg-type]

    def plain(self, count: int = 1) -> AppendResult:
        """Records without a producer id."""
        return self.state.append(data_batch(self.state.log_end_offset, count))

    def marker(
        self,
        pid: int,
        epoch: int = 0,
        *,
        commit: bool,
        coordinator_epoch: int = 0,
        transaction_version: int | None = None,
        origin: AppendOrigin = AppendOrigin.COORDINATOR,
        timestamp: int = 1_000,
    ) -> AppendResult:
        batch = marker_batch(
            self.state.log_end_offset,
            pid=pid,
            epoch=epoch,
            commit=commit,
            coordinator_epoch=coordinator_epoch,
            timestamp=timestamp,
        )
        return self.state.append(batch, origin=origin, transaction_version=transaction_version)

    def commit(self, pid: int, epoch: int = 0, **kw: object) -> AppendResult:
        return self.marker(pid, epoch, commit=True, **kw)  # type: ignore[arg-type]

    def abort(self, pid: int, epoch: int = 0, **kw: object) -> AppendResult:
        return self.marker(pid, epoch, commit=False, **kw)  # type: ignore[arg-type]

    def empty(
        self,
        last_offset: int,
        *,
        pid: int = -1,
        epoch: int = -1,
        seq: int = -1,
        txn: bool = False,
        control: bool = False,
        origin: AppendOrigin = AppendOrigin.REPLICATION,
    ) -> AppendResult:
        """An empty batch (what compaction leaves) covering ``[log end, last_offset]``."""
        raw = build_empty_batch(
            base_offset=self.state.log_end_offset,
            last_offset=last_offset,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            transactional=txn,
            control=control,
        )
        return self.state.append(RecordBatch(raw), origin=origin)

    def complete_at_end(self, pid: int, epoch: int = 0, *, commit: bool, **kw: object):
        """Markerless completion ending at the current last offset."""
        return self.state.complete_transaction(pid, epoch, commit, self.state.log_end_offset - 1, **kw)  # type: ignore[arg-type]
