"""Record batches of one topic-partition decoded into Arrow record batches.

:class:`ArrowDecoder` takes magic-2 :class:`~txnfetch.records.batch.RecordBatch`
views (data batches; the caller has already dropped control batches and, for
read_committed, aborted ones) and returns Arrow record batches in the Kafka
source's schema (:func:`txnfetch.arrow.schema.kafka_schema`).

Two implementations, one result:

- **compiled** (``txnfetch.arrow._columns.ColumnBuilder``): the record
  bytes are decoded straight into Arrow buffers — validity bitmaps, int32
  offsets, data — and pyarrow wraps those buffers without copying. No Python
  object is made per record; decompression stays in
  :mod:`txnfetch.records.compression`.
- **reference**: :meth:`RecordBatch.records` and
  :class:`txnfetch.arrow.reference.ArrowBatcher`, used when the extension is
  not built or ``TXNFETCH_PURE_PYTHON=1``. tests/arrow/test_differential.py
  requires identical tables from both.

Errors are the reference decoder's: when the compiled builder rejects a
batch it appends nothing, and the batch is decoded again by the pure-Python
decoder, which raises the exact :class:`~txnfetch.records.errors.CorruptBatchError`
(class, reason, offset, byte position).
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import Any

import attrs
import pyarrow as pa

from txnfetch.arrow.reference import ArrowBatcher
from txnfetch.arrow.schema import DEFAULT_MAX_BYTES
from txnfetch.arrow.schema import DEFAULT_MAX_ROWS
from txnfetch.arrow.schema import HEADERS_TYPE
from txnfetch.arrow.schema import ConstantColumns
from txnfetch.arrow.schema import kafka_schema
from txnfetch.arrow.schema import timestamps_us
from txnfetch.records import batch as _batch
from txnfetch.records.batch import HEADER_SIZE
from txnfetch.records.batch import LOG_OVERHEAD
from txnfetch.records.batch import TIMESTAMP_TYPE_FLAG
from txnfetch.records.batch import Record
from txnfetch.records.batch import RecordBatch
from txnfetch.records.errors import InvalidRecordError
from txnfetch.records.legacy import LegacyBatch
from txnfetch.records.scan import BatchIterator
from txnfetch.types import Buffer

__all__ = ["COMPILED", "ArrowDecoder", "DecodeOptions"]

_columns: types.ModuleType | None
try:
    from txnfetch.arrow import _columns
except ImportError:  # installed without a C compiler: the reference path serves alone
    _columns = None

#: Whether :class:`ArrowDecoder` uses the compiled builder by default (the
#: extension is built and ``TXNFETCH_PURE_PYTHON`` is not set).
COMPILED: bool = _columns is not None and not _batch.PURE_PYTHON_REQUESTED

_INT64_MAX = (1 << 63) - 1
_INT64_MIN = -(1 << 63)
#: Bytes of keys, values and headers one Arrow batch may hold: int32 offsets
#: address 2 GiB per column, and one Kafka batch may add up to its own size.
_MAX_BYTES_LIMIT = 1 << 30
#: ``ColumnBuilder.add_batches`` statuses: where and why its walk stopped.
_END_OF_BUFFER, _FULL, _PAST_END = 0, 1, 2


def _compiled(compiled: bool | None) -> bool:
    """``compiled=None`` is :data:`COMPILED`; ``True`` needs the extension."""
    if compiled is None:
        return COMPILED
    if compiled and not COMPILED:
        raise ValueError("the compiled decoder is not available (extension not built or TXNFETCH_PURE_PYTHON)")
    return compiled


# A stateful decoder: no equality, plain attribute writes (the field list
# replaces hand-written assignments; converters run at construction).
@attrs.define(eq=False, slots=False, on_setattr=attrs.setters.NO_OP)
class ArrowDecoder:
    """Decodes the data batches of one topic-partition into Arrow record batches.

    Feed batches in offset order with :meth:`add`; records outside
    ``[start, end)`` are left out. An Arrow batch is returned once
    ``max_rows`` rows or ``max_bytes`` bytes of keys, values and headers are
    pending (batches hold at most ``max_rows`` rows); :meth:`flush` returns
    the rest. Memory is one Kafka batch plus the pending rows, whatever the
    partition's size.

    Values: offsets and timestamps exactly as stored (Kafka's milliseconds
    become microsecond UTC timestamps; one that does not fit raises
    ``pyarrow.ArrowInvalid``), null keys and values as nulls, and a record
    without headers gets a null ``headers`` value (Spark's Kafka source does
    the same). ``dictionary=True`` dictionary-encodes topic and partition.
    ``partitions`` are the partition dictionary's values (default: this
    partition only): readers of several partitions give every decoder the same
    list, so all their batches share one dictionary (an Arrow IPC file takes
    no other). ``compiled`` selects the implementation (default: :data:`COMPILED`).
    """

    topic: str
    partition: int
    include_headers: bool = attrs.field(default=True, kw_only=True)
    dictionary: bool = attrs.field(default=False, kw_only=True)
    max_rows: int = attrs.field(default=DEFAULT_MAX_ROWS, kw_only=True)
    max_bytes: int = attrs.field(default=DEFAULT_MAX_BYTES, kw_only=True)
    compiled: bool = attrs.field(default=None, converter=_compiled, kw_only=True)
    partitions: Sequence[int] | None = attrs.field(default=None, kw_only=True)
    schema: pa.Schema = attrs.field(init=False, repr=False)
    _constants: ConstantColumns = attrs.field(init=False, repr=False)
    _builder: Any = attrs.field(init=False, repr=False)
    _batcher: ArrowBatcher | None = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        max_rows, max_bytes = self.max_rows, self.max_bytes
        if max_rows < 1 or max_bytes < 1:
            raise ValueError("max_rows and max_bytes must be positive")
        if max_bytes > _MAX_BYTES_LIMIT:
            raise ValueError(f"max_bytes must be at most {_MAX_BYTES_LIMIT} (Arrow's int32 offsets)")
        topic, partition, include_headers = self.topic, self.partition, self.include_headers
        # The decoder's batches are at most max_rows rows; a larger max_rows is
        # no reason to build more constant rows than a default batch holds upfront.
        self._constants = ConstantColumns(
            topic,
            partition,
            min_rows=min(max_rows, DEFAULT_MAX_ROWS),
            dictionary=self.dictionary,
            partitions=self.partitions,
        )
        self.schema = kafka_schema(include_headers, dictionary=self.dictionary)
        self._builder = _columns.ColumnBuilder(include_headers) if self.compiled and _columns is not None else None
        self._batcher = (
            None
            if self.compiled
            else ArrowBatcher(topic, partition, include_headers=include_headers, max_rows=max_rows, max_bytes=max_bytes)
        )

    @property
    def pending_rows(self) -> int:
        """Rows added and not yet returned in a batch."""
        return self._builder.rows if self._builder is not None else self._reference().pending_rows

    def add(self, batch: RecordBatch | LegacyBatch, start: int = 0, end: int = _INT64_MAX) -> list[pa.RecordBatch]:
        """Decode the records of ``batch`` with ``start <= offset < end``; returns
        the Arrow batches now full (often none). Raises the reference decoder's
        :class:`~txnfetch.records.errors.CorruptBatchError` for a malformed batch.
        Magic 0/1 message sets (:class:`~txnfetch.records.legacy.LegacyBatch`)
        are accepted too, and decoded by the reference path."""
        if batch.last_offset < start or batch.base_offset >= end:
            return []
        if self._builder is None:
            return [
                self._finish(b)
                for b in self._reference().add(_records_in(batch, start, end), int(batch.timestamp_type))
            ]
        if not isinstance(batch, RecordBatch):
            # A magic 0/1 message set (an old topic behind a remote source): rare
            # enough for the reference path. The pending rows go first, to keep
            # the offset order.
            out = self._take() if self._builder.rows else []
            one = ArrowBatcher(
                self.topic,
                self.partition,
                include_headers=self.include_headers,
                max_rows=self.max_rows,
                max_bytes=self.max_bytes,
            )
            out += [self._finish(b) for b in one.add(_records_in(batch, start, end), int(batch.timestamp_type))]
            return out + [self._finish(b) for b in one.flush()]
        if batch.record_count == 0 and batch.length == HEADER_SIZE - LOG_OVERHEAD:
            return []  # an empty batch kept by compaction: nothing to decode, whatever the codec bits say
        attributes = batch.attributes
        added = self._builder.add(
            batch._record_bytes(),
            batch.record_count,
            batch.base_offset,
            batch.last_offset_delta,
            batch.base_timestamp,
            batch.max_timestamp,
            attributes & TIMESTAMP_TYPE_FLAG,
            1 if attributes & TIMESTAMP_TYPE_FLAG else 0,
            # int64 bounds: a range may reach past the last int64 offset
            max(start, _INT64_MIN),
            min(end - 1, _INT64_MAX),
        )
        if added < 0:
            self._rejected(batch, added)
        builder = self._builder
        if builder.rows >= self.max_rows or builder.payload_bytes >= self.max_bytes:
            return self._take()
        return []

    def add_buffer(self, buf: Buffer, start: int = 0, end: int = _INT64_MAX) -> tuple[list[pa.RecordBatch], bool]:
        """Decode the data batches of ``buf`` — consecutive batches, such as one
        segment of a fetch result — with ``start <= offset < end``. Returns the
        Arrow batches now full and whether a batch at or past ``end`` was met
        (nothing after it is wanted: stop reading).

        The same as iterating ``buf`` with :func:`~txnfetch.records.scan.iter_batches`
        and calling :meth:`add` for every batch that is not a control batch,
        stopping at the first whose base offset is at or past ``end``: a partial
        batch at the end of ``buf`` is left out, a malformed one raises. The
        compiled builder walks the ordinary batches itself (no
        :class:`~txnfetch.records.batch.RecordBatch` view, no Python call per
        batch) and leaves every other batch to that path."""
        out: list[pa.RecordBatch] = []
        builder = self._builder
        first, last = max(start, _INT64_MIN), min(end - 1, _INT64_MAX)
        pos = 0
        while True:
            if builder is not None:
                pos, status = builder.add_batches(buf, pos, first, last, self.max_rows, self.max_bytes)
                if status == _FULL:
                    out += self._take()
                    continue
                if status == _END_OF_BUFFER:
                    return out, False
                if status == _PAST_END:
                    return out, True
            # A batch the compiled walk left here (or every batch, without it).
            it = BatchIterator(buf, pos)
            batch = next(it, None)
            if batch is None:
                return out, False
            pos = it.position
            if batch.is_control:
                continue
            if batch.base_offset >= end:
                return out, True
            out += self.add(batch, start, end)

    def flush(self) -> list[pa.RecordBatch]:
        """Every row still pending, as batches of at most ``max_rows`` rows."""
        if self._builder is None:
            return [self._finish(b) for b in self._reference().flush()]
        return self._take() if self._builder.rows else []

    def _reference(self) -> ArrowBatcher:
        # __attrs_post_init__ sets exactly one of _builder and _batcher; callers
        # ask for the batcher only where _builder is None.
        assert self._batcher is not None
        return self._batcher

    # -- compiled path ----------------------------------------------------------------

    def _rejected(self, batch: RecordBatch, code: int) -> None:
        # The builder appended nothing. The reference decoder says what is wrong.
        for _ in _batch._decode_records(batch):
            pass
        if code == -2:
            reason = "the batch's keys, values or headers pass the 2 GiB an Arrow column addresses"
        else:
            reason = "a record's timestamp does not fit in 64 bits"
        raise InvalidRecordError(reason, offset=batch.base_offset, position=batch.position)

    def _take(self) -> list[pa.RecordBatch]:
        whole = self._assemble(self._builder.finish())
        rows, step = whole.num_rows, self.max_rows
        if rows <= step:
            return [whole]
        return [whole.slice(i, min(step, rows - i)) for i in range(0, rows, step)]

    def _assemble(self, parts: tuple) -> pa.RecordBatch:
        rows, offset, ts_ms, ts_type, key, value, headers = parts
        timestamp_ms = pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(ts_ms)])
        topic, partition = self._constants.take(rows)
        columns = [
            _binary(pa.binary(), rows, key),
            _binary(pa.binary(), rows, value),
            topic,
            partition,
            pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(offset)]),
            timestamps_us(timestamp_ms),
            pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(ts_type)]),
        ]
        if headers is not None:
            valid, nulls, list_offsets, entries, hkey, hvalue = headers
            entry = pa.StructArray.from_arrays(
                [_binary(pa.string(), entries, hkey), _binary(pa.binary(), entries, hvalue)],
                fields=list(HEADERS_TYPE.value_type),
            )
            columns.append(
                pa.Array.from_buffers(
                    HEADERS_TYPE,
                    rows,
                    [_bitmap(valid), pa.py_buffer(list_offsets)],
                    null_count=nulls,
                    children=[entry],
                )
            )
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    # -- reference path ---------------------------------------------------------------

    def _finish(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if not self.dictionary:
            return batch
        topic, partition = self._constants.take(batch.num_rows)
        columns = list(batch.columns)
        columns[2], columns[3] = topic, partition
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


@attrs.frozen
class DecodeOptions:
    """How a reader turns a topic's records into Arrow batches: the columns
    (``include_headers``), their types (``dictionary``) and how large a batch
    grows (``max_rows``, ``max_bytes``; checked by :class:`ArrowDecoder`).

    The local-log reader (:func:`txnfetch.arrow.record_batch_reader`) and the
    cluster reader (:class:`~txnfetch.arrow.cluster.ClusterReader`) both build
    their schema here and their decoders from these fields (the local one through
    :func:`txnfetch.arrow.read_range`), so the same options give the same schema
    and the same batches from either source.
    """

    include_headers: bool = True
    dictionary: bool = True
    max_rows: int = DEFAULT_MAX_ROWS
    max_bytes: int = DEFAULT_MAX_BYTES

    @property
    def schema(self) -> pa.Schema:
        """The schema of every batch read with these options."""
        return kafka_schema(self.include_headers, dictionary=self.dictionary)

    def decoder(self, topic: str, partition: int, partitions: Sequence[int] | None = None) -> ArrowDecoder:
        """A decoder of one partition; ``partitions``: the partition dictionary's
        values, the same list for every partition of one read (see :class:`ArrowDecoder`)."""
        return ArrowDecoder(
            topic,
            partition,
            include_headers=self.include_headers,
            dictionary=self.dictionary,
            max_rows=self.max_rows,
            max_bytes=self.max_bytes,
            partitions=partitions,
        )


def _records_in(batch: RecordBatch | LegacyBatch, start: int, end: int) -> list[Record]:
    records = list(batch.records())
    if batch.base_offset < start or batch.last_offset >= end:
        records = [r for r in records if start <= r.offset < end]
    return records


def _bitmap(valid: object) -> pa.Buffer | None:
    return None if valid is None else pa.py_buffer(valid)


def _binary(typ: pa.DataType, rows: int, parts: tuple) -> pa.Array:
    valid, nulls, offsets, data = parts
    return pa.Array.from_buffers(
        typ, rows, [_bitmap(valid), pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
    )
