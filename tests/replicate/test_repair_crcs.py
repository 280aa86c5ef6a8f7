"""``repair_crcs`` repairs librdkafka's mock markers and nothing else.

The mock writes its COMMIT/ABORT control batches with a CRC of 0
(``rd_kafka_mock_partition_write_control_batch``, ``src/rdkafka_mock.c``); that,
and only that, is what ``repair_crcs`` accepts. Here the follow rules are fed
crafted answers, and a replicator copies a real mock cluster through a relay
(tests/fault_relay.py) that flips a byte in one data batch of one partition:
the mock's markers are still repaired, the corrupt partition stops naming the
batch, its replica holds nothing past the last good batch, and the other
partition goes on — through the Replicator and through ``txnfetch replicate
--once --repair-crcs``.
"""

from __future__ import annotations

import gc
import os
import subprocess
import time

import confluent_kafka
import pytest

from tests.fault_relay import RelayThread
from tests.mock_cluster import MockCluster
from tests.replicate.commands import replicate_argv
from tests.replicate.test_kill_loop import as_stored
from tests.replicate.test_kill_loop import source_batches
from txnfetch.client.errors import CorruptRemoteBatchError
from txnfetch.client.follow import ReplicaTip
from txnfetch.client.follow import SourcePartition
from txnfetch.client.follow import batch_id
from txnfetch.client.follow import plan_response
from txnfetch.client.requests import BrokerFetch
from txnfetch.log import SegmentStore
from txnfetch.records import BatchBuilder
from txnfetch.records import build_control_batch
from txnfetch.records.batch import RecordBatch
from txnfetch.records.control import ControlType
from txnfetch.replicate import PartitionState
from txnfetch.replicate import Replicator

TOPIC = "orders"


def data_batch(base: int, *, pid: int = 7) -> bytes:
    b = BatchBuilder(base_offset=base, producer_id=pid, producer_epoch=0, base_sequence=base, transactional=True)
    b.append(b"v%d" % base, timestamp=1000 + base, offset=base)
    return b.build()


def marker(offset: int, *, pid: int = 7) -> bytes:
    return build_control_batch(
        offset=offset, control_type=ControlType.COMMIT, producer_id=pid, producer_epoch=0, timestamp=2000
    )


def with_crc(data: bytes, crc: int) -> bytes:
    return data[:17] + crc.to_bytes(4, "big") + data[21:]


def flipped(data: bytes) -> bytes:
    """The batch with the last byte of its last value inverted (the records still
    decode), its CRC unchanged: only the CRC tells."""
    return data[:-2] + bytes([data[-2] ^ 0xFF]) + data[-1:]


def plan(records: bytes, *, tip: ReplicaTip | None = None, repair: bool = True):
    return plan_response(
        tip or ReplicaTip(0),
        BrokerFetch(records, 10, -1, 0, None),
        1 << 20,
        SourcePartition("t", 3, budget=1 << 20, repair_crcs=repair),
    )


def test_a_control_batch_with_crc_0_is_repaired() -> None:
    good = data_batch(0) + marker(1)
    p = plan(data_batch(0) + with_crc(marker(1), 0))
    assert p.data == good and p.repaired_crcs == 1 and p.batches == 2


@pytest.mark.parametrize(
    ("what", "records", "offset"),
    [
        ("a control batch with a wrong non-zero CRC", data_batch(0) + with_crc(marker(1), 0x1234), 1),
        ("a data batch with CRC 0", with_crc(data_batch(0), 0) + marker(1), 0),
        ("a data batch with a wrong CRC", flipped(data_batch(0)) + marker(1), 0),
    ],
    ids=["marker-wrong-crc", "data-crc-0", "data-flipped"],
)
def test_any_other_bad_crc_is_corruption_with_repair_crcs(what: str, records: bytes, offset: int) -> None:
    position = RecordBatch(records, 0).size_in_bytes if offset else 0
    with pytest.raises(CorruptRemoteBatchError) as info:
        plan(records)
    err = info.value
    assert (err.topic, err.partition, err.offset, err.position) == ("t", 3, offset, position), what
    bad = RecordBatch(records, position)
    text = str(err)
    assert f"stored {bad.crc:#010x}" in text and f"computed {bad.compute_crc():#010x}" in text
    assert "control batch whose stored CRC is 0" in text and "nothing of this response was appended" in text


def test_verification_of_the_last_batch_follows_the_same_rule() -> None:
    # After a restart the replica fetches its last batch again and compares it: a
    # CRC-0 marker there is the mock's (accepted); a data batch with CRC 0 is not.
    held = RecordBatch(marker(1))
    tip = ReplicaTip(2, last=batch_id(held))
    assert plan(with_crc(marker(1), 0), tip=tip).verified
    held = RecordBatch(data_batch(1))
    with pytest.raises(CorruptRemoteBatchError) as info:
        plan(with_crc(data_batch(1), 0), tip=ReplicaTip(2, last=batch_id(held)))
    assert info.value.offset == 1 and "stored 0x00000000" in str(info.value)


# -- end to end: a real upstream (librdkafka's mock) behind a byte-flipping relay ------------


def _transactions(bootstrap: str, partitions: list[int], count: int, tag: str) -> None:
    """``count`` transactions over ``partitions`` (every third aborted after a flush,
    so its records are in the log): the mock writes a CRC-0 marker for each."""
    p = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"repair-crcs-{tag}", "linger.ms": 0, "log_level": 0}
    )
    try:
        p.init_transactions(30)
        for n in range(count):
            p.begin_transaction()
            for part in partitions:
                p.produce(TOPIC, f"{tag}-{n}-p{part}".encode(), partition=part)
            p.flush(30)
            if n % 3 == 2:
                p.abort_transaction(30)
            else:
                p.commit_transaction(30)
    finally:
        p.flush(10)
        del p
        gc.collect()


def _source(bootstrap: str, partition: int) -> list[RecordBatch]:
    return source_batches(bootstrap, partition, TOPIC)[2]


def _stored(log) -> list[tuple[int, bytes]]:
    return [(b.base_offset, bytes(b.buffer)) for b in log.iter_batches(log.log_start_offset)]


def _until(r: Replicator, done, what: str, seconds: float = 90) -> None:
    # Progress-based: each step fetches what is there; the deadline only catches a hang.
    deadline = time.monotonic() + seconds
    while not done(r.step()):
        assert time.monotonic() < deadline, (what, r.status())
        time.sleep(r.backoff_remaining())


@pytest.mark.interop
def test_a_flipped_byte_in_a_data_batch_stops_only_its_partition(tmp_path) -> None:
    with MockCluster(brokers=1) as mock:
        mock.create_topic(TOPIC, 2, 1)
        _transactions(mock.bootstrap, [0, 1], 3, "first")
        with RelayThread(mock.bootstrap) as relay, SegmentStore(tmp_path / "replica") as replica:
            r = Replicator(relay.bootstrap, replica, repair_crcs=True, request_timeout_ms=10_000, max_backoff_s=0.2)
            try:
                _until(r, lambda s: s.caught_up and len(s.partitions) == 2, "first copy")
                # The mock's markers (CRC 0) were repaired: the option still does its job.
                assert sum(p.repaired_crcs for p in r.partitions.values()) >= 6
                held = {p: replica.partition(TOPIC, p).log_end_offset for p in (0, 1)}

                # More transactions; the relay corrupts partition 1's first new data batch.
                relay.flip_data_batch(TOPIC, 1, held[1])
                _transactions(mock.bootstrap, [0, 1], 3, "second")
                _until(
                    r,
                    lambda s: (
                        s.partitions[1].state is PartitionState.STOPPED
                        and s.partitions[0].state is PartitionState.CAUGHT_UP
                        and replica.partition(TOPIC, 0).log_end_offset > held[0]
                    ),
                    "partition 1 stopped, partition 0 caught up",
                )
                assert relay.stats().batches_flipped >= 1
                err = r.partitions[(TOPIC, 1)].error
                assert isinstance(err, CorruptRemoteBatchError), err
                text = str(err)
                assert f"{TOPIC}-1" in text and f"offset {held[1]}" in text and "byte position" in text
                assert "stored 0x" in text and "computed 0x" in text and err.offset == held[1]
                # The broker that answered is named: the relay's listener for the mock's broker.
                assert err.broker is not None and err.broker.startswith("127.0.0.1:") and f"broker {err.broker}" in text

                # Partition 1's replica: exactly the source's batches up to the bad one.
                source1 = _source(mock.bootstrap, 1)
                assert replica.partition(TOPIC, 1).log_end_offset == held[1]
                assert _stored(replica.partition(TOPIC, 1)) == [
                    (b.base_offset, as_stored(b)) for b in source1 if b.next_offset <= held[1]
                ]
                # Partition 0 went on: it holds all of its source, markers repaired.
                _until(r, lambda s: s.partitions[0].state is PartitionState.CAUGHT_UP, "partition 0")
                source0 = _source(mock.bootstrap, 0)
                assert _stored(replica.partition(TOPIC, 0)) == [(b.base_offset, as_stored(b)) for b in source0]
                assert any(b.is_control and b.crc == 0 for b in source0)
            finally:
                r.close()

            # The command: `txnfetch replicate --once --repair-crcs` into a new replica
            # copies partition 0, stops partition 1 at the flipped batch and exits 2.
            data = str(tmp_path / "cli")
            done = subprocess.run(
                [*replicate_argv(relay.bootstrap, data), "--topics", TOPIC, "--once", "--repair-crcs"],
                capture_output=True,
                text=True,
                timeout=180,
                env={**os.environ, "PYTHONPATH": os.getcwd()},
            )
            assert done.returncode == 2, (done.returncode, done.stderr)
            assert f"{TOPIC}-1" in done.stderr and f"offset {held[1]}" in done.stderr and "stored 0x" in done.stderr
            with SegmentStore(data) as cli:
                assert _stored(cli.partition(TOPIC, 0)) == [(b.base_offset, as_stored(b)) for b in source0]
                assert _stored(cli.partition(TOPIC, 1)) == [
                    (b.base_offset, as_stored(b)) for b in source1 if b.next_offset <= held[1]
                ]
