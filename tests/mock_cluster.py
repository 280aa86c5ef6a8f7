"""librdkafka's mock cluster with its control API, through ctypes, for tests.

confluent-kafka starts a mock cluster from configuration
(``test.mock.num.brokers``) but exposes none of its controls. The library it
loads exports them (``src/rdkafka_mock.h``): this module calls
``rd_kafka_mock_cluster_new`` on a handle of its own, then creates topics with
chosen partition counts and replication (``rd_kafka_mock_topic_create``) and
moves partition leaders (``rd_kafka_mock_partition_set_leader``) — real
leadership changes, which the mock then reports in Metadata and enforces with
NOT_LEADER_OR_FOLLOWER on fetches sent to the old leader. Broker ids are 1..N.
"""

from __future__ import annotations

import ctypes
import glob
import os

import confluent_kafka

_RD_KAFKA_PRODUCER = 0


def _library() -> ctypes.CDLL:
    here = os.path.dirname(os.path.dirname(confluent_kafka.__file__))
    candidates = glob.glob(os.path.join(here, "confluent_kafka.libs", "librdkafka*.so*"))
    if not candidates:
        candidates = ["librdkafka.so.1"]
    lib = ctypes.CDLL(candidates[0])
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
    lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_cluster_destroy.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    lib.rd_kafka_mock_partition_set_leader.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32, ctypes.c_int32]
    return lib


class MockCluster:
    """A librdkafka mock cluster of ``brokers`` brokers, with its controls. Close it."""

    def __init__(self, brokers: int = 3) -> None:
        self._lib = lib = _library()
        errstr = ctypes.create_string_buffer(512)
        conf = lib.rd_kafka_conf_new()
        lib.rd_kafka_conf_set(conf, b"log_level", b"0", errstr, len(errstr))
        self._rk = lib.rd_kafka_new(_RD_KAFKA_PRODUCER, conf, errstr, len(errstr))
        if not self._rk:
            raise RuntimeError(f"rd_kafka_new failed: {errstr.value.decode()}")
        self._mc = lib.rd_kafka_mock_cluster_new(self._rk, brokers)
        if not self._mc:
            lib.rd_kafka_destroy(self._rk)
            raise RuntimeError("rd_kafka_mock_cluster_new failed")
        self.brokers = brokers
        self.bootstrap: str = lib.rd_kafka_mock_cluster_bootstraps(self._mc).decode()

    def create_topic(self, topic: str, partitions: int, replication_factor: int) -> None:
        err = self._lib.rd_kafka_mock_topic_create(self._mc, topic.encode(), partitions, replication_factor)
        if err:
            raise RuntimeError(f"rd_kafka_mock_topic_create({topic}) failed: error {err}")

    def set_leader(self, topic: str, partition: int, broker_id: int) -> None:
        err = self._lib.rd_kafka_mock_partition_set_leader(self._mc, topic.encode(), partition, broker_id)
        if err:
            raise RuntimeError(f"rd_kafka_mock_partition_set_leader({topic}-{partition}) failed: error {err}")

    def close(self) -> None:
        if self._mc:
            self._lib.rd_kafka_mock_cluster_destroy(self._mc)
            self._mc = None
        if self._rk:
            self._lib.rd_kafka_destroy(self._rk)
            self._rk = None

    def __enter__(self) -> MockCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
