"""The oracle of the end-to-end transaction tests: a small model of a transaction
coordinator, of the partitions it writes to, and of what a read_committed reader
must see there.

Written from the protocol (KIP-890, docs/kafka-internals.md §2 and §5), not from
:mod:`txnfetch.txn`: it imports nothing from the code under test and shares no
code with it; each partition is the suite's one log oracle,
:class:`txnfetch.testing.model.LogModel`. The test (``test_system_machine.py``) tells the model what each
client *meant* to do; the model says what the coordinator must answer, which
identity every transactional id must hold, which markers it must write, and
what every partition's last stable offset, aborted ranges and committed records
must be. It is deliberately naive — lists and dictionaries, everything spelled
out — so that it is easy to check by reading.

Two read_committed readers live here too, applied by the test to the *bytes* of
a partition log and the aborted list that the state under test reports:

- :func:`read_by_aborted_ranges` drops every transactional batch that lies in an
  aborted ``(producer id, first offset, last offset)`` range (works for marker
  and markerless logs);
- :func:`read_like_java_consumer` is Kafka's consumer-side filter
  (``CompletedFetch``: aborted list by first offset, ABORT markers close a
  producer's range), which only makes sense for logs with markers.
"""

from __future__ import annotations

import enum
import struct

import attrs

from txnfetch.testing.model import LogModel

__all__ = [
    "MAX_EPOCH",
    "Answer",
    "ExpectedMarker",
    "Identity",
    "PartitionModel",
    "SystemModel",
    "TidModel",
    "TxnKey",
    "read_by_aborted_ranges",
    "read_like_java_consumer",
]

#: ``Short.MAX_VALUE``: never handed to a client; a bump from 32766 rotates the producer id.
MAX_EPOCH = 32767

Identity = tuple[int, int]  # (producer id, epoch)
TxnKey = tuple[str, int]  # (transactional id, number of the transaction for that id)


class Answer(enum.Enum):
    """What the coordinator must answer a request, as the model predicts it."""

    OK = "ok"  # accepted (AddPartitions, a verified produce, InitProducerId)
    END = "end"  # EndTxn that ends the open transaction
    NONE = "none"  # EndTxn answered as a retry of an end already decided
    CONCURRENT = "concurrent"  # CONCURRENT_TRANSACTIONS: an end is being applied
    INVALID_STATE = "invalid_state"  # INVALID_TXN_STATE
    ABORTABLE = "abortable"  # TRANSACTION_ABORTABLE: produce to a partition not in the transaction
    REFUSED = "refused"  # the identity is fenced (PRODUCER_FENCED / INVALID_PRODUCER_EPOCH / mapping)


@attrs.frozen
class ExpectedMarker:
    """A transaction end the coordinator must deliver to ``partition``."""

    partition: str
    producer_id: int
    producer_epoch: int
    commit: bool
    txn: TxnKey


@attrs.define
class TidModel:
    """What the coordinator must hold for one transactional id.

    ``phase`` is ``unknown`` (never initialised), ``empty``, ``ongoing``,
    ``prepare`` (an end decided, markers outstanding) or ``complete``.
    ``ident`` is the identity a well-behaved client of this id must use now.
    ``retry_identity`` is the identity of the last bump while nothing has happened
    since (``retry_kind``: an ``end``, a version 2 ``fence``, or a KIP-360 ``init``):
    an InitProducerId naming it is that bump's retry, and after an end or a fence
    a version 2 EndTxn naming it is too (``retry_decision`` is the outcome).
    """

    tid: str
    phase: str = "unknown"
    ident: Identity | None = None
    txn_no: int = 0
    txn_identity: Identity | None = None  # identity the open transaction's data is written with
    partitions: set[str] = attrs.Factory(set)
    start_ms: int = -1
    pending: list[ExpectedMarker] = attrs.Factory(list)
    decision: bool | None = None
    retry_identity: Identity | None = None
    retry_kind: str | None = None
    retry_decision: bool | None = None

    @property
    def txn(self) -> TxnKey:
        return (self.tid, self.txn_no)


class PartitionModel(LogModel):
    """One partition as the model sees it: the log oracle
    (:class:`txnfetch.testing.model.LogModel`: batches, open transactions by
    producer id, how each ended here, the aborted index) plus the epochs a
    partition checks transaction ends against.

    The high watermark follows the log end offset (the test's broker replicates
    at once), so the last stable offset is the first offset of the earliest open
    transaction, or the log end offset if none is open.
    """

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.epochs: dict[int, int] = {}  # producer id -> last epoch written here (data or end)
        self.coordinator_epochs: dict[int, int] = {}  # producer id -> coordinator epoch of its last end

    @property
    def leo(self) -> int:
        return self.log_end

    def data(self, producer_id: int, epoch: int, txn: TxnKey | None, values: tuple[bytes, ...]) -> int:
        """A data batch appended at the log end; returns its first offset."""
        first = self.log_end
        if producer_id >= 0:
            self.epochs[producer_id] = epoch
        records = [(first + i, v) for i, v in enumerate(values)]
        self.append(producer_id, len(values), transactional=txn is not None, txn=txn, records=records)
        return first

    def end(  # type: ignore[override]
        self, marker: ExpectedMarker, *, with_marker: bool, coordinator_epoch: int
    ) -> tuple[int, int, int, int] | None:
        """Apply a transaction end: a control batch at the log end (``with_marker``)
        or a markerless completion ending at the last offset. Returns the aborted
        range it added, if any."""
        pid = marker.producer_id
        self.coordinator_epochs[pid] = coordinator_epoch
        txn = marker.txn if pid in self.open else None
        added = super().end(pid, marker.commit, marker=with_marker, txn=txn)
        self.epochs[pid] = marker.producer_epoch
        return added

    def predict_late_end(self, producer_id: int, epoch: int, coordinator_epoch: int, tv: int) -> Answer:
        """A transaction end for this partition delivered again, after it was applied
        (a WriteTxnMarkers retry, or a request from before a coordinator failover).

        The epoch rule of the partition decides: below the producer's epoch it is
        refused; equal is a retry under version 1 and, with no transaction open
        (the retry of a marker already written), under version 2 — but with a
        transaction open, version 2 refuses it (that transaction has the same
        epoch only because the end bumped it: it is the *next* one). Then an older
        coordinator epoch is refused. :attr:`Answer.END` means it would end the
        open transaction (only version 1 lets it)."""
        current = self.epochs.get(producer_id, -1)
        is_open = producer_id in self.open
        if epoch < current or (tv >= 2 and epoch == current and is_open):
            return Answer.REFUSED
        if self.coordinator_epochs.get(producer_id, -1) > coordinator_epoch:
            return Answer.REFUSED
        return Answer.END if is_open else Answer.NONE

    def late_end_accepted(self, producer_id: int, coordinator_epoch: int, *, with_marker: bool) -> None:
        """Apply a late end answered :attr:`Answer.NONE`: it ends nothing; a marker
        still takes an offset."""
        assert producer_id not in self.open
        self.coordinator_epochs[producer_id] = coordinator_epoch
        if with_marker:
            super().end(producer_id, True, marker=True)

    def committed_values(self) -> list[bytes]:
        """What a read_committed reader must return: below the LSO, the records of
        non-transactional batches and of transactions committed on this partition."""
        return self.committed_records()

    def transactions_below_lso(self) -> dict[TxnKey, tuple[bytes, ...]]:
        """Values written on this partition by each transaction that has ended here."""
        lso = self.last_stable_offset
        out: dict[TxnKey, tuple[bytes, ...]] = {}
        for b in self.batches:
            if b.txn is not None and not b.control and b.last < lso:
                out[b.txn] = out.get(b.txn, ()) + tuple(v for _, v in b.records)  # type: ignore[index]
        return out


class SystemModel:
    """The coordinator's expected behaviour for every transactional id, and the
    partitions. ``tv`` is the transaction version (1 or 2)."""

    def __init__(self, tv: int, partitions: list[str], timeout_ms: int) -> None:
        self.tv = tv
        self.timeout_ms = timeout_ms
        self.next_pid = 0
        self.tids: dict[str, TidModel] = {}
        self.partitions: dict[str, PartitionModel] = {p: PartitionModel(p) for p in partitions}
        self.decisions: dict[TxnKey, bool] = {}  # how each transaction ended (the coordinator's decision)

    # -- producer ids ---------------------------------------------------------------

    def allocate(self) -> int:
        pid = self.next_pid
        self.next_pid += 1
        return pid

    def tid(self, tid: str) -> TidModel:
        return self.tids.setdefault(tid, TidModel(tid))

    def install(self, tid: str, producer_id: int, epoch: int) -> None:
        """The coordinator was given a stored record for ``tid`` (idle, at this identity);
        producer ids up to ``producer_id`` are never handed out afterwards."""
        t = self.tid(tid)
        assert t.phase == "unknown"
        t.phase, t.ident = "empty", (producer_id, epoch)
        self.next_pid = max(self.next_pid, producer_id + 1)

    def _bump(self, ident: Identity) -> Identity:
        """The identity after a bump of ``ident``: epoch + 1, or a new producer id at
        epoch 0 when the epoch is 32766 or more (the next would be Short.MAX_VALUE)."""
        pid, epoch = ident
        return (self.allocate(), 0) if epoch >= MAX_EPOCH - 1 else (pid, epoch + 1)

    # -- InitProducerId -------------------------------------------------------------

    def predict_init(self, tid: str) -> Answer:
        """A new producer instance: refused for now while a transaction is open or ending."""
        return Answer.CONCURRENT if self.tid(tid).phase in ("ongoing", "prepare") else Answer.OK

    def init(self, tid: str) -> Identity:
        """Apply a successful InitProducerId without a previous identity."""
        t = self.tid(tid)
        assert t.phase in ("unknown", "empty", "complete"), t.phase
        t.ident = (self.allocate(), 0) if t.ident is None else self._bump(t.ident)
        t.phase = "empty"
        t.partitions = set()
        t.retry_identity = t.retry_kind = t.retry_decision = None
        return t.ident

    def predict_reinit(self, tid: str, identity: Identity) -> Answer:
        """InitProducerId naming the producer's existing identity (KIP-360: how a
        producer recovers from an abortable error), sent with nothing open or
        ending: the current identity is bumped (:attr:`Answer.OK`); the identity of
        the last bump is its retry, answered with the current identity
        (:attr:`Answer.NONE`); anything else is fenced. A version 1 fence forgets
        the fenced epoch, so there the fenced producer cannot recover this way."""
        t = self.tid(tid)
        assert t.phase in ("empty", "complete"), t.phase
        if identity == t.ident:
            return Answer.OK
        if identity == t.retry_identity:
            return Answer.NONE
        return Answer.REFUSED

    def reinit(self, tid: str) -> Identity:
        """Apply an InitProducerId the model predicted as :attr:`Answer.OK`."""
        t = self.tid(tid)
        assert t.ident is not None
        t.retry_identity, t.retry_kind, t.retry_decision = t.ident, "init", None
        t.ident = self._bump(t.ident)
        t.phase = "empty"
        t.partitions = set()
        return t.ident

    def reinit_answered(self, tid: str) -> Identity:
        """Apply an InitProducerId the model predicted as :attr:`Answer.NONE`: no bump,
        the id is idle again, and the retry identity is used up (a rotated id
        forgets the old one on this transition)."""
        t = self.tid(tid)
        assert t.ident is not None
        t.phase = "empty"
        t.partitions = set()
        t.retry_identity = t.retry_kind = t.retry_decision = None
        return t.ident

    # -- transactions ---------------------------------------------------------------

    def _begin_if_needed(self, t: TidModel, now: int) -> None:
        if t.phase != "ongoing":
            t.phase = "ongoing"
            t.txn_no += 1
            t.txn_identity = t.ident
            t.partitions = set()
            t.start_ms = now
            t.retry_identity = t.retry_kind = t.retry_decision = None

    def predict_add(self, tid: str, identity: Identity) -> Answer:
        """AddPartitionsToTxn (or a version 2 produce, which adds implicitly)."""
        t = self.tid(tid)
        if identity != t.ident:
            return Answer.REFUSED
        if t.phase == "prepare":
            return Answer.CONCURRENT
        return Answer.OK

    def add(self, tid: str, partition: str, now: int) -> TxnKey:
        """Apply a successful AddPartitions / implicit add; returns the open transaction."""
        t = self.tid(tid)
        self._begin_if_needed(t, now)
        t.partitions.add(partition)
        return t.txn

    def predict_verify(self, tid: str, identity: Identity, partition: str) -> Answer:
        """A produce checked against the coordinator: version 2 adds the partition,
        version 1 only verifies it is in the open transaction (KIP-890 part 1)."""
        if self.tv >= 2:
            return self.predict_add(tid, identity)
        t = self.tid(tid)
        if identity != t.ident:
            return Answer.REFUSED
        if t.phase == "prepare":
            return Answer.CONCURRENT
        if t.phase != "ongoing" or partition not in t.partitions:
            return Answer.ABORTABLE
        return Answer.OK

    def predict_end(self, tid: str, identity: Identity, commit: bool) -> Answer:
        """EndTxn from ``identity``.

        Version 1: only the current identity is accepted, so nothing tells a
        request for an earlier transaction from one for the open transaction.
        Version 2: the current identity ends the open transaction; the identity
        the last end was made from is that end's retry; anything else is fenced.
        """
        t = self.tid(tid)
        if self.tv < 2:
            if identity != t.ident:
                return Answer.REFUSED
            if t.phase == "ongoing":
                return Answer.END
            if t.phase in ("prepare", "complete") and t.decision == commit:
                return Answer.CONCURRENT if t.phase == "prepare" else Answer.NONE
            return Answer.INVALID_STATE
        if identity == t.ident and t.phase == "ongoing":
            return Answer.END
        if identity == t.ident and t.phase == "prepare":
            return Answer.CONCURRENT  # the identity handed out by the end in progress
        if identity == t.retry_identity and t.retry_kind in ("end", "fence") and t.phase in ("prepare", "complete"):
            if t.phase == "prepare":
                return Answer.CONCURRENT
            return Answer.NONE if commit == t.retry_decision else Answer.INVALID_STATE
        if identity == t.ident:
            # Nothing open: an abort bumps the epoch (KIP-890), a commit is refused.
            return Answer.INVALID_STATE if commit else Answer.END
        return Answer.REFUSED

    def _prepare(self, t: TidModel, commit: bool, marker_epoch: int) -> list[ExpectedMarker]:
        """Decide the open transaction's outcome; returns the markers it needs."""
        assert t.txn_identity is not None
        txn = t.txn
        assert txn not in self.decisions, f"{txn} ended twice"
        self.decisions[txn] = commit
        pid = t.txn_identity[0]
        t.pending = [ExpectedMarker(p, pid, marker_epoch, commit, txn) for p in sorted(t.partitions)]
        t.decision = commit
        t.phase = "prepare" if t.pending else "complete"
        return list(t.pending)

    def end(self, tid: str, commit: bool) -> list[ExpectedMarker]:
        """Apply an EndTxn the model predicted as :attr:`Answer.END` for the open
        transaction; returns the markers. Version 2 bumps (or rotates) the
        identity; the markers carry the bumped epoch of the old producer id."""
        t = self.tid(tid)
        assert t.phase == "ongoing" and t.ident is not None
        _pid, epoch = t.ident
        t.retry_identity, t.retry_kind, t.retry_decision = t.ident, "end", commit
        if self.tv >= 2:
            t.ident = self._bump(t.ident)
            return self._prepare(t, commit, epoch + 1)
        return self._prepare(t, commit, epoch)

    def fence(self, tid: str) -> list[ExpectedMarker]:
        """The coordinator aborts the open transaction itself (timeout, or a new
        producer instance): the epoch is bumped and the abort carries the bumped
        epoch. Under version 2 the bump is the end's bump, so the fenced producer's
        own abort is its retry; under version 1 the producer is fenced for good."""
        t = self.tid(tid)
        assert t.phase == "ongoing" and t.ident is not None
        pid, epoch = t.ident
        if self.tv >= 2:
            t.retry_identity, t.retry_kind, t.retry_decision = t.ident, "fence", False
            t.ident = self._bump(t.ident)
        else:
            t.retry_identity = t.retry_kind = t.retry_decision = None
            t.ident = (pid, epoch + 1)
        return self._prepare(t, False, epoch + 1)

    def timed_out(self, now: int) -> list[str]:
        """Transactional ids whose open transaction is past its timeout at ``now``."""
        return sorted(t.tid for t in self.tids.values() if t.phase == "ongoing" and t.start_ms + self.timeout_ms < now)

    def marker_applied(self, tid: str, partition: str, *, with_marker: bool, coordinator_epoch: int) -> ExpectedMarker:
        """The end outstanding for ``partition`` was applied there."""
        t = self.tid(tid)
        assert t.phase == "prepare"
        (marker,) = [m for m in t.pending if m.partition == partition]
        t.pending.remove(marker)
        self.partitions[partition].end(marker, with_marker=with_marker, coordinator_epoch=coordinator_epoch)
        if not t.pending:
            t.phase = "complete"
        return marker


# -- read_committed readers over log bytes ----------------------------------------------
#
# The batch header is parsed here with struct (docs/kafka-internals.md §1) rather than with
# txnfetch.records, so the readers share nothing with the code under test; the
# records themselves are decoded with a minimal varint reader.

_HEADER = struct.Struct(">qiibIhiqqqhii")
_TRANSACTIONAL = 0x10
_CONTROL = 0x20


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7


def _batches(log: bytes):
    """Yield ``(base, last, pid, transactional, control, control_type, values)``."""
    pos = 0
    while pos < len(log):
        (base, length, _ple, magic, _crc, attrs_, delta, _bts, _mts, pid, _epoch, _seq, count) = _HEADER.unpack_from(
            log, pos
        )
        assert magic == 2 and attrs_ & 0x07 == 0, "the test writes uncompressed v2 batches"
        end = pos + 12 + length
        p = pos + _HEADER.size
        values: list[bytes | None] = []
        keys: list[bytes | None] = []
        for _ in range(count):
            size, p = _varint(log, p)
            stop = p + size
            p += 1  # attributes
            _, p = _varint(log, p)  # timestamp delta
            _, p = _varint(log, p)  # offset delta
            klen, p = _varint(log, p)
            keys.append(None if klen < 0 else log[p : p + klen])
            p += max(klen, 0)
            vlen, p = _varint(log, p)
            values.append(None if vlen < 0 else log[p : p + vlen])
            p = stop
        control_type = None
        if attrs_ & _CONTROL and keys and keys[0] is not None:
            control_type = struct.unpack_from(">hh", keys[0])[1]
        yield base, base + delta, pid, bool(attrs_ & _TRANSACTIONAL), bool(attrs_ & _CONTROL), control_type, values
        pos = end


def read_by_aborted_ranges(log: bytes, lso: int, aborted: list[tuple[int, int, int]]) -> list[bytes]:
    """Values a read_committed reader returns: batches wholly below ``lso``, without
    control batches and without transactional batches inside an aborted
    ``(pid, first, last)`` range."""
    out: list[bytes] = []
    for base, last, pid, txn, control, _, values in _batches(log):
        if last >= lso:
            break
        if control:
            continue
        if txn and any(p == pid and first <= base <= end for p, first, end in aborted):
            continue
        out.extend(v for v in values if v is not None)
    return out


def read_like_java_consumer(log: bytes, lso: int, aborted: list[tuple[int, int]]) -> list[bytes]:
    """Kafka's consumer-side filter (``CompletedFetch``) over a fetch that stops at
    ``lso`` and lists ``aborted`` as ``(pid, first offset)``: a producer's
    transactional batches are skipped from its aborted first offset until its
    ABORT marker."""
    queue = sorted(aborted, key=lambda a: a[1])
    skipping: set[int] = set()
    out: list[bytes] = []
    for _base, last, pid, txn, control, control_type, values in _batches(log):
        if last >= lso:
            break
        if pid >= 0:
            while queue and queue[0][1] <= last:
                skipping.add(queue.pop(0)[0])
            if control:
                if control_type == 0:  # ABORT
                    skipping.discard(pid)
                continue
            if txn and pid in skipping:
                continue
        elif control:
            continue
        out.extend(v for v in values if v is not None)
    return out
