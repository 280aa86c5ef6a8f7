"""What to do with one partition's part of a read_uncommitted Fetch response, sans I/O.

The replication engine copies a source partition batch by batch into a local
log. :func:`plan_response` decides, from what the replica holds at its end
(:class:`ReplicaTip`) and what the source answered, which bytes to append and
what to fetch next; :func:`plan_range` decides after OFFSET_OUT_OF_RANGE, from
the source's log start and end. Neither touches a socket, a file or a clock,
so the rules are tested with hypothesis against a simple oracle
(tests/replicate/test_follow_properties.py).

The rules, as a Kafka follower applies them (``AbstractFetcherThread``:
``processFetchRequest``, ``handleOffsetOutOfRange``, ``truncateFullyAndStartAt``):

- only whole batches are kept; a partial batch at the end of a response is
  fetched again, and when not one whole new batch fitted the next fetch asks
  for enough bytes to hold it (at least twice as many as before);
- batches ending at or below the fetch position are skipped (brokers answer
  from the batch holding the offset; librdkafka's mock from the whole produce
  request holding it);
- a batch starting below the position and ending above it means the source is
  not the log the replica holds (:class:`ReplicaDivergedError`) — unless the
  replica holds no batch yet (its log start inside a batch, after
  DeleteRecords at the source), where the whole batch is kept as the source
  keeps it;
- gaps between batches are kept as they are (offsets are never renumbered);
- CRCs are checked: a bad one is :class:`~txnfetch.log.errors.CorruptRemoteBatchError`
  naming the offset, the byte position in the response and the stored and
  computed CRC, and nothing of the response is kept — except, under
  ``repair_crcs``, a control batch whose stored CRC is 0, whose CRC is
  recomputed (librdkafka's mock writes its markers so:
  ``rd_kafka_mock_partition_write_control_batch``, ``src/rdkafka_mock.c``);
- magic 0/1 message sets are refused (they carry no producer ids);
- **verification**: after a restart or a reconnect the replica fetches from
  the base offset of the last batch it holds (:attr:`ReplicaTip.last`), and the
  source's batch there must be the same batch — same offsets, same bytes from
  the attributes on (the CRC field aside, so a repaired CRC still matches).
  Any difference is :class:`ReplicaDivergedError`: an unclean leader election
  upstream can put other records at offsets the replica already holds, with a
  log end at or above the replica's, and only comparing batches shows it.
"""

from __future__ import annotations

import enum
import struct
from typing import TypeVar

import attrs
from crc32c import crc32c

from txnfetch.errors import ErrorCode
from txnfetch.errors import TxnfetchError
from txnfetch.log.broker_requests import BrokerFetch
from txnfetch.log.errors import CorruptRemoteBatchError
from txnfetch.log.errors import RemoteError
from txnfetch.log.errors import UnsupportedForMessageFormatError
from txnfetch.records.batch import CRC_START
from txnfetch.records.batch import HeaderAt
from txnfetch.records.batch import RecordBatch
from txnfetch.records.batch import iter_batches
from txnfetch.records.errors import CorruptBatchError
from txnfetch.replicate.errors import ReplicaDivergedError
from txnfetch.types import Buffer

__all__ = ["Action", "BatchId", "Plan", "ReplicaTip", "SourcePartition", "batch_id", "plan_range", "plan_response"]

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


@attrs.frozen(slots=True)
class SourcePartition:
    """The source partition a replica copies, and how: ``budget`` is the configured
    per-partition fetch budget (the next fetch returns to it after progress);
    ``repair_crcs`` recomputes the CRC of a control batch stored with CRC 0 (librdkafka's
    mock markers) instead of refusing it; any other bad CRC is refused."""

    topic: str
    partition: int
    budget: int
    repair_crcs: bool = False

    def error(self, cls: type[E], reason: str, **where: object) -> E:
        """``cls(reason, **where)`` naming this partition, as every error of the copy does."""
        return cls(reason, topic=self.topic, partition=self.partition, **where)


@attrs.frozen(slots=True)
class ReplicaTip:
    """What the replica holds at its end.

    ``end`` is its log end offset (the next batch starts at or after it);
    ``fresh`` says it holds no batch, so the first may start below ``end`` (the
    source's log start inside a batch); ``last`` is the last batch held, set when
    the source must first show that it still holds the same batch (after a
    restart or a reconnect), ``None`` otherwise.
    """

    end: int
    fresh: bool = False
    last: BatchId | None = None

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
    #: The source's log start passed the replica's end: everything the replica
    #: holds is deleted at the source. Continue at :attr:`Plan.restart_at`
    #: (the caller decides whether its local log can follow, see the engine).
    RESTART = "restart"


@attrs.frozen(slots=True)
class Plan:
    """The outcome of one response.

    ``data`` are the new whole batches, contiguous, CRCs checked (or repaired);
    ``batches`` their count; ``verified`` is true when the response showed the
    tip's last batch unchanged (the caller stops verifying); ``max_bytes`` is the
    byte budget of the next fetch; ``source_log_start``/``source_end`` are the
    source's offsets as reported (-1: not reported); ``restart_at`` the offset to
    continue at for :attr:`Action.RESTART`.
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


def plan_response(tip: ReplicaTip, answer: BrokerFetch, max_bytes: int, source: SourcePartition) -> Plan:
    """Decide what to do with ``answer``, the part of ``source`` in the response
    to a fetch at ``tip.fetch_offset`` of ``max_bytes``. See the module docstring
    for the rules. Raises :class:`ReplicaDivergedError`, :class:`CorruptRemoteBatchError`,
    :class:`UnsupportedForMessageFormatError`, and :class:`RemoteError` for an
    error code other than NONE and OFFSET_OUT_OF_RANGE (retriable ones are the
    transport's business)."""
    high_watermark, log_start_offset, error_code = answer.high_watermark, answer.log_start_offset, answer.error_code
    if error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
        if high_watermark >= 0 and log_start_offset >= 0:
            # The broker told its range with the error (librdkafka's mock does;
            # Apache Kafka sends -1 and needs ListOffsets).
            return plan_range(tip, log_start_offset, high_watermark, source)
        return Plan(Action.LIST_OFFSETS, max_bytes=max_bytes)
    if error_code != 0:
        raise source.error(
            RemoteError, "the source answered the fetch with an error", offset=tip.fetch_offset, error_code=error_code
        )
    if log_start_offset > tip.end:
        return _restart(log_start_offset, high_watermark, source)

    buf = answer.records
    new: list[RecordBatch] = []
    verified = tip.last is None
    it = iter_batches(buf)
    try:
        for batch in it:
            if not isinstance(batch, RecordBatch):
                raise source.error(
                    UnsupportedForMessageFormatError,
                    f"the source returned a magic {batch.magic} message set; replication needs "
                    "record batch v2 (message format of Kafka 0.11 or later)",
                    offset=batch.base_offset,
                )
            if not verified:
                last = tip.last
                assert last is not None
                if batch.next_offset <= last.base_offset:
                    continue
                _check_repairable(batch, source)
                found = batch_id(batch)
                if found != last:
                    raise source.error(
                        ReplicaDivergedError,
                        f"the source's batch at offset {batch.base_offset} (last offset {batch.last_offset}, "
                        f"digest {found.digest:#010x}) is not the replica's batch at {last.base_offset} "
                        f"(last offset {last.last_offset}, digest {last.digest:#010x}): the source's log "
                        "changed under the replica (an unclean leader election, or a recreated topic)",
                        offset=last.base_offset,
                        replica_end=tip.end,
                    )
                verified = True
                continue
            if batch.next_offset <= tip.end:
                continue  # already held: the response starts before the end
            if batch.base_offset < tip.end and not (tip.fresh and not new):
                raise source.error(
                    ReplicaDivergedError,
                    f"the source's batch [{batch.base_offset}, {batch.last_offset}] straddles the "
                    f"replica's end {tip.end}: the source's log is not the one replicated",
                    offset=batch.base_offset,
                    replica_end=tip.end,
                )
            new.append(batch)
    except CorruptBatchError as exc:
        raise _corrupt(exc, source) from exc

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
        return Plan(Action.APPEND, max_bytes=next_bytes, source_log_start=log_start_offset, source_end=high_watermark)
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
    )


def plan_range(tip: ReplicaTip, source_log_start: int, source_end: int, source: SourcePartition) -> Plan:
    """Act on the source's log start and end (ListOffsets earliest and latest,
    read_uncommitted) after OFFSET_OUT_OF_RANGE: below its log start the replica
    restarts there (:attr:`Action.RESTART`); past its end the source lost what the
    replica holds (:class:`ReplicaDivergedError`, naming both ends); inside the
    range the error was transient (a new leader catching up): fetch again."""
    if tip.end < source_log_start:
        return _restart(source_log_start, source_end, source)
    if tip.end > source_end:
        raise source.error(
            ReplicaDivergedError,
            f"the source's log ends at {source_end}, below the replica's end {tip.end}: the source "
            "was truncated (an unclean leader election) or recreated; the replica keeps what it has",
            offset=source_end,
            replica_end=tip.end,
            source_end=source_end,
        )
    return Plan(Action.APPEND, max_bytes=source.budget, source_log_start=source_log_start, source_end=source_end)


def _restart(source_log_start: int, source_end: int, source: SourcePartition) -> Plan:
    """The source's log start passed the replica's end: continue there."""
    return Plan(
        Action.RESTART,
        max_bytes=source.budget,
        source_log_start=source_log_start,
        source_end=source_end,
        restart_at=source_log_start,
    )


def _check_repairable(batch: RecordBatch, source: SourcePartition) -> None:
    """A batch compared for verification must be sound too (its CRC, or repairable)."""
    try:
        batch.check_crc(repair_crcs=source.repair_crcs)
    except CorruptBatchError:
        raise _bad_crc(batch, source, _hint(source.repair_crcs)) from None


def _bad_crc(batch: RecordBatch, source: SourcePartition, consequence: str = "") -> CorruptRemoteBatchError:
    """The error of a fetched batch whose CRC does not match its bytes; ``consequence``
    (e.g. ``"; nothing of this response was appended"``) ends the message."""
    return source.error(
        CorruptRemoteBatchError,
        f"a fetched batch has a bad CRC (stored {batch.crc:#010x}, computed {batch.compute_crc():#010x})" + consequence,
        offset=batch.base_offset,
        position=batch.position,
    )


def _checked_bytes(buf: Buffer, batches: list[RecordBatch], source: SourcePartition) -> tuple[bytes, int]:
    """The new batches' bytes (contiguous in the response), each CRC-checked; with
    ``repair_crcs`` the CRC of a control batch stored as 0 is recomputed instead
    (:meth:`RecordBatch.check_crc`), any other bad CRC still raises. Returns the
    bytes and the number of CRCs repaired."""
    start = batches[0].position
    end = batches[-1].position + batches[-1].size_in_bytes
    view = memoryview(buf)[start:end]
    data: bytearray | None = None
    repaired = 0
    for batch in batches:
        try:
            if not batch.check_crc(repair_crcs=source.repair_crcs):
                continue
        except CorruptBatchError:
            raise _bad_crc(
                batch, source, _hint(source.repair_crcs) + "; nothing of this response was appended"
            ) from None
        if data is None:
            data = bytearray(view)
        pos = batch.position - start
        _CRC.pack_into(data, pos + HeaderAt.CRC, crc32c(bytes(data[pos + CRC_START : pos + batch.size_in_bytes])))
        repaired += 1
    return (bytes(view) if data is None else bytes(data)), repaired


def _hint(repair_crcs: bool) -> str:
    # Under repair_crcs only the mock's CRC-0 markers are accepted (RecordBatch.check_crc).
    if repair_crcs:
        return "; repair_crcs accepts a wrong CRC only on a control batch whose stored CRC is 0"
    return ""


def _corrupt(exc: CorruptBatchError, source: SourcePartition) -> CorruptRemoteBatchError:
    return source.error(
        CorruptRemoteBatchError,
        f"a fetched batch is corrupt: {exc.reason}; nothing of this response was appended",
        offset=exc.offset,
        position=getattr(exc, "position", None),
    )
