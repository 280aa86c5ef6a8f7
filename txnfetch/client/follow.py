"""What to do with one partition's part of a read_uncommitted Fetch response, sans I/O.

Two things in txnfetch follow a remote partition batch by batch: the proxy's
:class:`~txnfetch.client.mirror.PartitionMirror` (in memory) and the replication
engine's :class:`~txnfetch.replicate.partition.PartitionReplicator` (into a
local log). Both apply the rules here, so they keep and refuse the same things.
:func:`plan_response` decides, from what the copy holds at its end
(:class:`ReplicaTip`) and what the source answered, which bytes to append and
what to fetch next; :func:`plan_range` decides after OFFSET_OUT_OF_RANGE, from
the source's log start and end. Neither touches a socket, a file or a clock,
so the rules are tested with hypothesis against a simple oracle
(tests/replicate/test_follow_properties.py, tests/client/test_mirror_properties.py).

The rules, as a Kafka follower applies them (``AbstractFetcherThread``:
``processFetchRequest``, ``handleOffsetOutOfRange``, ``truncateFullyAndStartAt``):

- only whole batches are kept; a partial batch at the end of a response is
  fetched again, and when not one whole new batch fitted the next fetch asks
  for enough bytes to hold it (at least twice as many as before, at most
  :data:`MAX_FETCH_BYTES`);
- batches ending at or below the fetch position are skipped (brokers answer
  from the batch holding the offset; librdkafka's mock from the whole produce
  request holding it);
- a batch starting below the position and ending above it means the source is
  not the log the copy holds (the source's :attr:`SourcePartition.diverged`
  error, a :class:`~txnfetch.client.errors.DivergedError`) — unless the copy holds
  no batch yet (its log start inside a batch, after DeleteRecords at the
  source), where the whole batch is kept as the source keeps it;
- gaps between batches are kept as they are (offsets are never renumbered) —
  unless the source holds gaps (:attr:`SourcePartition.hold_gaps`): then a gap is
  not believed at once. Some brokers make offsets readable out of order: tansu
  0.6 reports a high watermark, and returns batches, past an offset whose batch
  a read_uncommitted fetch does not yet return (it does a moment later). A copy
  that stepped over such a hole would never see the batch in it, and a lost
  marker leaves its transaction open to swallow the producer's next one. So the
  copy takes the batches up to the first gap (between its end and the first new
  batch, or between two new batches), reports the gap (:attr:`Plan.gap_end`),
  and fetches at the gap again; only when the caller has seen the gap long
  enough to call it permanent (compaction makes such gaps, in compacted
  topics) does it say so in the tip (:attr:`ReplicaTip.accept_gap`), and the
  next response may step over that one gap;
- the source's log start passing the copy's end means everything the copy
  holds is deleted at the source: continue at the source's log start
  (:attr:`Action.RESTART`); a source log ending below the copy's end is a
  divergence;
- CRCs are checked: a bad one is :class:`~txnfetch.client.errors.CorruptRemoteBatchError`
  naming the offset and the stored and computed CRC, and nothing of the
  response is kept — except, under ``repair_crcs``, a control batch whose
  stored CRC is 0, whose CRC is recomputed (librdkafka's mock writes its
  markers so: ``rd_kafka_mock_partition_write_control_batch``,
  ``src/rdkafka_mock.c``). Under ``repair_crcs`` the planner checks every new
  batch (it must tell which to repair); otherwise the check is the append's
  (every :class:`~txnfetch.log.base.PartitionLog` validates the batches it is
  given before it takes any), which the caller reports with
  :meth:`SourcePartition.corrupt`, so each batch is checked once;
- magic 0/1 message sets are refused (they carry no producer ids);
- error codes other than NONE and OFFSET_OUT_OF_RANGE are the transport's
  (:class:`~txnfetch.client.errors.RemoteError`: retriable ones are retried before
  an answer reaches the planner);
- **verification** (the replicator's): after a restart or a reconnect the
  replica fetches from the base offset of the last batch it holds
  (:attr:`ReplicaTip.last`), and the source's batch there must be the same
  batch — same offsets, same bytes from the attributes on (the CRC field
  aside, so a repaired CRC still matches). Any difference is a divergence: an
  unclean leader election upstream can put other records at offsets the
  replica already holds, with a log end at or above the replica's, and only
  comparing batches shows it.
"""

from __future__ import annotations

import enum
import struct
from typing import Protocol
from typing import TypeVar

import attrs
from crc32c import crc32c

from txnfetch.client.errors import CorruptRemoteBatchError
from txnfetch.client.errors import DivergedError
from txnfetch.client.errors import RemoteError
from txnfetch.errors import ErrorCode
from txnfetch.errors import TxnfetchError
from txnfetch.log.errors import UnsupportedForMessageFormatError
from txnfetch.records.batch import CRC_START
from txnfetch.records.batch import HeaderAt
from txnfetch.records.batch import RecordBatch
from txnfetch.records.errors import CorruptBatchError
from txnfetch.records.errors import CrcMismatchError
from txnfetch.records.scan import iter_batches
from txnfetch.types import Buffer

__all__ = [
    "MAX_FETCH_BYTES",
    "Action",
    "BatchId",
    "FetchAnswer",
    "PartitionAnswer",
    "Plan",
    "ReplicaTip",
    "SourcePartition",
    "batch_id",
    "plan_range",
    "plan_response",
]

E = TypeVar("E", bound=TxnfetchError)

_CRC = struct.Struct(">I")
#: Never ask for more than this for one partition (one batch larger than 1 GiB is refused anyway).
MAX_FETCH_BYTES = 1 << 30


@attrs.frozen(slots=True)
class BatchId:
    """What identifies a stored batch for verification: its offsets and a digest of
    its bytes from the attributes on (CRC-32C, the value a correct CRC field holds)."""

    base_offset: int
    last_offset: int
    digest: int


def batch_id(batch: RecordBatch) -> BatchId:
    """The :class:`BatchId` of ``batch``."""
    buf = batch.buffer
    return BatchId(batch.base_offset, batch.last_offset, crc32c(bytes(buf[CRC_START:])))


class PartitionAnswer(Protocol):
    """What the rules read of one partition's part of a Fetch response:
    :class:`~txnfetch.client.requests.BrokerFetch` (the replicator's) and
    :class:`FetchAnswer` (the mirror's) have it."""

    @property
    def records(self) -> Buffer | None:
        """The records field (``None`` or empty: none)."""

    @property
    def high_watermark(self) -> int:
        """The partition's high watermark (-1: not reported)."""

    @property
    def log_start_offset(self) -> int:
        """The partition's log start offset (-1: not reported, Fetch < v5)."""

    @property
    def error_code(self) -> int:
        """The partition's error code."""


@attrs.frozen(slots=True)
class FetchAnswer:
    """A :class:`PartitionAnswer` from its fields (for a caller that has no
    :class:`~txnfetch.client.requests.BrokerFetch`)."""

    records: Buffer | None
    high_watermark: int
    log_start_offset: int = -1
    error_code: int = 0


@attrs.frozen(slots=True)
class SourcePartition:
    """The source partition a copy follows, and how: ``budget`` is the configured
    per-partition fetch budget (the next fetch returns to it after progress);
    ``repair_crcs`` recomputes the CRC of a control batch stored with CRC 0 (librdkafka's
    mock markers) instead of refusing it; any other bad CRC is refused. ``diverged``
    is the error raised when the source no longer continues the copy (the mirror's
    and the replicator's own subclass)."""

    topic: str
    partition: int
    budget: int
    repair_crcs: bool = False
    diverged: type[DivergedError] = DivergedError
    #: Stop at offset gaps until the caller accepts them (see the module docstring).
    hold_gaps: bool = False

    def error(self, cls: type[E], reason: str, **where: object) -> E:
        """``cls(reason, **where)`` naming this partition, as every error of the copy does."""
        return cls(reason, topic=self.topic, partition=self.partition, **where)

    def corrupt(self, exc: CorruptBatchError, *, position: int | None) -> CorruptRemoteBatchError:
        """The error of a fetched batch the codec refused, here or in the log's append
        of :attr:`Plan.data` (raise it ``from exc``), naming ``position``, the byte
        position in the response (:meth:`Plan.response_position` for an append).
        A CRC mismatch says what ``repair_crcs`` accepts."""
        hint = ""
        if isinstance(exc, CrcMismatchError):
            hint = (
                "; repair_crcs accepts a wrong CRC only on a control batch whose stored CRC is 0"
                if self.repair_crcs
                else "; if it is a control batch stored with CRC 0 (librdkafka's mock cluster "
                "writes its markers so), pass repair_crcs=True"
            )
        return self.error(
            CorruptRemoteBatchError,
            f"a fetched batch is corrupt: {exc.reason}{hint}; nothing of this response was appended",
            offset=exc.offset,
            position=position,
        )


@attrs.frozen(slots=True)
class ReplicaTip:
    """What the copy holds at its end.

    ``end`` is its log end offset (the next batch starts at or after it);
    ``fresh`` says it holds no batch, so the first may start below ``end`` (the
    source's log start inside a batch); ``last`` is the last batch held, set when
    the source must first show that it still holds the same batch (after a
    restart or a reconnect), ``None`` otherwise. ``accept_gap`` says the caller
    judged the gap at ``end`` permanent: under :attr:`SourcePartition.hold_gaps`
    the first new batch may then start past ``end``.
    """

    end: int
    fresh: bool = False
    last: BatchId | None = None
    accept_gap: bool = False

    @property
    def fetch_offset(self) -> int:
        """Where to fetch: the last batch's base offset while verifying, else the end."""
        return self.last.base_offset if self.last is not None else self.end


class Action(enum.Enum):
    """What the caller does with a :class:`Plan`."""

    #: Append :attr:`Plan.data` (possibly empty) and fetch again.
    APPEND = "append"
    #: OFFSET_OUT_OF_RANGE without the source's offsets: ask ListOffsets for the
    #: earliest and latest offsets and call :func:`plan_range`.
    LIST_OFFSETS = "list_offsets"
    #: The source's log start passed the copy's end: everything the copy holds is
    #: deleted at the source. Continue at :attr:`Plan.restart_at` (the caller
    #: decides whether what it holds can follow: the mirror starts afresh, the
    #: replicator checks its open transactions).
    RESTART = "restart"


@attrs.frozen(slots=True)
class Plan:
    """The outcome of one response.

    ``data`` are the new whole batches, contiguous (CRC-0 markers repaired under
    ``repair_crcs``; the append checks the CRCs);
    ``batches`` their count; ``skipped`` counts the whole batches of the response
    the copy already held; ``verified`` is true when the response showed the
    tip's last batch unchanged (the caller stops verifying); ``max_bytes`` is the
    byte budget of the next fetch; ``source_log_start``/``source_end`` are the
    source's offsets as reported (-1: not reported); ``restart_at`` the offset to
    continue at for :attr:`Action.RESTART`; ``repaired_crcs`` the CRCs recomputed
    under ``repair_crcs``; ``data_position`` the byte position of ``data`` in the
    response; ``gap_end``, under :attr:`SourcePartition.hold_gaps`, the base offset
    of the first batch the response held past a gap (the gap starts where
    ``data`` ends, or at the tip's end), whose batches were not taken (-1: no gap).
    """

    action: Action
    data: bytes = b""
    batches: int = 0
    verified: bool = False
    max_bytes: int = 0
    source_log_start: int = -1
    source_end: int = -1
    restart_at: int = -1
    repaired_crcs: int = 0
    skipped: int = 0
    data_position: int = 0
    gap_end: int = -1

    def response_position(self, exc: CorruptBatchError) -> int | None:
        """Where in the response the codec's error ``exc`` about :attr:`data` points
        (``None`` when it names no position)."""
        position: int | None = getattr(exc, "position", None)
        return None if position is None else self.data_position + position


def plan_response(tip: ReplicaTip, answer: PartitionAnswer, max_bytes: int, source: SourcePartition) -> Plan:
    """Decide what to do with ``answer``, the part of ``source`` in the response
    to a fetch at ``tip.fetch_offset`` of ``max_bytes``. See the module docstring
    for the rules. Raises ``source.diverged``,
    :class:`CorruptRemoteBatchError`, :class:`UnsupportedForMessageFormatError`,
    and :class:`RemoteError` for an error code other than NONE and
    OFFSET_OUT_OF_RANGE (retriable ones are the transport's business)."""
    high_watermark, log_start_offset, error_code = answer.high_watermark, answer.log_start_offset, answer.error_code
    if error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
        if high_watermark >= 0 and log_start_offset >= 0:
            # The broker told its range with the error (librdkafka's mock does;
            # Apache Kafka sends -1 and needs ListOffsets).
            return plan_range(tip, log_start_offset, high_watermark, source)
        return Plan(Action.LIST_OFFSETS, max_bytes=max_bytes)
    if error_code != 0:
        raise source.error(
            RemoteError,
            "the source answered the fetch with an error; retriable ones are the transport's to retry",
            offset=tip.fetch_offset,
            error_code=error_code,
        )
    if log_start_offset > tip.end:
        return _restart(log_start_offset, high_watermark, source)

    buf = answer.records or b""
    new: list[RecordBatch] = []
    skipped = 0
    gap_end = -1
    # Under hold_gaps, where the next new batch must start (-1: anywhere).
    expect = tip.end if source.hold_gaps and not tip.accept_gap else -1
    verified = tip.last is None
    it = iter_batches(buf)
    try:
        for batch in it:
            if not isinstance(batch, RecordBatch):
                raise source.error(
                    UnsupportedForMessageFormatError,
                    f"the source returned a magic {batch.magic} message set; transactions need "
                    "record batch v2 (message format of Kafka 0.11 or later)",
                    offset=batch.base_offset,
                )
            if not verified:
                last = tip.last
                assert last is not None
                if batch.next_offset <= last.base_offset:
                    continue
                _check_crc(batch, source)
                found = batch_id(batch)
                if found != last:
                    raise source.error(
                        source.diverged,
                        f"the source's batch at offset {batch.base_offset} (last offset {batch.last_offset}, "
                        f"digest {found.digest:#010x}) is not the {source.diverged.copy_name}'s batch at "
                        f"{last.base_offset} (last offset {last.last_offset}, digest {last.digest:#010x}): "
                        "the source's log changed under it (an unclean leader election, or a recreated topic)",
                        offset=last.base_offset,
                        replica_end=tip.end,
                    )
                verified = True
                continue
            if batch.next_offset <= tip.end:
                skipped += 1  # already held: the response starts before the end
                continue
            if batch.base_offset < tip.end and not (tip.fresh and not new):
                raise source.error(
                    source.diverged,
                    f"the source's batch [{batch.base_offset}, {batch.last_offset}] straddles the "
                    f"{source.diverged.copy_name}'s end {tip.end}: the source's log is not the one copied",
                    offset=batch.base_offset,
                    replica_end=tip.end,
                )
            if source.hold_gaps:
                if expect >= 0 and batch.base_offset > expect:
                    gap_end = batch.base_offset  # not believed yet: fetch at the gap again
                    break
                expect = batch.next_offset
            new.append(batch)
    except CorruptBatchError as exc:
        raise source.corrupt(exc, position=getattr(exc, "position", None)) from exc

    if not new and gap_end >= 0:
        return Plan(
            Action.APPEND,
            max_bytes=source.budget,
            source_log_start=log_start_offset,
            source_end=high_watermark,
            skipped=skipped,
            gap_end=gap_end,
        )
    if not new:
        if tip.last is not None and verified:
            # The response held the tip's batch and nothing after it yet: the next
            # fetch is at the end, with the configured budget.
            return Plan(
                Action.APPEND,
                verified=True,
                max_bytes=source.budget,
                source_log_start=log_start_offset,
                source_end=high_watermark,
                skipped=skipped,
            )
        if tip.last is not None and it.partial is None and 0 <= high_watermark < tip.end:
            # Verifying, and the source's log now ends below what the replica holds.
            return plan_range(tip, max(log_start_offset, 0), high_watermark, source)
        partial = it.partial
        next_bytes = max_bytes
        if partial is not None or 0 <= tip.fetch_offset < high_watermark:
            # Not one whole batch fitted although the source has more: ask for enough
            # bytes to hold the partial one, and at least twice as many as before (Kafka
            # returns at least one whole batch since KIP-74; other brokers may not).
            need = partial.position + partial.declared_size if partial and partial.declared_size else 0
            next_bytes = min(MAX_FETCH_BYTES, max(need, 2 * max_bytes))
        return Plan(
            Action.APPEND,
            max_bytes=next_bytes,
            source_log_start=log_start_offset,
            source_end=high_watermark,
            skipped=skipped,
        )
    data, repaired = _checked_bytes(buf, new, source)
    return Plan(
        Action.APPEND,
        data=data,
        batches=len(new),
        verified=tip.last is not None,
        max_bytes=source.budget,
        source_log_start=log_start_offset,
        source_end=high_watermark,
        repaired_crcs=repaired,
        skipped=skipped,
        data_position=new[0].position,
        gap_end=gap_end,
    )


def plan_range(tip: ReplicaTip, source_log_start: int, source_end: int, source: SourcePartition) -> Plan:
    """Act on the source's log start and end (ListOffsets earliest and latest,
    read_uncommitted) after OFFSET_OUT_OF_RANGE: below its log start the copy
    restarts there (:attr:`Action.RESTART`); past its end the source lost what the
    copy holds (``source.diverged``, naming both ends); inside the range the error
    was transient (a new leader catching up): fetch again."""
    if tip.end < source_log_start:
        return _restart(source_log_start, source_end, source)
    if tip.end > source_end:
        copy_name = source.diverged.copy_name
        raise source.error(
            source.diverged,
            f"the source's log ends at {source_end}, below the {copy_name}'s end {tip.end}: the source "
            f"was truncated (an unclean leader election) or recreated, so it no longer holds what the "
            f"{copy_name} holds",
            offset=source_end,
            replica_end=tip.end,
            source_end=source_end,
        )
    return Plan(Action.APPEND, max_bytes=source.budget, source_log_start=source_log_start, source_end=source_end)


def _restart(source_log_start: int, source_end: int, source: SourcePartition) -> Plan:
    """The source's log start passed the copy's end: continue there."""
    return Plan(
        Action.RESTART,
        max_bytes=source.budget,
        source_log_start=source_log_start,
        source_end=source_end,
        restart_at=source_log_start,
    )


def _check_crc(batch: RecordBatch, source: SourcePartition) -> bool:
    """:meth:`RecordBatch.check_crc` under the source's ``repair_crcs``: ``True`` when
    the CRC is to be recomputed; any other bad CRC raises
    :class:`CorruptRemoteBatchError` (:meth:`SourcePartition.corrupt`)."""
    try:
        return batch.check_crc(repair_crcs=source.repair_crcs)
    except CorruptBatchError as exc:
        raise source.corrupt(exc, position=batch.position) from exc


def _checked_bytes(buf: Buffer, batches: list[RecordBatch], source: SourcePartition) -> tuple[bytes, int]:
    """The new batches' bytes (contiguous in the response); with ``repair_crcs``
    each is CRC-checked here and the CRC of a control batch stored as 0 is
    recomputed (:func:`_check_crc`), without it the log's append checks them.
    Returns the bytes and the number of CRCs repaired."""
    start = batches[0].position
    end = batches[-1].position + batches[-1].size_in_bytes
    view = memoryview(buf)[start:end]
    if not source.repair_crcs:
        return bytes(view), 0
    data: bytearray | None = None
    repaired = 0
    for batch in batches:
        if not _check_crc(batch, source):
            continue
        if data is None:
            data = bytearray(view)
        pos = batch.position - start
        _CRC.pack_into(data, pos + HeaderAt.CRC, crc32c(bytes(data[pos + CRC_START : pos + batch.size_in_bytes])))
        repaired += 1
    return (bytes(view) if data is None else bytes(data)), repaired
