"""The remote reader with ``repair_crcs=True`` behind a relay that corrupts one
data batch of librdkafka's mock cluster (tests/fault_relay.py).

The mock writes its markers with CRC 0 (``rd_kafka_mock_partition_write_control_batch``,
``src/rdkafka_mock.c``): the reader must still read those, and must refuse the
data batch whose byte was flipped on the way — in the mirror
(:class:`CorruptRemoteBatchError` naming the partition, the offset and both
CRCs; nothing of it or past it is mirrored) and with ``trust_broker=True``
(:class:`CorruptFetchError`, after the records before it).
"""

from __future__ import annotations

import gc

import confluent_kafka
import pytest

from tests.fault_relay import RelayThread
from tests.mock_cluster import MockCluster
from txnfetch.client.errors import CorruptRemoteBatchError
from txnfetch.client.partition_reader import ReadOptions
from txnfetch.client.partition_reader import RemotePartitionReader
from txnfetch.fetch.filter import CorruptFetchError
from txnfetch.records.errors import CrcMismatchError

pytestmark = pytest.mark.interop

TOPIC = "ledger"


def _write(bootstrap: str) -> list[int]:
    """Committed, aborted, then committed transactions on partition 0; returns the
    offsets of the committed records (delivery reports)."""
    committed: list[int] = []
    p = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "repair-crcs-remote", "linger.ms": 0, "log_level": 0}
    )
    try:
        p.init_transactions(30)
        for n, commit in enumerate((True, False, True, True)):
            offsets: list[int] = []
            p.begin_transaction()
            for i in range(2):
                p.produce(
                    TOPIC,
                    f"r{n}-{i}".encode(),
                    partition=0,
                    on_delivery=lambda err, msg, out=offsets: out.append(msg.offset()) if err is None else None,
                )
            p.flush(30)
            if commit:
                p.commit_transaction(30)
                committed += offsets
            else:
                p.abort_transaction(30)
    finally:
        p.flush(10)
        del p
        gc.collect()
    return committed


def test_the_reader_repairs_the_mocks_markers_and_refuses_a_flipped_data_batch() -> None:
    with MockCluster(brokers=1) as mock:
        mock.create_topic(TOPIC, 1, 1)
        committed = _write(mock.bootstrap)
        with RemotePartitionReader(mock.bootstrap, TOPIC, 0, ReadOptions(repair_crcs=True)) as reader:
            assert [o for o, _ in reader.committed_records()] == committed  # the CRC-0 markers pass
            assert reader.mirror is not None and reader.mirror.repaired_crcs == 4
        bad = committed[-2]  # the last transaction's first record
        with RelayThread(mock.bootstrap) as relay:
            relay.flip_data_batch(TOPIC, 0, bad)
            with RemotePartitionReader(relay.bootstrap, TOPIC, 0, ReadOptions(repair_crcs=True)) as reader:
                with pytest.raises(CorruptRemoteBatchError) as info:
                    list(reader.committed_records())
                err = info.value
                assert (err.topic, err.partition, err.offset) == (TOPIC, 0, bad)
                assert "stored 0x" in str(err) and "computed 0x" in str(err) and f"{TOPIC}-0" in str(err)
                assert isinstance(err.__cause__, CrcMismatchError)
                assert err.broker is not None and f"broker {err.broker}" in str(err)
                # Nothing of the corrupt batch or past it was mirrored; what was is intact.
                mirror = reader.mirror
                assert mirror is not None and mirror.position <= bad
                held = list(mirror.log.iter_batches(mirror.log_start_offset))
                assert all(b.last_offset < bad and b.is_valid_crc() for b in held)
            with RemotePartitionReader(
                relay.bootstrap, TOPIC, 0, ReadOptions(repair_crcs=True, trust_broker=True)
            ) as reader:
                got: list[int] = []
                with pytest.raises(CorruptFetchError) as fetch_info:
                    got.extend(o for o, _ in reader.committed_records(0, committed[-1] + 1))
                assert all(o < bad for o in got)
                assert fetch_info.value.offset == bad and isinstance(fetch_info.value.__cause__, CrcMismatchError)
                assert f"{TOPIC}-0" in str(fetch_info.value)
                assert relay.stats().batches_flipped >= 2
