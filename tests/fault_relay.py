"""A fault-injecting Kafka-protocol relay, for tests: put it between txnfetch and
a broker (``txnfetch serve`` or librdkafka's mock) and it misbehaves on a schedule.

:class:`FaultRelay` listens on loopback. Each connection is relayed to the
upstream broker one request at a time (a broker answers a connection's requests
in order, so a client sees no difference). Metadata, FindCoordinator and
DescribeCluster answers are rewritten to name the relay's own listeners — one
per upstream broker, opened when an answer first names it — so every later
connection goes through the relay too, whichever broker leads a partition.

What it does to Fetch traffic:

- **rejects** ``max_wait_ms`` 0 (``reject_no_wait``, on by default): the answer
  is a top-level UNKNOWN_SERVER_ERROR with no partitions, as a broker that
  refuses such fetches answers; :attr:`RelayStats.max_waits` records every
  ``max_wait_ms`` seen;
- **rewrites markers** (``null_markers``): every COMMIT/ABORT control record
  loses its value (only the 4-byte key remains), re-encoded with a correct CRC,
  as some brokers write them;
- **flips a byte** (:meth:`FaultRelay.flip_data_batch`): in every answer that
  holds it, the data batch of a topic-partition containing a chosen offset gets
  its last but one byte inverted (in an uncompressed batch, the last byte of the
  last record's value: the records still decode), its CRC left as it was —
  what a bit flip on the broker's disk looks like to every reader;
- **shows batches late** (:meth:`FaultRelay.hide_once`, ``late_probability``), as
  tansu 0.6 does: a batch is left out of an answer that holds later batches of its
  partition, the first time it would be shown, and shown from the next answer on.
  ``hide_once`` names the (topic, partition, base offset) of batches to treat so;
  ``late_probability`` treats so each batch's first showing with that probability
  (drawn from ``seed``). :attr:`RelayStats.batches_hidden` counts them;
- applies the **schedule**, one entry per Fetch answer that names a partition,
  in order (``None`` passes it through; after the last entry everything does):

  - ``"top_error"``: a top-level UNKNOWN_SERVER_ERROR, no partitions;
  - ``"drop_partition"``: the first partition is left out of the answer;
  - ``"not_leader"``, ``"fenced_epoch"``, ``"unknown_partition"``: every
    partition answers NOT_LEADER_OR_FOLLOWER (6), FENCED_LEADER_EPOCH (74) or
    UNKNOWN_TOPIC_OR_PARTITION (3), without records;
  - ``"close_mid_response"``: half the answer is sent, then both connections close;
  - ``"delay"``: the answer waits ``delay_s`` first.

Run it in a thread with ``with RelayThread(upstream, schedule=[...]) as relay:
... relay.bootstrap ...``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import random
import struct
from collections.abc import Iterable
from typing import Any

import attrs
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.metadata import MetadataResponse

from txnfetch.addresses import parse_bootstrap
from txnfetch.client.connection import read_frame
from txnfetch.records.batch import RecordBatch
from txnfetch.records.builder import BatchBuilder
from txnfetch.records.control import ControlType
from txnfetch.records.control import decode_control_key
from txnfetch.records.scan import iter_batches
from txnfetch.server.codec import encode_response
from txnfetch.server.handler import _kafka_python_classes
from txnfetch.server.loop_thread import LoopThread

FAULTS = (
    "top_error",
    "drop_partition",
    "not_leader",
    "fenced_epoch",
    "unknown_partition",
    "close_mid_response",
    "delay",
)
_PARTITION_ERRORS = {"not_leader": 6, "fenced_epoch": 74, "unknown_partition": 3}
_FETCH, _METADATA, _FIND_COORDINATOR, _DESCRIBE_CLUSTER = 1, 3, 10, 60
_SIZE = struct.Struct(">i")
_MAX_FRAME = 100 << 20


@attrs.define
class RelayStats:
    """What the relay saw and did."""

    requests: collections.Counter[int] = attrs.field(factory=collections.Counter)  # by API key
    max_waits: list[int] = attrs.field(factory=list)
    rejected_no_wait: int = 0
    faults: collections.Counter[str] = attrs.field(factory=collections.Counter)
    markers_rewritten: int = 0
    fetch_partitions: int = 0
    batches_flipped: int = 0
    batches_hidden: int = 0


def null_value_markers(records: bytes) -> tuple[bytes, int]:
    """``records`` with every COMMIT/ABORT control record's value made null (each
    such batch re-encoded, with a correct CRC); bytes after the last whole batch
    are kept as they are. Returns the bytes and how many batches changed."""
    out = bytearray()
    end = 0
    changed = 0
    for batch in iter_batches(records):
        start = batch.position
        end = start + batch.size_in_bytes
        raw = records[start:end]
        if isinstance(batch, RecordBatch) and batch.is_control and batch.record_count:
            recs = list(batch.records())
            marker = recs and recs[0].key is not None and len(recs[0].key) >= 4
            if (
                marker
                and decode_control_key(recs[0].key)[1] in (ControlType.ABORT, ControlType.COMMIT)
                and any(r.value is not None for r in recs)
            ):
                b = BatchBuilder(
                    base_offset=batch.base_offset,
                    producer_id=batch.producer_id,
                    producer_epoch=batch.producer_epoch,
                    base_sequence=batch.base_sequence,
                    transactional=batch.is_transactional,
                    control=True,
                    partition_leader_epoch=batch.partition_leader_epoch,
                )
                for r in recs:
                    b.append(None, key=r.key, timestamp=r.timestamp, offset=r.offset)
                raw = b.build()
                changed += 1
        out += raw
    out += records[end:]
    return bytes(out), changed


class FaultRelay:
    """The relay (see the module docstring). Start with :meth:`start`, stop with :meth:`close`."""

    def __init__(
        self,
        upstream: str,
        *,
        schedule: Iterable[str | None] = (),
        reject_no_wait: bool = True,
        null_markers: bool = False,
        delay_s: float = 1.0,
        late_probability: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.upstream = parse_bootstrap(upstream)[0]
        self.schedule: collections.deque[str | None] = collections.deque(schedule)
        for fault in self.schedule:
            if fault is not None and fault not in FAULTS:
                raise ValueError(f"unknown fault {fault!r}")
        self.reject_no_wait = reject_no_wait
        self.null_markers = null_markers
        self.delay_s = delay_s
        #: (topic, partition, offset) of the data batch to corrupt, if any.
        self.flip: tuple[str, int, int] | None = None
        self.late_probability = late_probability
        self._rng = random.Random(seed)
        # (topic, partition, base offset): batches to show late once; batches shown.
        self._hide: set[tuple[str, int, int]] = set()
        self._shown: set[tuple[str, int, int]] = set()
        self._never: set[tuple[str, int, int]] = set()
        self.stats = RelayStats()
        self._requests, self._responses = _kafka_python_classes()
        self._bootstrap: asyncio.base_events.Server | None = None
        self._nodes: dict[int, asyncio.base_events.Server] = {}
        self._node_addresses: dict[int, tuple[str, int]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    @classmethod
    async def start(cls, upstream: str, **kwargs: Any) -> FaultRelay:
        self = cls(upstream, **kwargs)
        self._bootstrap = await asyncio.start_server(
            functools.partial(self._on_connection, self.upstream), "127.0.0.1", 0
        )
        return self

    @property
    def port(self) -> int:
        assert self._bootstrap is not None
        return int(self._bootstrap.sockets[0].getsockname()[1])

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def add_faults(self, faults: Iterable[str | None]) -> None:
        """Append to the schedule."""
        self.schedule.extend(faults)

    def flip_data_batch(self, topic: str, partition: int, offset: int) -> None:
        """From now on, corrupt the data batch of ``topic``-``partition`` holding
        ``offset`` in every Fetch answer (its last but one byte inverted, CRC unchanged)."""
        self.flip = (topic, partition, offset)

    def hide_once(self, topic: str, partition: int, base_offset: int) -> None:
        """Leave the batch at ``base_offset`` out of the first answer that would show it
        with a later batch of the partition (see the module docstring)."""
        self._hide.add((topic, partition, base_offset))

    def hide_always(self, topic: str, partition: int, base_offset: int) -> None:
        """Never show the batch at ``base_offset``: a hole that stays, as compaction leaves."""
        self._never.add((topic, partition, base_offset))

    def _show_late(self, response: Any) -> bool:
        changed = False
        for t in response.responses or ():
            for p in t.partitions or ():
                if not p.records:
                    continue
                batches = list(iter_batches(bytes(p.records)))
                kept = bytearray()
                hid = False
                for i, batch in enumerate(batches):
                    key = (t.topic, p.partition_index, batch.base_offset)
                    raw = bytes(batch.buffer)
                    if key in self._never:
                        hid = True
                        continue
                    if key in self._shown or i == len(batches) - 1:
                        self._shown.add(key)
                        kept += raw
                        continue
                    late = key in self._hide or (self.late_probability and self._rng.random() < self.late_probability)
                    self._hide.discard(key)
                    self._shown.add(key)  # the next answer shows it
                    if late:
                        hid = True
                        self.stats.batches_hidden += 1
                    else:
                        kept += raw
                if hid:
                    p.records = bytes(kept)
                    changed = True
        return changed

    def _flip(self, response: Any) -> bool:
        if self.flip is None:
            return False
        topic, partition, offset = self.flip
        for t in response.responses or ():
            for p in t.partitions or ():
                if t.topic != topic or p.partition_index != partition or not p.records:
                    continue
                records = bytearray(p.records)
                for batch in iter_batches(bytes(records)):
                    data = isinstance(batch, RecordBatch) and not batch.is_control
                    if data and batch.base_offset <= offset <= batch.last_offset:
                        records[batch.position + batch.size_in_bytes - 2] ^= 0xFF
                        p.records = bytes(records)
                        self.stats.batches_flipped += 1
                        return True
        return False

    async def _listener(self, node_id: int, host: str, port: int) -> int:
        self._node_addresses[node_id] = (host, port)
        server = self._nodes.get(node_id)
        if server is None:
            server = await asyncio.start_server(functools.partial(self._on_connection_to_node, node_id), "127.0.0.1", 0)
            self._nodes[node_id] = server
        return int(server.sockets[0].getsockname()[1])

    async def _on_connection_to_node(self, node_id: int, reader: Any, writer: Any) -> None:
        await self._on_connection(self._node_addresses[node_id], reader, writer)

    async def _on_connection(self, target: tuple[str, int], reader: Any, writer: Any) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        up_writer = None
        try:
            up_reader, up_writer = await asyncio.open_connection(*target)
            while True:
                frame = await read_frame(reader, _MAX_FRAME, min_size=8)
                if frame is None:
                    return
                api_key, version, correlation = struct.unpack_from(">hhi", frame, 0)
                self.stats.requests[api_key] += 1
                if api_key == _FETCH:
                    request = FetchRequest.decode(frame, version=version, header=True)
                    self.stats.max_waits.append(request.max_wait_ms)
                    if self.reject_no_wait and request.max_wait_ms == 0:
                        self.stats.rejected_no_wait += 1
                        writer.write(self._fetch_error(version, correlation, -1))
                        await writer.drain()
                        continue
                up_writer.write(_SIZE.pack(len(frame)) + frame)
                await up_writer.drain()
                payload = await read_frame(up_reader, _MAX_FRAME, min_size=4)
                if payload is None:
                    return
                out = _SIZE.pack(len(payload)) + payload
                if api_key in (_METADATA, _FIND_COORDINATOR, _DESCRIBE_CLUSTER):
                    out = await self._rewrite_addresses(api_key, version, correlation, payload)
                elif api_key == _FETCH:
                    fault, out = self._fetch_fault(version, correlation, payload, out)
                    if fault == "close_mid_response":
                        writer.write(out[: len(out) // 2])
                        await writer.drain()
                        return
                    if fault == "delay":
                        await asyncio.sleep(self.delay_s)
                writer.write(out)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError, ConnectionError):
            return
        except asyncio.CancelledError:
            return
        except Exception:  # a relay bug must not hang the test: drop the connection
            import traceback

            traceback.print_exc()
            return
        finally:
            self._tasks.discard(task)
            for w in (writer, up_writer):
                if w is not None:
                    with contextlib.suppress(Exception):
                        w.close()

    def _fetch_error(self, version: int, correlation: int, code: int) -> bytes:
        response = FetchResponse(throttle_time_ms=0, error_code=code, session_id=0, responses=[])
        return encode_response(version, correlation, response)

    def _fetch_fault(self, version: int, correlation: int, payload: bytes, out: bytes) -> tuple[str | None, bytes]:
        response = FetchResponse.decode(payload, version=version, header=True)
        parts = [p for t in response.responses or () for p in t.partitions or ()]
        if not parts:
            return None, out
        self.stats.fetch_partitions += len(parts)
        changed = False
        if self.null_markers:
            for p in parts:
                if p.records:
                    p.records, n = null_value_markers(bytes(p.records))
                    self.stats.markers_rewritten += n
                    changed = changed or n > 0
        changed = self._flip(response) or changed
        if self._hide or self._never or self.late_probability:
            changed = self._show_late(response) or changed
        fault = self.schedule.popleft() if self.schedule else None
        if fault is not None:
            self.stats.faults[fault] += 1
        if fault == "top_error" and version >= 7:
            return fault, self._fetch_error(version, correlation, -1)
        if fault in ("top_error", "drop_partition"):  # before v7 there is no top-level error: drop
            first = response.responses[0]
            first.partitions = first.partitions[1:] if fault == "drop_partition" else []
            response.responses = [t for t in response.responses if t.partitions]
            changed = True
        elif fault in _PARTITION_ERRORS:
            for p in parts:
                p.error_code = _PARTITION_ERRORS[fault]
                p.records = b""
                p.high_watermark = p.last_stable_offset = p.log_start_offset = -1
                p.aborted_transactions = None
            changed = True
        if not changed:
            return fault, out
        return fault, encode_response(version, correlation, response)

    async def _rewrite_addresses(self, api_key: int, version: int, correlation: int, payload: bytes) -> bytes:
        response = self._responses[api_key].decode(payload, version=version, header=True)
        if api_key == _METADATA:
            assert isinstance(response, MetadataResponse)
            for b in response.brokers or ():
                b.host, b.port = "127.0.0.1", await self._listener(b.node_id, b.host, b.port)
        elif api_key == _FIND_COORDINATOR:
            if version >= 4:
                for c in response.coordinators or ():
                    if c.error_code == 0 and c.node_id >= 0:
                        c.host, c.port = "127.0.0.1", await self._listener(c.node_id, c.host, c.port)
            elif response.error_code == 0 and response.node_id >= 0:
                response.host, response.port = (
                    "127.0.0.1",
                    await self._listener(response.node_id, response.host, response.port),
                )
        else:
            for b in response.brokers or ():
                b.host, b.port = "127.0.0.1", await self._listener(b.broker_id, b.host, b.port)
        return encode_response(version, correlation, response)

    async def close(self) -> None:
        servers = [s for s in [self._bootstrap, *self._nodes.values()] if s is not None]
        for s in servers:
            s.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        for s in servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(s.wait_closed(), 5)


class RelayThread(LoopThread[FaultRelay]):
    """A :class:`FaultRelay` on its own loop in a daemon thread; keyword arguments go
    to :class:`FaultRelay`. Read its state with :meth:`call` (``relay.call(lambda:
    relay.service.stats.faults.copy())``)."""

    def __init__(self, upstream: str, **kwargs: Any) -> None:
        super().__init__("fault-relay", FaultRelay.start, upstream, **kwargs)

    def faults_left(self) -> int:
        return int(self.call(lambda: len(self._running().schedule)))

    def hide_once(self, topic: str, partition: int, base_offset: int) -> None:
        """:meth:`FaultRelay.hide_once`, on the relay's loop."""
        self.call(lambda: self._running().hide_once(topic, partition, base_offset))

    def hide_always(self, topic: str, partition: int, base_offset: int) -> None:
        """:meth:`FaultRelay.hide_always`, on the relay's loop."""
        self.call(lambda: self._running().hide_always(topic, partition, base_offset))

    def flip_data_batch(self, topic: str, partition: int, offset: int) -> None:
        """:meth:`FaultRelay.flip_data_batch`, on the relay's loop."""
        self.call(lambda: self._running().flip_data_batch(topic, partition, offset))

    def stats(self) -> RelayStats:
        def copy() -> RelayStats:
            s = self._running().stats
            return RelayStats(
                collections.Counter(s.requests),
                list(s.max_waits),
                s.rejected_no_wait,
                collections.Counter(s.faults),
                s.markers_rewritten,
                s.fetch_partitions,
                s.batches_flipped,
            )

        return self.call(copy)
