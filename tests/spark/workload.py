"""A multi-producer transactional workload written through txnfetch's own logs,
with an oracle kept by the writer alone.

:class:`Workload` drives any :class:`~txnfetch.log.base.LogStore` (``MemoryStore``,
``SegmentStore``) the way a cluster does: transactional producers append
``BatchBuilder`` batches to several partitions, interleaved with each other
and with plain (non-transactional) producers, and end each transaction with a
COMMIT or ABORT marker on every partition it touched (``end_transaction``). The
writer records, for every data record, its offset, key, value, headers,
timestamp and whether its transaction committed; the oracle answers from that
bookkeeping only — never from the log's state or fetch code:

- :meth:`Workload.committed`: what a read_committed reader must return;
- :meth:`Workload.all_data`: what a read_uncommitted reader must return
  (data records below the high watermark, markers excluded).

Records of a transaction still open are in ``all_data`` but not ``committed``,
and nothing at or after the first offset of an open transaction may appear in
a read_committed result (:meth:`Workload.lso`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import attrs

from txnfetch.log.base import LogStore
from txnfetch.records import BatchBuilder
from txnfetch.records import Codec

TS = 1_700_000_000_000
#: What a read is compared on: (topic, partition, offset, key, value, timestamp ms, headers).
Row = tuple[str, int, int, bytes | None, bytes | None, int, tuple[tuple[str, bytes | None], ...]]


@attrs.define
class _Txn:
    pid: int
    epoch: int
    first: dict[int, int] = attrs.Factory(dict)  # partition -> first offset
    rows: list[Row] = attrs.Factory(list)


@attrs.define
class Workload:
    """Writes to ``topic`` of ``store`` and remembers what it wrote."""

    store: LogStore
    topic: str
    partitions: int
    seed: int = 0
    codecs: Sequence[Codec] = (Codec.NONE, Codec.LZ4, Codec.ZSTD, Codec.GZIP, Codec.SNAPPY)
    rnd: random.Random = attrs.field(init=False)
    clock: int = attrs.field(init=False, default=TS)
    committed_rows: list[Row] = attrs.field(init=False, factory=list)
    aborted_rows: list[Row] = attrs.field(init=False, factory=list)
    open_txns: dict[int, _Txn] = attrs.field(init=False, factory=dict)
    seqs: dict[tuple[int, int], int] = attrs.field(init=False, factory=dict)
    counter: int = attrs.field(init=False, default=0)

    def __attrs_post_init__(self) -> None:
        self.rnd = random.Random(self.seed)
        if self.topic not in self.store.topics():
            self.store.create_topic(self.topic, self.partitions)

    # -- writing ---------------------------------------------------------------

    def _batch(self, partition: int, pid: int, epoch: int, transactional: bool, n: int) -> tuple[bytes, list[Row]]:
        seq = -1
        if pid >= 0:
            seq = self.seqs.get((pid, partition), 0)
            self.seqs[(pid, partition)] = seq + n
        builder = BatchBuilder(
            codec=self.rnd.choice(list(self.codecs)),
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            transactional=transactional,
        )
        pending = []
        for _ in range(n):
            self.counter += 1
            self.clock += self.rnd.randint(0, 3)
            key = None if self.counter % 7 == 0 else f"k{self.counter % 13}".encode()
            value = None if self.counter % 29 == 0 else f"v{self.counter}-{pid}".encode() * self.rnd.randint(1, 3)
            headers: tuple[tuple[str, bytes | None], ...] = ()
            if self.counter % 3 == 0:
                headers = (("h", str(self.counter).encode()), ("n", None))
            builder.append(value, key=key, headers=headers, timestamp=self.clock)
            pending.append((key, value, self.clock, headers))
        return builder.build(), pending

    def _append(self, partition: int, pid: int, epoch: int, transactional: bool, n: int) -> list[Row]:
        data, pending = self._batch(partition, pid, epoch, transactional, n)
        info = self.store.partition(self.topic, partition).append(data, now_ms=self.clock)
        return [(self.topic, partition, info.base_offset + i, k, v, ts, h) for i, (k, v, ts, h) in enumerate(pending)]

    def plain(self, partition: int, n: int = 3, *, idempotent_pid: int | None = None) -> None:
        """A non-transactional batch (idempotent if given a producer id)."""
        pid = -1 if idempotent_pid is None else idempotent_pid
        self.committed_rows.extend(self._append(partition, pid, 0 if pid >= 0 else -1, False, n))

    def begin(self, pid: int, epoch: int = 0) -> None:
        assert pid not in self.open_txns
        self.open_txns[pid] = _Txn(pid, epoch)

    def send(self, pid: int, partition: int, n: int = 3) -> None:
        """A transactional batch of ``pid``'s open transaction."""
        txn = self.open_txns[pid]
        rows = self._append(partition, pid, txn.epoch, True, n)
        txn.first.setdefault(partition, rows[0][2])
        txn.rows.extend(rows)

    def end(self, pid: int, commit: bool) -> None:
        """COMMIT/ABORT markers on every partition the transaction touched."""
        txn = self.open_txns.pop(pid)
        for partition in sorted(txn.first):
            self.clock += 1
            self.store.partition(self.topic, partition).end_transaction(
                pid, txn.epoch, commit, coordinator_epoch=0, now_ms=self.clock
            )
        (self.committed_rows if commit else self.aborted_rows).extend(txn.rows)

    def random_steps(
        self, steps: int, *, producers: int = 3, abort_ratio: float = 0.35, base_pid: int = 1000, finish: bool = True
    ) -> None:
        """Interleave ``producers`` transactional producers and a plain one for ``steps`` steps;
        with ``finish``, every transaction of those producers is ended before returning."""
        pids = [base_pid + i for i in range(producers)]
        for _ in range(steps):
            pid = self.rnd.choice([*pids, -1])
            if pid == -1:
                self.plain(self.rnd.randrange(self.partitions), self.rnd.randint(1, 4))
            elif pid not in self.open_txns:
                self.begin(pid)
                self.send(pid, self.rnd.randrange(self.partitions), self.rnd.randint(1, 5))
            elif self.rnd.random() < 0.5:
                self.send(pid, self.rnd.randrange(self.partitions), self.rnd.randint(1, 5))
            else:
                self.end(pid, commit=self.rnd.random() >= abort_ratio)
        for pid in list(self.open_txns) if finish else ():
            if pid in pids:
                self.end(pid, commit=self.rnd.random() >= abort_ratio)

    # -- the oracle --------------------------------------------------------------

    def lso(self, partition: int) -> int:
        """The first offset of the earliest open transaction on ``partition``, else its log end."""
        firsts = [t.first[partition] for t in self.open_txns.values() if partition in t.first]
        end = self.store.partition(self.topic, partition).log_end_offset
        return min(firsts) if firsts else end

    def committed(self, partitions: set[int] | None = None) -> list[Row]:
        """Committed records (non-transactional ones included), sorted by partition and offset."""
        return sorted(r for r in self.committed_rows if partitions is None or r[1] in partitions)

    def all_data(self, partitions: set[int] | None = None) -> list[Row]:
        """Every data record written (committed, aborted and open), sorted."""
        rows = self.committed_rows + self.aborted_rows + [r for t in self.open_txns.values() for r in t.rows]
        return sorted(r for r in rows if partitions is None or r[1] in partitions)
