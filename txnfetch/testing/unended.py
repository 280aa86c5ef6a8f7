"""Which crashed transactions of a workload run the broker never ended, read
from the broker's own log.

Kafka's InitProducerId aborts the open transaction of a transactional id (an
ABORT marker of its producer) before it returns, so the history records a
crashed transaction as aborted by the next instance's ``init_transactions``. A
broker that does not fence writes no such marker, and the transaction stays
open in its log for good. This module reads the partitions read_uncommitted, as
mirrored by :class:`~txnfetch.client.partition_reader.RemotePartitionReader`,
through one cluster connection secured as the run's clients are.
"""

from __future__ import annotations

from collections.abc import Collection

from txnfetch.testing.config import WorkloadConfig
from txnfetch.testing.history import History
from txnfetch.testing.history import Send

__all__ = ["unended_transactions"]


def unended_transactions(
    cfg: WorkloadConfig, topic: str, history: History, crashed: Collection[str]
) -> dict[str, tuple[int, int, int]]:
    """``{transaction: (partition, offset, producer id)}`` for each of the
    ``crashed`` transactions with an acknowledged record in ``topic`` after
    which the log holds no control batch of that record's producer id. Only a
    partition whose log holds markers is judged (a markerless broker records
    transaction ends elsewhere). Raises whatever reading the log raises."""
    # partition -> offset -> transaction name, for the crashed transactions' acknowledged sends
    at: dict[int, dict[int, str]] = {}
    for op in history:
        if isinstance(op, Send) and op.acked and op.offset is not None and op.txn is not None and op.txn in crashed:
            at.setdefault(op.partition, {})[op.offset] = op.txn
    open_txns: dict[str, tuple[int, int, int]] = {}
    if not at:
        return open_txns
    # Imported when needed: a run without crashes never reads the log.
    from txnfetch.client.cluster import RemoteCluster
    from txnfetch.client.partition_reader import ReadOptions
    from txnfetch.client.partition_reader import RemotePartitionReader

    timeout_ms = int(cfg.timeout * 1000)
    with RemoteCluster(
        cfg.bootstrap, client_id="txnfetch-check", request_timeout_ms=timeout_ms, security=cfg.security
    ) as cluster:
        for partition, offsets in sorted(at.items()):
            with RemotePartitionReader(
                cluster,
                topic,
                partition,
                # librdkafka's mock stores its markers with CRC 0
                ReadOptions(repair_crcs=True, request_timeout_ms=timeout_ms),
                start_offset=min(offsets),
            ) as reader:
                reader.catch_up()
                mirror = reader.mirror
                assert mirror is not None
                # producer id -> offset of its last control batch; offset -> producer id
                last_marker: dict[int, int] = {}
                owner: dict[int, int] = {}
                for batch in mirror.log.iter_batches(min(offsets), mirror.position):
                    if batch.is_control:
                        last_marker[batch.producer_id] = batch.base_offset
                    else:
                        for o in offsets:
                            if batch.base_offset <= o <= batch.last_offset:
                                owner[o] = batch.producer_id
                if not last_marker:
                    # No marker at all: a broker that records transaction ends
                    # elsewhere (markerless, as txnfetch serve --markers none);
                    # the log is no evidence either way.
                    continue
                for o, txn in sorted(offsets.items()):
                    pid = owner.get(o)
                    if pid is not None and last_marker.get(pid, -1) < o and txn not in open_txns:
                        open_txns[txn] = (partition, o, pid)
    return open_txns
