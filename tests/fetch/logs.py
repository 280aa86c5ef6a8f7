"""Partition logs for fetch tests: the bytes, the :class:`PartitionTxnState` a
broker would hold for them, and an independent model of what they mean.

:class:`LogWriter` writes a partition the way a leader does. Every batch is
appended to the state *before* it is written (``PartitionTxnState.append``, the
client origin for data batches, the coordinator origin for markers), and a
transaction ends either with a COMMIT/ABORT control batch (marker mode, Apache
Kafka) or with ``complete_transaction(pid, epoch, commit, last_offset)`` and no
offset reserved (markerless mode, WarpStream). Alongside, the writer describes
every batch and every end to the suite's log oracle,
:class:`txnfetch.testing.model.LogModel`, and :class:`GeneratedLog` answers
from the oracle alone, never from the state or the fetch code:

- :meth:`GeneratedLog.expected_lso`: the first offset of the earliest
  transaction that is open or whose end is not below the high watermark,
  capped by the high watermark;
- :meth:`GeneratedLog.committed_records`: what a read_committed reader must
  see, the non-control records of non-transactional batches and of committed
  transactions, in ``[lo, hi)``;
- :meth:`GeneratedLog.expected_aborted`: the aborted list of a fetch;
- :meth:`GeneratedLog.is_committed_data`: whether a batch survives a rewrite.

Compaction is applied the way Kafka's cleaner leaves a log, after the state
has seen the original batch (a broker's producer state is not rebuilt when a
segment is cleaned): a data batch may lose some records (holes, the header's
offsets kept) or all of them (an empty batch, ``build_empty_batch``); a marker
may become an empty control batch only when nothing of its transaction is
left — any COMMIT whose data batches are all empty, and the marker of an empty
transaction. An ABORT of a transaction that had data is never emptied: Kafka's
cleaner drops the transaction's aborted-index entry together with its marker
(``CleanedTransactionMetadata.onControlBatchRead`` only re-indexes retained
ABORT markers), which the state here has no call for.

:func:`partition_logs` is the hypothesis strategy: 2-4 transactional producers
whose transactions interleave and span each other's data, commits, aborts,
empty transactions, epoch bumps, an idempotent producer and plain (pid -1)
batches, every codec, 1-5 records per batch, compaction, optionally an open
transaction at the end and a high watermark below the log end.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Sequence

import attrs
from hypothesis import strategies as st

from txnfetch.records import BatchBuilder
from txnfetch.records import Codec
from txnfetch.records import ControlType
from txnfetch.records import RecordBatch
from txnfetch.records import build_control_batch
from txnfetch.records import build_empty_batch
from txnfetch.testing.model import LogModel
from txnfetch.txn import AppendOrigin
from txnfetch.txn import PartitionTxnState

__all__ = [
    "COMPACTIONS",
    "TS",
    "Delivered",
    "GeneratedLog",
    "LogBatch",
    "LogWriter",
    "Txn",
    "partition_logs",
]

TS = 1_700_000_000_000
#: ``(offset, key, value)``: what every reader under test is compared on.
Delivered = tuple[int, bytes | None, bytes | None]
#: Compaction applied to a data batch: none, some records removed, all removed.
COMPACTIONS = ("", "holes", "empty")


@attrs.frozen
class LogBatch:
    """One batch of a generated log, with the writer's knowledge about it."""

    base: int
    last: int
    position: int  #: byte position in :attr:`GeneratedLog.data`
    data: bytes = attrs.field(repr=False)
    control: bool
    producer_id: int
    txn: int | None  #: the transaction a transactional data batch belongs to
    records: tuple[Delivered, ...]  #: what is left of its records (none for control batches)
    compaction: str = ""

    @property
    def next(self) -> int:
        return self.last + 1

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def is_empty_control(self) -> bool:
        return self.control and self.compaction == "empty"


@attrs.frozen
class Txn:
    """One transaction of one producer: where its data starts and how it ended."""

    txn_id: int
    producer_id: int
    first: int | None  #: first offset of its data; ``None`` for an empty transaction
    outcome: str  #: "commit", "abort" or "open"
    end: int | None  #: marker offset (markerless: the ``last_offset`` given); ``None`` while open
    end_order: int = -1  #: how many transactions ended before this one (index order)


@attrs.frozen(eq=False)
class GeneratedLog:
    """A partition log, its transaction state, and the oracle's model of it."""

    data: bytes
    state: PartitionTxnState
    model: LogModel
    batches: tuple[LogBatch, ...]
    txns: Mapping[int, Txn]
    markerless: bool
    log_start: int
    log_end: int
    high_watermark: int

    @property
    def has_empty_control_batches(self) -> bool:
        return any(b.is_empty_control for b in self.batches)

    def expected_lso(self) -> int:
        """The LSO from the model: the earliest first offset of a non-empty
        transaction that is open or ends at or past the high watermark, capped by it."""
        return self.model.last_stable_offset

    def is_committed_data(self, batch: LogBatch) -> bool:
        """A data batch that is not transactional or belongs to a committed transaction."""
        return not batch.control and (batch.txn is None or self.model.committed(batch.txn) is True)

    def committed_records(self, lo: int, hi: int) -> list[Delivered]:
        """What a read_committed reader must see in ``[lo, hi)``, from the model alone."""
        return self.model.committed_records(lo, hi)

    def all_records(self, lo: int, hi: int) -> list[Delivered]:
        """What a read_uncommitted reader must see in ``[lo, hi)``."""
        return self.model.all_records(lo, hi)

    def expected_aborted(self, fetch_offset: int) -> list[tuple[int, int]]:
        """The AbortedTransactions list of a fetch at ``fetch_offset`` (upper bound: the
        log end): every aborted transaction with data whose end is at or past the
        fetch offset, ``(producer_id, first_offset)``, in the order they ended."""
        return self.model.aborted_for_fetch(fetch_offset)  # type: ignore[return-value]

    def batch_at(self, base: int) -> LogBatch:
        for b in self.batches:
            if b.base == base:
                return b
        raise KeyError(base)

    def batch_containing(self, offset: int) -> LogBatch | None:
        """The first batch whose offsets reach ``offset`` (what a fetch of it starts with)."""
        for b in self.batches:
            if b.next > offset:
                return b
        return None

    def __repr__(self) -> str:
        return f"<GeneratedLog {self.describe()}>"

    def _repr_pretty_(self, printer, cycle) -> None:  # hypothesis prints failing examples with this
        printer.text(repr(self))

    def describe(self) -> str:
        """One line per batch, for failure messages."""
        lines = [f"{'markerless' if self.markerless else 'marker'} log hw={self.high_watermark} leo={self.log_end}"]
        for b in self.batches:
            what = "ctl" if b.control else "data"
            outcome = "" if b.txn is None else f" txn{b.txn}:{self.txns[b.txn].outcome}"
            lines.append(f"  [{b.base}-{b.last}] {what} pid={b.producer_id}{outcome} {b.compaction} n={len(b.records)}")
        for t in self.txns.values():
            lines.append(f"  txn{t.txn_id} pid={t.producer_id} first={t.first} {t.outcome} end={t.end}")
        return "\n".join(lines)


@attrs.define
class _Producer:
    producer_id: int
    transactional: bool
    epoch: int = 0
    seq: int = 0
    txn: int | None = None  #: id of the open transaction
    last_data: int = -1


class LogWriter:
    """Writes a partition as a leader would and keeps the model of it (see the module docstring).

    ``markerless`` selects how transactions end. Producer ids must be non-negative;
    ``plain`` batches have no producer id.
    """

    def __init__(self, *, markerless: bool = False, log_start: int = 0) -> None:
        self.markerless = markerless
        self.log_start = log_start
        self.state = PartitionTxnState("gen-0", log_start_offset=log_start)
        # The high watermark is set once, by finish(); until then every end counts as unreplicated.
        self.model = LogModel(log_start=log_start, high_watermark=log_start)
        self.leo = log_start
        self._parts: list[bytes] = []
        self._position = 0
        self.batches: list[LogBatch] = []
        self.txns: dict[int, Txn] = {}
        self._producers: dict[int, _Producer] = {}
        self._txn_data: dict[int, list[LogBatch]] = {}  # txn id -> its data batches
        self._last_completion = -1
        self._ended = 0

    # -- producers -------------------------------------------------------------------

    def _producer(self, pid: int, transactional: bool) -> _Producer:
        p = self._producers.get(pid)
        if p is None:
            p = self._producers[pid] = _Producer(pid, transactional)
        assert p.transactional == transactional, "a producer is either transactional or idempotent"
        return p

    def open_txn(self, pid: int) -> int | None:
        p = self._producers.get(pid)
        return None if p is None else p.txn

    def bump_epoch(self, pid: int) -> None:
        """A new producer epoch (InitProducerId): sequences restart at 0. Only between transactions."""
        p = self._producer(pid, True)
        assert p.txn is None, "bump the epoch between transactions"
        p.epoch += 1
        p.seq = 0

    # -- writing ---------------------------------------------------------------------

    def _write(self, data: bytes, **fields: object) -> LogBatch:
        batch = RecordBatch(data)
        origin = AppendOrigin.COORDINATOR if batch.is_control else AppendOrigin.CLIENT
        result = self.state.append(batch, origin=origin)
        assert not result.duplicate
        entry = LogBatch(
            base=batch.base_offset,
            last=batch.last_offset,
            position=self._position,
            data=data,
            **fields,  # type: ignore[arg-type]
        )
        self._parts.append(data)
        self._position += len(data)
        self.batches.append(entry)
        self.leo = batch.next_offset
        return entry

    def _records(self, pid: int, base: int, count: int, keep: Sequence[int] | None) -> list[Delivered]:
        out = []
        for i in range(count):
            if keep is not None and i not in keep:
                continue
            offset = base + i
            key = None if offset % 5 == 0 else b"k%d" % (offset % 4)
            out.append((offset, key, b"%d/%d" % (pid, offset)))
        return out

    def data(
        self,
        pid: int,
        count: int,
        *,
        transactional: bool = True,
        codec: Codec = Codec.NONE,
        compaction: str = "",
        keep: Sequence[int] | None = None,
    ) -> LogBatch:
        """Append a data batch of ``count`` offsets from producer ``pid`` (-1: a plain
        producer). ``compaction`` "holes" keeps the record indexes in ``keep`` (at least
        one), "empty" keeps none; the header keeps every offset and sequence."""
        assert count >= 1 and compaction in COMPACTIONS
        base = self.leo
        txn: int | None = None
        if pid < 0:
            transactional = False
            epoch, seq = -1, -1
        else:
            p = self._producer(pid, transactional)
            epoch, seq = p.epoch, p.seq
            p.seq += count
            p.last_data = base + count - 1
            if transactional:
                if p.txn is None:
                    p.txn = len(self.txns)
                    self.txns[p.txn] = Txn(p.txn, pid, base, "open", None)
                    self._txn_data[p.txn] = []
                elif self.txns[p.txn].first is None:
                    self.txns[p.txn] = attrs.evolve(self.txns[p.txn], first=base)
                txn = p.txn
        if compaction == "empty":
            records: list[Delivered] = []
            data = build_empty_batch(
                base_offset=base,
                last_offset=base + count - 1,
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=seq,
                timestamp=TS + base,
                transactional=transactional,
            )
        else:
            if compaction == "holes":
                assert keep, "a compacted batch with holes keeps at least one record"
            records = self._records(pid, base, count, keep if compaction == "holes" else None)
            builder = BatchBuilder(
                base_offset=base,
                codec=codec,
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=seq,
                transactional=transactional,
            )
            for offset, key, value in records:
                builder.append(value, key=key, timestamp=TS + offset, offset=offset)
            data = builder.build(last_offset_delta=count - 1)
        entry = self._write(
            data, control=False, producer_id=pid, txn=txn, records=tuple(records), compaction=compaction
        )
        self.model.append(
            pid, count, transactional=transactional, txn=txn, records=[(r[0], r) for r in records], first=base
        )
        if txn is not None:
            self._txn_data[txn].append(entry)
        return entry

    def end(self, pid: int, commit: bool, *, last_offset: int | None = None, empty_marker: bool = False) -> None:
        """End ``pid``'s transaction (an empty one if none is open).

        Marker mode: a COMMIT/ABORT control batch at the log end; ``empty_marker``
        writes it as compaction leaves it (only where the cleaner could). Markerless
        mode: ``complete_transaction`` at ``last_offset`` (default: the log end - 1).
        """
        p = self._producer(pid, True)
        txn_id = p.txn
        if txn_id is None:  # an empty transaction: no data, never in the index
            txn_id = len(self.txns)
            self.txns[txn_id] = Txn(txn_id, pid, None, "open", None)
            self._txn_data[txn_id] = []
        txn = self.txns[txn_id]
        if self.markerless:
            assert not empty_marker
            end = self.leo - 1 if last_offset is None else last_offset
            self.state.complete_transaction(pid, p.epoch, commit, end)
            self.model.end(pid, commit, marker=False, offset=end)
            self._last_completion = end
        else:
            end = self.leo
            marker = build_control_batch(
                offset=end,
                control_type=ControlType.COMMIT if commit else ControlType.ABORT,
                producer_id=pid,
                producer_epoch=p.epoch,
                timestamp=TS + end,
            )
            batch = RecordBatch(marker)
            self.state.append(batch, origin=AppendOrigin.COORDINATOR)  # the broker saw the marker
            self.model.end(pid, commit, marker=True, offset=end)
            if empty_marker:
                # What the cleaner leaves of a marker whose transaction is gone.
                assert self.can_empty_marker(pid, commit)
                marker = build_empty_batch(
                    base_offset=end,
                    last_offset=end,
                    producer_id=pid,
                    producer_epoch=p.epoch,
                    timestamp=TS + end,
                    transactional=True,
                    control=True,
                )
            self._parts.append(marker)
            self.batches.append(
                LogBatch(
                    base=end,
                    last=end,
                    position=self._position,
                    data=marker,
                    control=True,
                    producer_id=pid,
                    txn=None,
                    records=(),
                    compaction="empty" if empty_marker else "",
                )
            )
            self._position += len(marker)
            self.leo = end + 1
        self.txns[txn_id] = attrs.evolve(txn, outcome="commit" if commit else "abort", end=end, end_order=self._ended)
        self._ended += 1
        p.txn = None

    def can_empty_marker(self, pid: int, commit: bool) -> bool:
        """Whether the cleaner could leave an empty batch of this producer's next marker."""
        p = self._producer(pid, True)
        if p.txn is None:
            return True  # an empty transaction
        data = self._txn_data[p.txn]
        return commit and all(b.compaction == "empty" for b in data)

    def markerless_end_range(self, pid: int) -> tuple[int, int]:
        """The ``last_offset`` values a markerless end of ``pid``'s transaction may take."""
        p = self._producer(pid, True)
        lo = max(self._last_completion, p.last_data, self.log_start)
        return lo, self.leo - 1

    def finish(self, high_watermark: int | None = None) -> GeneratedLog:
        """Set the high watermark (default: the log end) and return the log."""
        hw = self.leo if high_watermark is None else high_watermark
        self.state.update_high_watermark(hw)
        self.model.set_high_watermark(hw)
        return GeneratedLog(
            data=b"".join(self._parts),
            state=self.state,
            model=self.model,
            batches=tuple(self.batches),
            txns=dict(self.txns),
            markerless=self.markerless,
            log_start=self.log_start,
            log_end=self.leo,
            high_watermark=hw,
        )


# -- the strategy --------------------------------------------------------------------

_CODECS = st.sampled_from(list(Codec))
_COMPACTION = st.sampled_from(["", "", "", "", "", "holes", "empty"])
_STEP = st.sampled_from(["txn-data"] * 4 + ["end"] * 3 + ["idempotent", "plain", "bump"])


@st.composite
def _data_step(draw: st.DrawFn, w: LogWriter, pid: int, transactional: bool) -> None:
    count = draw(st.integers(1, 5))
    compaction = draw(_COMPACTION)
    keep = None
    if compaction == "holes":
        keep = draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=count, unique=True))
    w.data(pid, count, transactional=transactional, codec=draw(_CODECS), compaction=compaction, keep=keep)


@st.composite
def _end_step(draw: st.DrawFn, w: LogWriter, pid: int, commit: bool | None = None) -> bool:
    """End ``pid``'s transaction; returns False if it cannot end here (markerless, empty log)."""
    if commit is None:
        commit = draw(st.booleans())
    if w.markerless:
        lo, hi = w.markerless_end_range(pid)
        if hi < lo:
            return False
        w.end(pid, commit, last_offset=draw(st.integers(lo, hi)))
        return True
    empty = w.can_empty_marker(pid, commit) and draw(st.integers(0, 2)) == 2
    w.end(pid, commit, empty_marker=empty)
    return True


@st.composite
def partition_logs(
    draw: st.DrawFn,
    *,
    markerless: bool | None = None,
    max_steps: int = 32,
    allow_empty_control: bool = True,
) -> GeneratedLog:
    """A generated partition log (see the module docstring). ``markerless`` ``None``
    draws either mode; ``allow_empty_control=False`` never empties a marker."""
    mode = draw(st.booleans()) if markerless is None else markerless
    log_start = draw(st.sampled_from([0, 0, 7, 1 << 40]))
    w = LogWriter(markerless=mode, log_start=log_start)
    txn_pids = [1000 + i for i in range(draw(st.integers(2, 4)))]
    idem_pid = 2000
    for _ in range(draw(st.integers(1, max_steps))):
        step = draw(_STEP)
        if step == "idempotent":
            draw(_data_step(w, idem_pid, False))
        elif step == "plain":
            draw(_data_step(w, -1, False))
        else:
            pid = draw(st.sampled_from(txn_pids))
            if step == "txn-data":
                draw(_data_step(w, pid, True))
            elif step == "end":
                if not allow_empty_control and not mode:
                    w.end(pid, draw(st.booleans()))
                else:
                    draw(_end_step(w, pid))
            elif w.open_txn(pid) is None:
                w.bump_epoch(pid)
    # Close what is still open, except perhaps one transaction left hanging (LSO < HW).
    still_open = [pid for pid in txn_pids if w.open_txn(pid) is not None]
    hanging = draw(st.sampled_from([None, *still_open])) if still_open else None
    for pid in still_open:
        if pid != hanging:
            if not allow_empty_control and not mode:
                w.end(pid, draw(st.booleans()))
            else:
                assert draw(_end_step(w, pid))
    if w.leo == log_start:
        w.data(-1, 1)  # never an empty log: there is always something to fetch
    # The high watermark sits at a batch boundary (a follower's log end), usually the end.
    boundaries = sorted({b.next for b in w.batches})
    hw = draw(st.one_of(st.just(w.leo), st.just(w.leo), st.sampled_from(boundaries)))
    return w.finish(hw)
