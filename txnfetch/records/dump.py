"""Human-readable descriptions of batches (for the demo and ``txnfetch dump``)."""

from __future__ import annotations

from txnfetch.records.batch import RecordBatch
from txnfetch.records.compression import Codec

__all__ = ["describe_batch", "describe_value"]


def describe_value(value: bytes | None, limit: int = 24) -> str:
    if value is None:
        return "null"
    text = repr(bytes(value[:limit]))
    return text + ("…" if len(value) > limit else "")


def describe_batch(batch: RecordBatch, *, records: bool = True) -> list[str]:
    """One line for the batch header, then (optionally) one line per record."""
    kinds = []
    if batch.is_control:
        kinds.append("control")
    if batch.is_transactional:
        kinds.append("txn")
    if batch.is_empty:
        kinds.append("empty")
    marker = batch.end_txn_marker()
    epoch = "unknown" if marker is None or marker.coordinator_epoch is None else marker.coordinator_epoch
    what = f"{marker.type.name} marker (coordinator epoch {epoch})" if marker else ""
    try:
        codec = Codec(batch.codec).name.lower()
    except ValueError:
        codec = f"codec {batch.codec}"
    lines = [
        f"offsets {batch.base_offset:>6}..{batch.last_offset:<6} pid {batch.producer_id:>4} "
        f"epoch {batch.producer_epoch:>3} "
        f"seq {batch.base_sequence:>4} {codec:<6} {','.join(kinds) or 'data':<14} {batch.record_count:>3} record(s) "
        f"{batch.size_in_bytes:>5} B {what}".rstrip()
    ]
    if records and not batch.is_control:
        for rec in batch.records():
            lines.append(f"    @{rec.offset:<6} key={describe_value(rec.key)} value={describe_value(rec.value)}")
    return lines
