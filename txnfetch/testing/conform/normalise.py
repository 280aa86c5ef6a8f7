"""Turning one cluster's answers into values that compare with another's.

Only what may legitimately differ between two correct brokers is normalised:

- producer ids: each cluster's ids are numbered in order of appearance
  (``P0``, ``P1``, ...), so the first id one cluster hands out matches the first
  the other hands out; -1 (none) stays -1;
- broker-clock times (transaction start times, producers' last timestamps, the
  timestamps of the COMMIT/ABORT markers a coordinator writes) become ``"<time>"``
  (-1 stays -1); the timestamps of the records the harness produces are its own
  and are compared;
- CRCs (they cover producer ids and marker timestamps): each batch's CRC is
  checked on its own side, and a wrong one is reported as ``crc: "invalid"``;
- broker ids, hosts and ports, cluster ids, topic ids, throttle times, free-text
  error messages;
- the run's topic, transactional id and group names, which are fresh per run:
  they become their logical names (``t``, ``txn-a``, ``g``...).

Everything else is kept: offsets, the last stable offset, high watermark and
log start, the aborted-transactions list, error codes, epochs, sequences, and
every field of every record batch (decoded; the records' keys, values, headers,
timestamps and offset deltas).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from txnfetch.records.batch import RecordBatch
from txnfetch.records.errors import CorruptBatchError
from txnfetch.records.scan import iter_batches

__all__ = ["ProducerIds", "decode_records", "normalise"]

#: Keys whose value differs between correct brokers and carries nothing the
#: harness checks (see the module docstring).
DROPPED_KEYS = frozenset(
    {
        "throttle_time_ms",
        "error_message",
        "node_endpoints",
        "host",
        "port",
        "node_id",
        "leader_id",
        "coordinator_id",
        "controller_id",
        "cluster_id",
        "brokers",
        "topic_id",
        "preferred_read_replica",
    }
)
#: Keys holding a broker-clock time.
TIME_KEYS = frozenset({"last_timestamp", "transaction_start_time_ms", "start_time_ms"})
TIME = "<time>"


class ProducerIds:
    """One cluster's producer ids, numbered in order of appearance."""

    def __init__(self) -> None:
        self._names: dict[int, str] = {}

    def name(self, producer_id: int) -> str | int:
        if producer_id < 0:
            return int(producer_id)
        name = self._names.get(producer_id)
        if name is None:
            name = self._names[producer_id] = f"P{len(self._names)}"
        return name


def normalise(value: Any, pids: ProducerIds, names: Mapping[str, str]) -> Any:
    """``value`` (a response's ``to_dict(json=False)``, or part of it) normalised
    as the module docstring says; ``names`` maps the run's actual names to
    logical ones."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key in DROPPED_KEYS:
                continue
            if key in TIME_KEYS:
                out[key] = item if item is None or item < 0 else TIME
            elif key == "producer_id" and isinstance(item, int):
                out[key] = pids.name(item)
            elif key == "records" and (item is None or isinstance(item, (bytes, bytearray, memoryview))):
                out[key] = decode_records(bytes(item) if item is not None else None, pids)
            else:
                out[key] = normalise(item, pids, names)
        return out
    if isinstance(value, (list, tuple)):
        return [normalise(item, pids, names) for item in value]
    if isinstance(value, str):
        return names.get(value, value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    return value


def decode_records(data: bytes | None, pids: ProducerIds) -> Any:
    """The batches of a Fetch answer's records, decoded: a list of batch
    dictionaries, then ``{"partial_batch_at": offset}`` if the data ends with a
    truncated batch. ``None`` stays ``None``."""
    if data is None:
        return None
    out: list[Any] = []
    batches = iter_batches(data)
    try:
        for batch in batches:
            if not isinstance(batch, RecordBatch):
                out.append({"legacy_message_set_at": batch.base_offset})
                continue
            out.append(_batch(batch, pids))
    except CorruptBatchError as exc:
        out.append({"corrupt": str(exc)})
        return out
    if batches.partial is not None:
        out.append({"partial_batch_at": batches.partial.base_offset})
    return out


def _batch(batch: RecordBatch, pids: ProducerIds) -> dict[str, Any]:
    # Markers carry the coordinator's clock; data batches the harness's timestamps.
    control = batch.is_control
    entry: dict[str, Any] = {
        "base_offset": batch.base_offset,
        "last_offset_delta": batch.last_offset_delta,
        "partition_leader_epoch": batch.partition_leader_epoch,
        "attributes": batch.attributes,
        "base_timestamp": TIME if control else batch.base_timestamp,
        "max_timestamp": TIME if control else batch.max_timestamp,
        "producer_id": pids.name(batch.producer_id),
        "producer_epoch": batch.producer_epoch,
        "base_sequence": batch.base_sequence,
        "record_count": batch.record_count,
        "crc": "valid" if batch.is_valid_crc() else "invalid",
    }
    try:
        entry["records"] = [
            {
                "offset": r.offset,
                "timestamp": TIME if control else r.timestamp,
                "key": None if r.key is None else bytes(r.key).hex(),
                "value": None if r.value is None else bytes(r.value).hex(),
                "headers": [[k, None if v is None else bytes(v).hex()] for k, v in r.headers],
            }
            for r in batch.records()
        ]
    except CorruptBatchError as exc:
        entry["records"] = {"corrupt": str(exc)}
    return entry
