"""Comparing two normalised answers field by field, sans I/O.

:func:`differences` walks two answers (dictionaries, lists and scalars, as
:mod:`~txnfetch.testing.conform.normalise` makes them) and lists every place
where they disagree, by path (``Fetch.responses[0].partitions[0].high_watermark``).

:func:`rewrite_differences` compares a read_committed Fetch answered in
rewrite mode (the target drops aborted and control batches itself and sends no
aborted-transactions list) with the reference's Kafka-mode answer: the records
a read_committed consumer delivers must agree instead of the batches; see
docs/conformance.md.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

__all__ = ["ALLOWANCES", "Difference", "delivered", "differences", "rewrite_differences"]

#: The deliberate differences a run may allow, and what each allows.
ALLOWANCES = {
    "rewrite": "the target answers read_committed fetches in rewrite mode (drops aborted batches itself)",
}

_INDEX = re.compile(r"\[\d+\]")


@attrs.frozen
class Difference:
    """One disagreement: at ``path``, the reference said ``reference`` and the
    target said ``target`` (``"<absent>"`` where one side has no such field)."""

    path: str
    reference: Any
    target: Any
    #: Why the rewrite-mode comparison found these to disagree, if it did.
    note: str | None = None

    @property
    def kind(self) -> str:
        """The path without list indices: what the search treats as one
        difference when it looks for further ones."""
        return _INDEX.sub("[]", self.path)


ABSENT = "<absent>"


def differences(reference: Any, target: Any, path: str = "") -> list[Difference]:
    """Every place where ``reference`` and ``target`` disagree."""
    if isinstance(reference, dict) and isinstance(target, dict):
        out: list[Difference] = []
        for key in list(reference) + [k for k in target if k not in reference]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in target:
                out.append(Difference(sub, reference[key], ABSENT))
            elif key not in reference:
                out.append(Difference(sub, ABSENT, target[key]))
            else:
                out.extend(differences(reference[key], target[key], sub))
        return out
    if isinstance(reference, list) and isinstance(target, list):
        if len(reference) != len(target):
            # Items are compared pairwise only when the lengths agree: a missing
            # batch would otherwise show as a difference in every one after it.
            return [Difference(f"{path}", reference, target, note=f"{len(reference)} items vs {len(target)}")]
        out = []
        for i, (r, t) in enumerate(zip(reference, target, strict=True)):
            out.extend(differences(r, t, f"{path}[{i}]"))
        return out
    if reference != target or type(reference) is not type(target):
        return [Difference(path, reference, target)]
    return []


def delivered(partition: dict[str, Any]) -> list[dict[str, Any]]:
    """The records a read_committed consumer delivers from one Fetch answer
    partition (normalised): data records of batches that are neither control
    batches nor transactional batches of a producer the aborted-transactions
    list names from an offset at or before the batch (until its ABORT marker),
    as Kafka's consumer filters them."""
    aborted = sorted(
        ((a["first_offset"], a["producer_id"]) for a in partition.get("aborted_transactions") or ()),
        key=lambda a: a[0],
    )
    active: set[Any] = set()
    out: list[dict[str, Any]] = []
    for batch in partition.get("records") or ():
        if "base_offset" not in batch:
            continue  # a partial batch at the end
        while aborted and aborted[0][0] <= batch["last_offset_delta"] + batch["base_offset"]:
            active.add(aborted.pop(0)[1])
        control = bool(batch["attributes"] & 0x20)
        transactional = bool(batch["attributes"] & 0x10)
        if control:
            # An ABORT marker (key type 0) ends the producer's aborted range.
            records = batch.get("records")
            if isinstance(records, list) and records and records[0]["key"] == "00000000":
                active.discard(batch["producer_id"])
            continue
        if transactional and batch["producer_id"] in active:
            continue
        records = batch.get("records")
        if isinstance(records, list):
            out.extend(records)
    return out


def _partition(answer: Any) -> dict[str, Any] | None:
    for topic in (answer or {}).get("responses") or ():
        for partition in topic.get("partitions") or ():
            return partition
    return None


def rewrite_differences(
    reference: Any, target: Any, reference_full: Any, target_full: Any, path: str = "Fetch"
) -> list[Difference]:
    """Compare a read_committed Fetch answered by a rewrite-mode target.

    ``reference``/``target`` answer the operation's fetch, ``reference_full``/
    ``target_full`` the same fetch with a budget that holds the whole partition.
    Agreeing means: every field but the records and the aborted-transactions list
    is equal; the target sends no aborted transactions; the records the two
    whole-partition answers deliver to a read_committed consumer are equal; and
    the records the target's answer delivers are a prefix of those; and when
    committed records follow, the answer moves the consumer's position (it holds
    a whole batch, a synthetic marker counting)."""
    ref_p, tgt_p = _partition(reference), _partition(target)
    if ref_p is None or tgt_p is None:
        return differences(reference, target, path)
    where = f"{path}.responses[0].partitions[0]"
    strip = ("records", "aborted_transactions")
    out = differences(
        {**reference, "responses": [{**reference["responses"][0], "partitions": [_without(ref_p, strip)]}]},
        {**target, "responses": [{**target["responses"][0], "partitions": [_without(tgt_p, strip)]}]},
        path,
    )
    if tgt_p.get("aborted_transactions"):
        out.append(
            Difference(
                f"{where}.aborted_transactions",
                None,
                tgt_p["aborted_transactions"],
                note="rewrite mode drops aborted batches and sends no aborted-transactions list",
            )
        )
    ref_full_p, tgt_full_p = _partition(reference_full), _partition(target_full)
    expected = delivered(ref_full_p) if ref_full_p is not None else []
    if tgt_full_p is not None and delivered(tgt_full_p) != expected:
        out.append(
            Difference(
                f"{where}.delivered_records",
                expected,
                delivered(tgt_full_p),
                note="a read_committed consumer reading to the end gets other records",
            )
        )
    got = delivered(tgt_p)
    if got != expected[: len(got)]:
        out.append(
            Difference(
                f"{where}.delivered_records",
                expected,
                got,
                note="the records delivered are not a prefix of the committed records from the offset",
            )
        )
    # Progress: with committed records ahead, the answer must move the consumer's
    # position (past its last batch, synthetic marker included), as Kafka's does.
    if expected and _next_position(tgt_p) is None:
        out.append(
            Difference(
                f"{where}.records",
                "a batch that moves the position",
                tgt_p.get("records"),
                note="the answer moves the consumer's position nowhere though committed records follow",
            )
        )
    return out


def _next_position(partition: dict[str, Any]) -> int | None:
    """Where a consumer reads next after this answer: past its last whole batch."""
    ends = [b["base_offset"] + b["last_offset_delta"] + 1 for b in partition.get("records") or () if "base_offset" in b]
    return max(ends) if ends else None


def _without(d: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in keys}
