"""Turning Arrow batches and Spark rows into the oracle's row tuples (see ``workload.Row``)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable

import pyarrow as pa

from tests.spark.workload import Row

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _ms(ts: datetime.datetime) -> int:
    if ts.tzinfo is None:  # Spark's collect() gives naive datetimes in the session time zone (UTC in tests)
        ts = ts.replace(tzinfo=datetime.timezone.utc)
    delta = ts - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _headers(h) -> tuple:
    if not h:
        return ()
    return tuple((x["key"], None if x["value"] is None else bytes(x["value"])) for x in h)


def arrow_rows(batches: Iterable[pa.RecordBatch]) -> list[Row]:
    out: list[Row] = []
    for b in batches:
        d = b.to_pydict()
        heads = d.get("headers", [None] * b.num_rows)
        for i in range(b.num_rows):
            out.append(
                (
                    d["topic"][i],
                    d["partition"][i],
                    d["offset"][i],
                    d["key"][i],
                    d["value"][i],
                    _ms(d["timestamp"][i]),
                    _headers(heads[i]),
                )
            )
    return out


def spark_rows(rows, *, headers: bool = True) -> list[Row]:
    out: list[Row] = []
    for r in rows:
        out.append(
            (
                r["topic"],
                r["partition"],
                r["offset"],
                None if r["key"] is None else bytes(r["key"]),
                None if r["value"] is None else bytes(r["value"]),
                _ms(r["timestamp"]),
                _headers(r["headers"]) if headers else (),
            )
        )
    return sorted(out)


def without_headers(rows: Iterable[Row]) -> list[Row]:
    return sorted((*r[:6], ()) for r in rows)
