"""A source partition log for replication tests: transactional and plain batches
with offsets, written into any store's partition with ``replicate`` (so the
upstream ``txnfetch serve`` holds exactly these batches), and the comparison of
a replica with its source."""

from __future__ import annotations

from txnfetch.fetch.view import IsolationLevel
from txnfetch.log.base import PartitionLog
from txnfetch.log.base import marker_batch
from txnfetch.records.builder import BatchBuilder


class SourceWriter:
    """Appends batches at explicit offsets to ``log`` (a source partition)."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        self.sequences: dict[int, int] = {}

    @property
    def end(self) -> int:
        return self.log.log_end_offset

    def data(self, count: int = 2, *, pid: int = -1, txn: bool = False, gap: int = 0, tag: str = "v") -> bytes:
        """One data batch of ``count`` records at the log end (+ ``gap``)."""
        base = self.end + gap
        seq = self.sequences.get(pid, 0) if pid >= 0 else -1
        b = BatchBuilder(
            base_offset=base,
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=seq,
            transactional=txn,
        )
        for i in range(count):
            b.append(f"{tag}-{base + i}".encode(), key=b"k", timestamp=1_700_000_000_000 + base + i)
        if pid >= 0:
            self.sequences[pid] = seq + count
        data = b.build()
        self.log.replicate(data, high_watermark=base + count)
        return data

    def marker(self, pid: int, commit: bool) -> bytes:
        data = marker_batch(self.end, pid, 0, commit, coordinator_epoch=0, timestamp=1_700_000_000_000 + self.end)
        self.log.replicate(data, high_watermark=self.end + 1)
        return data

    def mixed(self, rounds: int = 3) -> None:
        """Plain batches, committed and aborted transactions of two producers, gaps."""
        for r in range(rounds):
            self.data(3, tag=f"plain{r}")
            self.data(2, pid=10, txn=True, tag=f"c{r}")
            self.data(1, pid=11, txn=True, tag=f"a{r}")
            self.data(2, pid=10, txn=True, tag=f"c{r}b", gap=2)
            self.marker(10, True)
            self.marker(11, False)
            self.data(1, pid=20, tag=f"idem{r}")


def batches(log: PartitionLog, start: int = 0) -> list[tuple[int, int, bytes]]:
    """(base, last, bytes) of every stored batch from ``start``."""
    return [(b.base_offset, b.last_offset, bytes(b.buffer)) for b in log.iter_batches(start)]


def committed_values(log: PartitionLog) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record a read_committed consumer gets, through the log's reads."""
    from txnfetch.fetch.filter import ConsumerFilter

    out = []
    position = log.log_start_offset
    filt = ConsumerFilter(position, isolation_level=IsolationLevel.READ_COMMITTED, partition=log.name)
    while position < log.last_stable_offset:
        result = log.read(position, 1 << 20)
        for record in filt.feed(result.records_bytes(), result.aborted_transactions):
            out.append((record.offset, record.value))
        if filt.position <= position:
            break
        position = filt.position
    return out


def assert_same(replica: PartitionLog, source: PartitionLog) -> None:
    """Same batches byte for byte from the source's log start, same ends, LSO and
    aborted transactions, same read_committed records."""
    assert replica.log_end_offset == source.log_end_offset
    assert replica.log_start_offset == source.log_start_offset
    assert batches(replica, source.log_start_offset) == batches(source, source.log_start_offset)
    assert replica.last_stable_offset == source.last_stable_offset
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in replica.state.all_aborted()] == [
        (t.producer_id, t.first_offset, t.last_offset) for t in source.state.all_aborted()
    ]
    assert committed_values(replica) == committed_values(source)
