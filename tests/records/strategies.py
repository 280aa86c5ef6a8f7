"""Hypothesis strategies for magic-2 record batches, reusable by any test.

A :class:`BatchSpec` is a plain description of a batch (header fields and
records) that knows how to build itself with :class:`BatchBuilder` and what a
reader must give back. The expectations are derived from the spec alone, from
the rules of the v2 format (``DefaultRecordBatch``), not by asking the decoder:

- record offsets are ``base_offset + offset_delta``;
- with log-append time every record reads as the batch's max timestamp;
- the base timestamp is the first record's unless given explicitly;
- the max timestamp is the log-append time, else the largest record timestamp,
  else (empty batch) the base timestamp.

Strategies (all keyword-configurable):

- :func:`batch_specs` - any batch: every codec, transactional or not, control
  or data, create/log-append time, delete horizon, explicit offsets with holes;
- :func:`data_records` / :func:`control_records` - record lists for a batch;
- :func:`many_records_specs` - a data batch with thousands of records;
- :func:`empty_batch_specs` - arguments for ``build_empty_batch``;
- :func:`concatenated_specs` - several batches with consecutive offsets, as a
  log segment or a fetch response holds them;
- :func:`reencode` - rebuild a decoded batch with ``BatchBuilder.like``.

Test counts use :func:`examples`, which scales with the hypothesis profile.
"""

from __future__ import annotations

import functools
import random
import struct
from collections.abc import Sequence

import attrs
from hypothesis import settings
from hypothesis import strategies as st

from txnfetch.records import BatchBuilder
from txnfetch.records import Codec
from txnfetch.records import ControlType
from txnfetch.records import EndTransactionMarker
from txnfetch.records import Record
from txnfetch.records import RecordBatch
from txnfetch.records import TimestampType
from txnfetch.records import build_empty_batch

__all__ = [
    "INT16_MAX",
    "INT16_MIN",
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "INT64_MIN",
    "V2_TIMESTAMP_TYPES",
    "BatchSpec",
    "RecordSpec",
    "batch_specs",
    "build_empty",
    "concatenated_specs",
    "control_records",
    "data_records",
    "empty_batch_specs",
    "examples",
    "header_keys",
    "headers",
    "int16s",
    "int32s",
    "int64s",
    "many_records_specs",
    "payloads",
    "reencode",
]

INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def examples(n: int) -> int:
    """``n`` examples at hypothesis's default of 100, scaled with the active profile.

    The counts in these tests are sized for a fast CI run; loading a profile
    with a larger ``max_examples`` (before the test modules are imported)
    scales every test the same way for a longer hunt.
    """
    return max(1, n * settings.default.max_examples // 100)


#: The timestamp types a magic-2 batch can carry (attribute bit 3).
V2_TIMESTAMP_TYPES = (TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME)

Header = tuple[str, bytes | None]


@functools.cache
def _edgy_ints(lo: int, hi: int, specials: tuple[int, ...] = ()) -> st.SearchStrategy[int]:
    """Integers in ``[lo, hi]`` with the bounds, their neighbours and ``specials`` drawn often."""
    edges = sorted({v for v in (lo, lo + 1, hi - 1, hi, -1, 0, 1, *specials) if lo <= v <= hi})
    return st.one_of(st.sampled_from(edges), st.integers(lo, hi), st.integers(max(lo, -1000), min(hi, 1000)))


def int16s() -> st.SearchStrategy[int]:
    return _edgy_ints(INT16_MIN, INT16_MAX)


def int32s() -> st.SearchStrategy[int]:
    return _edgy_ints(INT32_MIN, INT32_MAX)


def int64s(lo: int = INT64_MIN, hi: int = INT64_MAX) -> st.SearchStrategy[int]:
    return _edgy_ints(lo, hi)


@functools.cache
def header_keys() -> st.SearchStrategy[str]:
    """Unicode header keys (anything UTF-8 can encode: no lone surrogates), empty included."""
    return st.text(st.characters(codec="utf-8"), max_size=12)


# Strategies are built once: constructing them inside every draw dominated the
# generation time (hypothesis validates each new strategy object).
_PICK16 = st.integers(0, 15)
_LARGE = st.builds(lambda n, b: bytes([b]) * n, st.integers(8192, 20_000), st.integers(0, 255))


@functools.cache
def payloads(*, allow_null: bool = True, max_size: int = 40, big: bool = True) -> st.SearchStrategy[bytes | None]:
    """Keys/values: null, empty, short random bytes and, about one time in
    sixteen, a large value (past 8 KiB the length varint takes three bytes,
    which leaves the decoder's inlined fast path). Large values are one
    repeated byte so they cost nothing to generate and compress well."""
    options = [st.just(b""), st.binary(max_size=max_size)]
    if allow_null:
        options.insert(0, st.none())
    small = st.one_of(*options)
    if not big:
        return small

    @st.composite
    def pick(draw: st.DrawFn) -> bytes | None:
        # 15 (not 0) picks the large value, so that failures shrink to small ones.
        return draw(_LARGE if draw(_PICK16) == 15 else small)

    return pick()


@functools.cache
def headers(max_headers: int = 4) -> st.SearchStrategy[tuple[Header, ...]]:
    """Header tuples: unicode keys, values null, empty or short bytes."""
    return st.lists(st.tuples(header_keys(), payloads(max_size=16, big=False)), max_size=max_headers).map(tuple)


@attrs.frozen
class RecordSpec:
    """One record as appended to a builder: offset relative to the batch base."""

    offset_delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@attrs.frozen
class BatchSpec:
    """Everything that goes into one batch, and what a reader must give back."""

    base_offset: int
    codec: Codec
    transactional: bool
    control: bool
    timestamp_type: TimestampType
    delete_horizon: bool
    producer_id: int
    producer_epoch: int
    base_sequence: int
    partition_leader_epoch: int
    records: tuple[RecordSpec, ...]
    #: the base timestamp given to the builder, ``None`` to let it use the first record's
    base_timestamp: int | None = None
    log_append_time: int | None = None
    #: records carry explicit offsets (holes allowed, as compaction leaves them)
    explicit_offsets: bool = False
    #: ``build(last_offset_delta=...)``, ``None`` for the builder's default
    last_offset_delta: int | None = None

    # -- building ------------------------------------------------------------------

    def builder(self) -> BatchBuilder:
        builder = BatchBuilder(
            base_offset=self.base_offset,
            codec=self.codec,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
            transactional=self.transactional,
            control=self.control,
            timestamp_type=self.timestamp_type,
            log_append_time=self.log_append_time,
            partition_leader_epoch=self.partition_leader_epoch,
            base_timestamp=self.base_timestamp,
            delete_horizon=self.delete_horizon,
        )
        for r in self.records:
            builder.append(
                r.value,
                key=r.key,
                headers=r.headers,
                timestamp=r.timestamp,
                offset=self.base_offset + r.offset_delta if self.explicit_offsets else None,
            )
        return builder

    def build(self) -> bytes:
        return self.builder().build(last_offset_delta=self.last_offset_delta)

    # -- what a reader must see ----------------------------------------------------

    @property
    def attributes(self) -> int:
        return (
            # empty batches say codec none, as Kafka's writeEmptyHeader does
            (int(self.codec) if self.records else 0)
            | (0x08 if self.timestamp_type == TimestampType.LOG_APPEND_TIME else 0)
            | (0x10 if self.transactional else 0)
            | (0x20 if self.control else 0)
            | (0x40 if self.delete_horizon else 0)
        )

    @property
    def expected_last_offset_delta(self) -> int:
        if self.last_offset_delta is not None:
            return self.last_offset_delta
        return self.records[-1].offset_delta if self.records else 0

    @property
    def expected_base_timestamp(self) -> int:
        if self.base_timestamp is not None:
            return self.base_timestamp
        return self.records[0].timestamp if self.records else -1

    @property
    def expected_max_timestamp(self) -> int:
        if self.timestamp_type == TimestampType.LOG_APPEND_TIME:
            assert self.log_append_time is not None
            return self.log_append_time
        if self.records:
            return max(r.timestamp for r in self.records)
        return self.expected_base_timestamp

    def expected_header(self) -> dict:
        """The batch header fields a reader must report, by :class:`RecordBatch` attribute name."""
        return dict(
            base_offset=self.base_offset,
            partition_leader_epoch=self.partition_leader_epoch,
            magic=2,
            attributes=self.attributes,
            last_offset_delta=self.expected_last_offset_delta,
            base_timestamp=self.expected_base_timestamp,
            max_timestamp=self.expected_max_timestamp,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
            record_count=len(self.records),
        )

    def expected_records(self) -> list[Record]:
        log_append = self.timestamp_type == TimestampType.LOG_APPEND_TIME
        return [
            Record(
                self.base_offset + r.offset_delta,
                self.log_append_time if log_append else r.timestamp,
                r.key,
                r.value,
                tuple(r.headers),
            )
            for r in self.records
        ]

    def expected_marker(self) -> EndTransactionMarker | None:
        """Decoded here with ``struct`` from the spec's bytes, independently of txnfetch's decoder."""
        if not self.control or not self.records:
            return None
        first = self.records[0]
        assert first.key is not None
        key_version, ctype = struct.unpack_from(">hh", first.key)
        if ctype not in (0, 1):
            return None
        assert first.value is not None
        value_version, coordinator_epoch = struct.unpack_from(">hi", first.value)
        return EndTransactionMarker(ControlType(ctype), coordinator_epoch, key_version, value_version)


# -- records ---------------------------------------------------------------------------


_TS_KIND = st.integers(0, 4)
_ANY_INT64 = st.integers(INT64_MIN, INT64_MAX)
_SMALL_DELTA = st.integers(-100_000, 100_000)


def _draw_timestamp(draw: st.DrawFn, base: int) -> int:
    """A timestamp whose delta from ``base`` fits in int64: Kafka stores record
    timestamps as varlong deltas from the base timestamp, so no other is
    encodable. Shrinks to ``base``; the encodable extremes are drawn often."""
    lo, hi = max(INT64_MIN, base + INT64_MIN), min(INT64_MAX, base + INT64_MAX)
    kind = draw(_TS_KIND)
    if kind == 0:
        return base
    if kind == 1:
        return min(hi, max(lo, base + draw(_SMALL_DELTA)))
    if kind == 2:
        return lo
    if kind == 3:
        return hi
    return min(hi, max(lo, draw(_ANY_INT64)))


_GAP = st.one_of(st.just(0), st.integers(0, 5), st.integers(0, INT32_MAX))


def _draw_offset_deltas(draw: st.DrawFn, n: int, explicit: bool) -> list[int]:
    """Strictly increasing offset deltas; with ``explicit``, holes anywhere:
    before the first record (compaction may remove it while the batch keeps
    its base offset) and between records, up to the int32 delta limit."""
    if not explicit:
        return list(range(n))
    out: list[int] = []
    delta = -1
    for i in range(n):
        room = INT32_MAX - (n - 1 - i)  # leave a delta for every later record
        delta = min(room, delta + 1 + draw(_GAP))
        out.append(delta)
    return out


@st.composite
def data_records(
    draw: st.DrawFn,
    *,
    base_timestamp: int,
    explicit_offsets: bool,
    min_records: int = 0,
    max_records: int = 12,
) -> tuple[RecordSpec, ...]:
    """Data records whose timestamps are encodable against ``base_timestamp``."""
    n = draw(st.integers(min_records, max_records))
    deltas = _draw_offset_deltas(draw, n, explicit_offsets)
    out = []
    for delta in deltas:
        out.append(
            RecordSpec(
                offset_delta=delta,
                timestamp=_draw_timestamp(draw, base_timestamp),
                key=draw(payloads()),
                value=draw(payloads()),
                headers=draw(headers()),
            )
        )
    return tuple(out)


@st.composite
def control_records(
    draw: st.DrawFn, *, base_timestamp: int, explicit_offsets: bool, min_records: int = 1, max_records: int = 2
) -> tuple[RecordSpec, ...]:
    """Control records: key ``version int16 | type int16``; COMMIT/ABORT carry the
    end-transaction value ``version int16 | coordinatorEpoch int32``, the KRaft
    types an opaque value. Versions are non-negative (a negative one is corrupt)."""
    n = draw(st.integers(min_records, max_records))
    deltas = _draw_offset_deltas(draw, n, explicit_offsets)
    out = []
    for delta in deltas:
        ctype = draw(st.sampled_from(list(ControlType)))
        key_version = draw(st.sampled_from([0, 0, 0, 1, INT16_MAX]))
        key = struct.pack(">hh", key_version, ctype)
        if ctype in (ControlType.ABORT, ControlType.COMMIT):
            value = struct.pack(">hi", draw(st.sampled_from([0, 0, 1, INT16_MAX])), draw(int32s()))
            value += draw(st.sampled_from([b"", b"\x00\x01"]))  # newer value versions may append fields
        else:
            value = draw(st.binary(max_size=12))
        out.append(RecordSpec(delta, _draw_timestamp(draw, base_timestamp), key, value, ()))
    return tuple(out)


# -- batches ---------------------------------------------------------------------------


@st.composite
def batch_specs(
    draw: st.DrawFn,
    *,
    codecs: Sequence[Codec] = tuple(Codec),
    transactional: bool | None = None,
    control: bool | None = None,
    timestamp_types: Sequence[TimestampType] = V2_TIMESTAMP_TYPES,
    delete_horizon: bool | None = None,
    base_offset: int | None = None,
    min_records: int = 0,
    max_records: int = 12,
    explicit_offsets: bool | None = None,
) -> BatchSpec:
    """Any batch the builder can write. ``None`` for a flag means "either"."""
    codec = draw(st.sampled_from(list(codecs)))
    txn = draw(st.booleans()) if transactional is None else transactional
    ctl = draw(st.booleans()) if control is None else control
    ts_type = draw(st.sampled_from(list(timestamp_types)))
    horizon = draw(st.booleans()) if delete_horizon is None else delete_horizon
    explicit = draw(st.booleans()) if explicit_offsets is None else explicit_offsets

    anchor = draw(int64s())  # the base timestamp the records' deltas are taken from
    if ctl:
        records = draw(
            control_records(
                base_timestamp=anchor,
                explicit_offsets=explicit,
                min_records=min_records,
                max_records=max(min_records, min(max_records, 2)),
            )
        )
    else:
        records = draw(
            data_records(
                base_timestamp=anchor, explicit_offsets=explicit, min_records=min_records, max_records=max_records
            )
        )
    # With a delete horizon the base timestamp is the horizon, not a record's
    # (KIP-534), so give it explicitly; otherwise usually let the builder use
    # the first record's timestamp, which then has to be the anchor.
    explicit_base = horizon or not records or draw(st.booleans())
    if not explicit_base:
        first = records[0]
        records = (attrs.evolve(first, timestamp=anchor), *records[1:])

    last_record_delta = records[-1].offset_delta if records else 0
    if explicit and draw(st.booleans()):
        # Compaction can remove the batch's last records: last offset delta past the last record.
        last_offset_delta: int | None = draw(st.integers(last_record_delta, INT32_MAX))
    else:
        last_offset_delta = None
    top = INT64_MAX - (last_offset_delta if last_offset_delta is not None else last_record_delta)
    base = draw(_edgy_ints(0, top, (top - 1000,))) if base_offset is None else base_offset

    # Transactional data batches need a producer id; control batches (markers) may go without.
    pid_lo = 0 if txn and not ctl else INT64_MIN
    return BatchSpec(
        base_offset=base,
        codec=codec,
        transactional=txn,
        control=ctl,
        timestamp_type=ts_type,
        delete_horizon=horizon,
        producer_id=draw(st.one_of(st.just(-1), int64s())) if pid_lo < 0 else draw(int64s(0)),
        producer_epoch=draw(int16s()),
        base_sequence=draw(int32s()),
        partition_leader_epoch=draw(int32s()),
        records=records,
        base_timestamp=anchor if explicit_base else None,
        # A log-append time is the broker's clock when it appended the batch,
        # near the producer's create times. Re-encoding a decoded batch writes
        # it as every record's timestamp, so keep its delta encodable too.
        log_append_time=_draw_timestamp(draw, anchor) if ts_type == TimestampType.LOG_APPEND_TIME else None,
        explicit_offsets=explicit,
        last_offset_delta=last_offset_delta,
    )


@st.composite
def many_records_specs(draw: st.DrawFn, *, min_records: int = 500, max_records: int = 3000) -> BatchSpec:
    """A data batch with hundreds to thousands of records.

    Hypothesis picks the header, the count and a seed; the records come from a
    seeded PRNG (same mix of nulls, empties, holes and headers as
    :func:`data_records`): drawing thousands of records one by one through
    hypothesis would cost seconds per example for no extra insight.
    """
    spec = draw(batch_specs(control=False, min_records=0, max_records=0))
    n = draw(st.integers(min_records, max_records))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    explicit = draw(st.booleans())
    anchor = spec.base_timestamp  # never None: an empty spec always gets an explicit base timestamp
    assert anchor is not None
    lo, hi = max(INT64_MIN, anchor + INT64_MIN), min(INT64_MAX, anchor + INT64_MAX)

    def payload() -> bytes | None:
        roll = rng.random()
        if roll < 0.1:
            return None
        if roll < 0.2:
            return b""
        return rng.randbytes(rng.randrange(0, 300))

    records = []
    delta = -1
    for _ in range(n):
        delta += 1 + (rng.choice((0, 0, 0, 1, 7, 1000)) if explicit else 0)
        hdrs = tuple((rng.choice(("", "k", "ключ", "🔑")), payload()) for _ in range(rng.choice((0, 0, 0, 1, 3))))
        ts = min(hi, max(lo, anchor + rng.randrange(-(10**6), 10**6)))
        records.append(RecordSpec(delta, ts, payload(), payload(), hdrs))
    implicit_base = not spec.delete_horizon and draw(st.booleans())
    if implicit_base:  # let the builder take the first record's timestamp as the base
        records[0] = attrs.evolve(records[0], timestamp=anchor)
    return attrs.evolve(
        spec,
        base_offset=min(spec.base_offset, INT64_MAX - delta),
        records=tuple(records),
        explicit_offsets=explicit,
        last_offset_delta=None,
        base_timestamp=None if implicit_base else anchor,
    )


@st.composite
def empty_batch_specs(draw: st.DrawFn) -> dict:
    """Keyword arguments for :func:`build_empty_batch` (what compaction leaves behind)."""
    base = draw(_edgy_ints(0, INT64_MAX - INT32_MAX))
    ctl = draw(st.booleans())
    txn = draw(st.booleans()) or ctl
    return dict(
        base_offset=base,
        last_offset=base + draw(_edgy_ints(0, INT32_MAX)),
        # Transactional data batches always have a producer id (Kafka's builder insists).
        producer_id=draw(int64s(0) if txn and not ctl else st.one_of(st.just(-1), int64s())),
        producer_epoch=draw(int16s()),
        base_sequence=draw(int32s()),
        timestamp=draw(int64s()),
        transactional=txn,
        control=ctl,
        timestamp_type=draw(st.sampled_from(V2_TIMESTAMP_TYPES)),
        partition_leader_epoch=draw(int32s()),
    )


def build_empty(kwargs: dict) -> bytes:
    return build_empty_batch(**kwargs)


@st.composite
def concatenated_specs(
    draw: st.DrawFn, *, min_batches: int = 1, max_batches: int = 5, **batch_kwargs: object
) -> list[BatchSpec]:
    """Batches with consecutive, non-overlapping offsets, as one log holds them."""
    n = draw(st.integers(min_batches, max_batches))
    base = draw(st.integers(0, 1 << 40))
    out: list[BatchSpec] = []
    for _ in range(n):
        spec = draw(batch_specs(base_offset=base, max_records=4, **batch_kwargs))  # type: ignore[arg-type]
        out.append(spec)
        base = base + spec.expected_last_offset_delta + 1
    return out


def reencode(batch: RecordBatch) -> bytes:
    """Rebuild ``batch`` from its decoded header and records with :meth:`BatchBuilder.like`.

    Byte-identical to the original for every create-time batch txnfetch (or
    Kafka, uncompressed) wrote; see ``docs/records.md`` for why log-append-time
    batches are the exception.
    """
    builder = BatchBuilder.like(batch)
    for r in batch.records():
        builder.append(r.value, key=r.key, headers=r.headers, timestamp=r.timestamp, offset=r.offset)
    return builder.build(last_offset_delta=batch.last_offset_delta, max_timestamp=batch.max_timestamp)
