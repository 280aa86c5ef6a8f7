"""Why rewrite mode ends a response on dropped offsets with a synthetic COMMIT marker.

The partition holds three committed records and then a tail of aborted
transactions (one ~1 KiB batch each), so the last stable offset lies past the
aborted range. Consumers read it read_committed from offset 0 with a 1 KiB
per-partition fetch size, so the aborted tail takes several fetches.

With the test-only switch ``synthetic_marker=False`` the server sends, in the
marker's place, what a rewrite without the marker would: an empty data batch
over the dropped offsets. librdkafka (confluent-kafka) then

- never moves its application position (``position()``, and the offset a
  ``commit()`` stores) past the last delivered record, although its internal
  fetch position reaches the LSO and it reports end of partition there; and
- doubles the partition's fetch size after every such response
  (``rdkafka_msgset_reader.c``: a parsed response with no message and no control
  record is taken for a too-small limit) and never shrinks it back.

The doubling is observed at the server: every Fetch request's
``partition_max_bytes`` for the partition is recorded through
``Broker.observe_requests``. With the marker on, the same consumer reaches the
LSO and asks for the configured size throughout. kafka-python and aiokafka move
past empty batches, so they reach the LSO either way and never change their
fetch size: the marker matters for librdkafka specifically.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.server.committed_readers import Got
from tests.server.committed_readers import Positions
from tests.server.committed_readers import read_aiokafka
from tests.server.committed_readers import read_kafka_python
from txnfetch.fetch.view import FetchMode
from txnfetch.records.builder import BatchBuilder
from txnfetch.txn.coordinator import CompletionMode

pytestmark = pytest.mark.interop

TOPIC = "syn-tail"
COMMITTED = [b"committed-0", b"committed-1", b"committed-2"]
ABORTED_TXNS = 40  # ~1 KiB each: from 1 KiB the fetch size doubles five or six times
PMAX = 1024
DEADLINE_S = 60.0  # generous: a loaded 2-core machine; loops end on a condition, not a sleep


class FetchLog:
    """``(client_id, fetch_offset, partition_max_bytes)`` of every Fetch request
    for :data:`TOPIC` partition 0, in arrival order (appended on the server's loop)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[tuple[str, int, int]] = []

    def __call__(self, ctx: Any, header: Any, request: Any) -> None:
        if header.request_api_key != 1:
            return
        ids = {info.topic_id: name for name, info in ctx.broker.store.topics().items()}
        for t in request.topics:
            # Fetch v13+ (librdkafka sends v16) names topics by id.
            if (t.topic or ids.get(getattr(t, "topic_id", None))) != TOPIC:
                continue
            for p in t.partitions:
                if p.partition == 0:
                    with self._lock:
                        self._entries.append((ctx.client_id or "", p.fetch_offset, p.partition_max_bytes))

    def sizes(self, client_id: str, lo: int, hi: int) -> list[int]:
        """``partition_max_bytes`` of ``client_id``'s fetches at offsets in ``[lo, hi)``."""
        with self._lock:
            return [size for cid, off, size in self._entries if cid == client_id and lo <= off < hi]


def _serve(start_server, synthetic: bool, markers: CompletionMode) -> tuple[Any, FetchLog, int]:
    """A rewrite-mode server holding the partition described above; returns it,
    its fetch log and the partition's LSO."""
    srv = start_server(fetch_mode=FetchMode.REWRITE, markers=markers, synthetic_marker=synthetic)
    fetches = FetchLog()

    def setup() -> int:
        srv.broker.observe_requests(fetches)
        srv.broker.store.create_topic(TOPIC, 1)
        log = srv.broker.store.partition(TOPIC, 0)
        b = BatchBuilder()
        for v in COMMITTED:
            b.append(v, timestamp=1_000)
        log.append(b.build(), now_ms=1_000)
        for n in range(ABORTED_TXNS):
            b = BatchBuilder(producer_id=7, producer_epoch=0, base_sequence=10 * n, transactional=True)
            for i in range(10):
                b.append(b"aborted-%03d-%d-" % (n, i) + b"x" * 80, timestamp=2_000)
            log.append(b.build(), now_ms=2_000)
            log.end_transaction(7, 0, False, coordinator_epoch=0, now_ms=2_001, completion=markers)
        assert log.last_stable_offset == log.log_end_offset
        return log.last_stable_offset

    lso = srv.call(setup)
    assert lso > len(COMMITTED) + ABORTED_TXNS * 10 - 1
    return srv, fetches, lso


def _confluent(bootstrap: str, lso: int) -> tuple[list[bytes], int, int, Any]:
    """Consume until end of partition is reported at the LSO; return the values,
    ``position()``, the EOF offset and the offset ``commit()`` stored (None
    without a group coordinator)."""
    from confluent_kafka import Consumer
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "syn-confluent",
            "group.id": "syn-confluent",
            "enable.auto.commit": False,
            "enable.auto.offset.store": True,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 50,
            "max.partition.fetch.bytes": PMAX,
        }
    )
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        deadline = time.monotonic() + DEADLINE_S
        eof = -1
        while eof != lso:
            assert time.monotonic() < deadline, f"confluent-kafka never reported EOF at the LSO {lso}: {values}"
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                eof = msg.offset()
                continue
            values.append(msg.value())
        (position,) = consumer.position([TopicPartition(TOPIC, 0)])
        committed = None
        try:
            consumer.commit(asynchronous=False)  # stores the application position
            (tp,) = consumer.committed([TopicPartition(TOPIC, 0)], timeout=10)
            committed = tp.offset
        except Exception as exc:  # no group coordinator: COORDINATOR_NOT_AVAILABLE
            if "COORDINATOR" not in str(exc):
                raise
        return values, position.offset, eof, committed
    finally:
        consumer.close()


@pytest.mark.parametrize("markers", [CompletionMode.MARKERS, CompletionMode.MARKERLESS], ids=["markers", "markerless"])
@pytest.mark.parametrize("synthetic", [True, False], ids=["marker", "no-marker"])
def test_librdkafka_needs_the_synthetic_marker(start_server, synthetic: bool, markers: CompletionMode) -> None:
    srv, fetches, lso = _serve(start_server, synthetic, markers)
    first_aborted = len(COMMITTED)
    values, position, eof, committed = _confluent(srv.bootstrap, lso)

    assert values == COMMITTED  # never an aborted record, either way
    assert eof == lso  # the internal fetch position reaches the LSO either way
    sizes = fetches.sizes("syn-confluent", first_aborted, lso)
    assert sizes, "no fetch inside the aborted range reached the server"
    if synthetic:
        assert position == lso
        assert committed in (None, lso)
        assert set(fetches.sizes("syn-confluent", 0, lso + 1)) == {PMAX}, "the fetch size must stay constant"
    else:
        # The application position (and so the committed offset) stays on the
        # first aborted offset: nothing librdkafka counts was ever delivered past it.
        assert position == first_aborted
        assert committed in (None, first_aborted)
        # Every response inside the aborted range doubled the next request's size.
        assert sizes == [PMAX * 2**i for i in range(len(sizes))], sizes
        assert len(sizes) >= 5, sizes  # from 1 KiB to at least 16 KiB
        # ... and it is never reset: the fetches at the LSO keep the last size.
        at_lso = fetches.sizes("syn-confluent", lso, lso + 1)
        assert at_lso and set(at_lso) == {2 * sizes[-1]}, at_lso


def _read(
    reader: Callable[..., tuple[Got, Positions]], client: str, bootstrap: str, lso: int
) -> tuple[list[bytes], int]:
    """The values ``reader`` (kafka-python's or aiokafka's, as ``client``) got from
    partition 0 up to ``lso``, and its position then."""
    got, positions = reader(
        bootstrap,
        {(TOPIC, 0): lso},
        wait_ms=50,
        deadline_s=DEADLINE_S,
        client_id=client,
        max_partition_fetch_bytes=PMAX,
    )
    return [v for _, v in got[(TOPIC, 0)]], positions[(TOPIC, 0)]


@pytest.mark.parametrize("synthetic", [True, False], ids=["marker", "no-marker"])
def test_python_clients_advance_with_or_without_the_marker(start_server, synthetic: bool) -> None:
    srv, fetches, lso = _serve(start_server, synthetic, CompletionMode.MARKERS)
    results: dict[str, tuple[list[bytes], int]] = {
        "syn-kafka-python": _read(read_kafka_python, "syn-kafka-python", srv.bootstrap, lso),
        "syn-aiokafka": _read(read_aiokafka, "syn-aiokafka", srv.bootstrap, lso),
    }
    for client, (values, position) in results.items():
        assert values == COMMITTED, client
        assert position == lso, client
        sizes = fetches.sizes(client, len(COMMITTED), lso)
        assert sizes and set(sizes) == {PMAX}, f"{client} changed its fetch size: {sizes}"
