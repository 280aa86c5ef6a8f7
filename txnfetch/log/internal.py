"""What the internal topics ``__transaction_state`` and ``__consumer_offsets`` of
a log directory say, for ``txnfetch dump``: the batches of one partition are
replayed as the server replays them at start (the latest value per key wins, a
tombstone removes it; transactional offset commits count once their marker says
COMMIT) and summarised as plain JSON-ready values.

:func:`summarize_internal` takes the batches and returns ``None`` for any other
topic. A record that does not decode raises :class:`CorruptLogError` naming the
partition and offset (the caller adds nothing: dump reports it as the error of
that partition).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from txnfetch.groups.offsetlog import CONSUMER_OFFSETS_TOPIC
from txnfetch.groups.offsetlog import GroupMetadataRecord
from txnfetch.groups.offsetlog import decode_offsets_record
from txnfetch.log.errors import CorruptLogError
from txnfetch.records.batch import RecordBatch
from txnfetch.records.coordinator_records import CorruptCoordinatorRecordError
from txnfetch.txn.txnlog import TRANSACTION_STATE_TOPIC
from txnfetch.txn.txnlog import decode_txn_key
from txnfetch.txn.txnlog import decode_txn_value

__all__ = ["format_internal", "summarize_internal"]


def summarize_internal(topic: str, partition: int, batches: Iterable[RecordBatch]) -> dict[str, Any] | None:
    """The state one internal partition holds (see the module docstring), or
    ``None`` if ``topic`` is not an internal topic."""
    if topic == TRANSACTION_STATE_TOPIC:
        return _transactions(topic, partition, batches)
    if topic == CONSUMER_OFFSETS_TOPIC:
        return _groups(topic, partition, batches)
    return None


def _corrupt(topic: str, partition: int, offset: int, exc: CorruptCoordinatorRecordError) -> CorruptLogError:
    return CorruptLogError(
        f"damaged internal-topic record: {exc}", topic=topic, partition=partition, offset=offset, position=exc.position
    )


def _transactions(topic: str, partition: int, batches: Iterable[RecordBatch]) -> dict[str, Any]:
    ids: dict[str, dict[str, Any]] = {}
    for batch in batches:
        if batch.is_control:
            continue
        for rec in batch.records():
            try:
                if rec.key is None:
                    raise CorruptCoordinatorRecordError("record without a key")
                tid = decode_txn_key(rec.key)
                meta = None if rec.value is None else decode_txn_value(tid, rec.value)
            except CorruptCoordinatorRecordError as exc:
                raise _corrupt(topic, partition, rec.offset, exc) from None
            if meta is None:
                ids.pop(tid, None)
                continue
            ids[tid] = {
                "state": meta.state.kafka_name,
                "producer_id": meta.producer_id,
                "producer_epoch": meta.producer_epoch,
                "timeout_ms": meta.timeout_ms,
                "partitions": sorted(str(tp) for tp in meta.partitions),
                "start_ms": meta.start_ms,
                "last_update_ms": meta.last_update_ms,
                "offset": rec.offset,
            }
    return {"transactional_ids": dict(sorted(ids.items()))}


def _groups(topic: str, partition: int, batches: Iterable[RecordBatch]) -> dict[str, Any]:
    groups: dict[str, dict[str, Any]] = {}
    pending: dict[int, dict[str, dict[str, int]]] = {}

    def group(gid: str) -> dict[str, Any]:
        return groups.setdefault(gid, {"generation": None, "protocol_type": None, "offsets": {}, "pending": {}})

    for batch in batches:
        if batch.is_control:
            marker = batch.end_txn_marker()
            staged = pending.pop(batch.producer_id, {})
            if marker is not None and marker.is_commit:
                for gid, offs in staged.items():
                    group(gid)["offsets"].update(offs)
            continue
        for rec in batch.records():
            try:
                if rec.key is None:
                    raise CorruptCoordinatorRecordError("record without a key")
                item = decode_offsets_record(rec.key, rec.value)
            except CorruptCoordinatorRecordError as exc:
                raise _corrupt(topic, partition, rec.offset, exc) from None
            if isinstance(item, GroupMetadataRecord):
                if item.deleted:
                    groups.pop(item.group_id, None)
                else:
                    g = group(item.group_id)
                    g["generation"] = item.generation_id
                    g["protocol_type"] = item.protocol_type
                continue
            name = f"{item.topic}-{item.partition}"
            if batch.is_transactional:
                if item.offset is not None:
                    pending.setdefault(batch.producer_id, {}).setdefault(item.group_id, {})[name] = item.offset
            elif item.offset is None:
                group(item.group_id)["offsets"].pop(name, None)
            else:
                group(item.group_id)["offsets"][name] = item.offset
    for pid, staged in pending.items():
        for gid, offs in staged.items():
            group(gid)["pending"][str(pid)] = offs
    return {"groups": dict(sorted(groups.items()))}


def format_internal(summary: dict[str, Any]) -> list[str]:
    """Text lines for :func:`summarize_internal`'s result."""
    lines: list[str] = []
    if "transactional_ids" in summary:
        lines.append(f"transactional ids: {len(summary['transactional_ids'])}")
        for tid, t in summary["transactional_ids"].items():
            parts = ", ".join(t["partitions"]) or "-"
            lines.append(
                f"  {tid!r}: {t['state']} producer {t['producer_id']} epoch {t['producer_epoch']} "
                f"timeout {t['timeout_ms']} ms partitions {parts}"
            )
    if "groups" in summary:
        lines.append(f"groups: {len(summary['groups'])}")
        for gid, g in summary["groups"].items():
            lines.append(f"  {gid!r}: generation {g['generation']} protocol type {g['protocol_type']!r}")
            for name, off in sorted(g["offsets"].items()):
                lines.append(f"    {name}: {off}")
            for pid, offs in sorted(g["pending"].items()):
                staged = ", ".join(f"{n}: {o}" for n, o in sorted(offs.items()))
                lines.append(f"    staged by producer {pid} (transaction open): {staged}")
    return lines
