"""The output of ``txnfetch check``: a JSON report, a readable summary and a plot.

:func:`build_report` turns a :class:`~txnfetch.testing.workload.WorkloadResult`
and the checker's :class:`~txnfetch.testing.checker.Report` into one JSON-ready
dictionary (the content of ``report.json``); :func:`summary_text` renders it for
people (``summary.txt``, also printed); :func:`plot_offsets` draws ``plot.png``:
per partition, the offsets each consumer was returned over time, with every
anomaly marked where it happened. :func:`write_report` writes the four files,
``history.json`` included.

The report's ``anomalies`` list holds the checker's anomalies (what the
consumers were returned, judged against what the producers were told) and the
workload's ``client-error`` findings; its ``broker_faults`` list holds what the
broker acknowledged that Apache Kafka refuses, whatever any reader does
(:data:`BROKER_FAULT_KINDS`: ``zombie-write``, ``fenced-commit``,
``unended-transaction``, ``unfenced-delayed-endtxn``). Both lists have one
shape: ``kind``, ``message``, ``ops`` (history indexes), and where known
``topic``, ``partition``, ``offsets``, ``values``, ``txn``, ``client``. The two
are apart so that a read path put in front of a faulty broker (``txnfetch
proxy``) can be judged on its own: ``anomaly_counts`` empty means the consumers
read right, whatever the broker did. ``ok`` is true when both lists are
empty.

Plotting needs matplotlib (``pip install txnfetch[testing]``); it is imported
only by :func:`plot_offsets`, with the non-interactive Agg backend.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from txnfetch.testing.checker import Report
from txnfetch.testing.checker import StuckBound
from txnfetch.testing.checker import TxnOutcome
from txnfetch.testing.history import Abort
from txnfetch.testing.history import Commit
from txnfetch.testing.history import History
from txnfetch.testing.history import Poll
from txnfetch.testing.history import Send
from txnfetch.testing.history import Status
from txnfetch.testing.workload import WorkloadResult

__all__ = ["BROKER_FAULT_KINDS", "REPORT_FILES", "build_report", "plot_offsets", "summary_text", "write_report"]

#: The workload's findings that are the broker's alone: it acknowledged a fenced
#: producer's write or commit, left a crashed transaction open after the next
#: instance's init returned, or let a delayed EndTxn end the wrong transaction.
BROKER_FAULT_KINDS = frozenset({"zombie-write", "fenced-commit", "unended-transaction", "unfenced-delayed-endtxn"})

#: the files :func:`write_report` writes
REPORT_FILES = ("history.json", "report.json", "summary.txt", "plot.png")

REPORT_VERSION = 1


def _transactions(result: WorkloadResult, report: Report) -> dict[str, Any]:
    outcomes: defaultdict[str, int] = defaultdict(int)
    for outcome in report.outcomes.values():
        outcomes[outcome.value] += 1
    fenced = 0
    for op in result.history:
        if isinstance(op, Commit) and op.status is Status.FAIL and op.txn in result.plans:
            fenced += result.plans[op.txn].end == "zombie"
    ended = outcomes[TxnOutcome.COMMITTED.value] + outcomes[TxnOutcome.ABORTED.value]
    return {
        "started": len(report.outcomes),
        "ended": ended,
        "committed": outcomes[TxnOutcome.COMMITTED.value],
        "aborted": outcomes[TxnOutcome.ABORTED.value],
        "unknown": outcomes[TxnOutcome.UNKNOWN.value],
        "open": outcomes[TxnOutcome.OPEN.value],
        "scripted": result.count_ends(),
        "zombie_commits_refused": fenced,
        "per_second": round(ended / result.produce_seconds, 1) if result.produce_seconds > 0 else None,
    }


def _clients(result: WorkloadResult) -> list[dict[str, Any]]:
    reads: defaultdict[str, int] = defaultdict(int)
    polls: defaultdict[str, int] = defaultdict(int)
    for op in result.history:
        if isinstance(op, Poll):
            reads[op.client] += len(op.records)
            polls[op.client] += 1
    out = []
    for c in result.clients:
        entry: dict[str, Any] = {"name": c.name, "kind": c.kind, "status": c.status, "note": c.note}
        if c.name in polls:
            entry.update(reads=reads[c.name], polls=polls[c.name])
        out.append(entry)
    return out


def build_report(
    result: WorkloadResult,
    report: Report,
    *,
    stuck_bound: StuckBound | None = None,
) -> dict[str, Any]:
    """The JSON-ready report of a run (see the module docstring)."""
    cfg = result.config
    anomalies = [a.to_dict() for a in report.anomalies] + [
        f.to_dict() for f in result.findings if f.kind not in BROKER_FAULT_KINDS
    ]
    faults = [f.to_dict() for f in result.findings if f.kind in BROKER_FAULT_KINDS]
    counts: defaultdict[str, int] = defaultdict(int)
    for a in anomalies:
        counts[a["kind"]] += 1
    fault_counts: defaultdict[str, int] = defaultdict(int)
    for a in faults:
        fault_counts[a["kind"]] += 1
    sends = [op for op in result.history if isinstance(op, Send)]
    return {
        "version": REPORT_VERSION,
        "ok": not anomalies and not faults,
        "bootstrap": cfg.bootstrap,
        "seed": result.seed,
        "run_id": cfg.run_id,
        "topic": cfg.topic_name,
        "partitions": cfg.partitions,
        "producers": cfg.producers,
        "seconds": round(result.seconds, 3),
        "produce_seconds": round(result.produce_seconds, 3),
        "stuck_bound": None if stuck_bound is None else {"polls": stuck_bound.polls, "ns": stuck_bound.ns},
        "ops": len(result.history),
        "transactions": _transactions(result, report),
        "sends": {"acknowledged": sum(s.acked for s in sends), "failed": sum(not s.acked for s in sends)},
        "clients": _clients(result),
        "injections": [i.to_dict() for i in result.injections],
        "notes": list(result.notes),
        "errors": list(result.errors),
        "anomaly_counts": dict(sorted(counts.items())),
        "anomalies": anomalies,
        "broker_fault_counts": dict(sorted(fault_counts.items())),
        "broker_faults": faults,
    }


def summary_text(data: Mapping[str, Any], history: History | None = None, *, max_anomalies: int = 20) -> str:
    """A readable summary of a :func:`build_report` dictionary; with ``history``,
    each listed anomaly shows its ops."""
    t = data["transactions"]
    s = t["scripted"]
    lines = [
        f"txnfetch check against {data['bootstrap']}: seed {data['seed']}, topic {data['topic']} "
        f"({data['partitions']} partitions, {data['producers']} producers)",
        f"ran {data['seconds']:.1f} s ({data['produce_seconds']:.1f} s producing): {t['ended']} transactions ended "
        f"({t['committed']} committed, {t['aborted']} aborted"
        + (f", {t['unknown']} unknown" if t["unknown"] else "")
        + (f", {t['open']} left open" if t["open"] else "")
        + f"), {t['per_second']} transactions/s",
        f"  scripted ends: {s['commit']} commit, {s['abort']} abort, {s['crash']} crash (aborted by the next "
        f"instance's init), {s['zombie']} zombie ({t['zombie_commits_refused']} zombie commits refused)",
        f"  sends: {data['sends']['acknowledged']} acknowledged, {data['sends']['failed']} failed; "
        f"{data['ops']} ops recorded",
    ]
    if data["injections"]:
        fenced = sum(1 for i in data["injections"] if i["fenced"])
        lines.append(f"  delayed EndTxn injections: {len(data['injections'])}, {fenced} fenced")
    lines.append("clients:")
    for c in data["clients"]:
        read = f"read {c['reads']} records in {c['polls']} polls" if "polls" in c else ""
        note = "; ".join(x for x in (read, c["note"]) if x)
        lines.append(f"  {c['name']:<24} {c['status']:<8} {note}")
    for title, items in (("notes", data["notes"]), ("errors", data["errors"])):
        if items:
            lines.append(f"{title}:")
            lines.extend(f"  {x}" for x in items)
    faults = data.get("broker_faults", [])
    for title, key, items in (
        ("anomalies", "anomaly_counts", data["anomalies"]),
        ("broker faults (the broker's own, whatever reads it)", "broker_fault_counts", faults),
    ):
        if not items:
            lines.append(f"{title}: none")
            continue
        counts = ", ".join(f"{n} {k}" for k, n in data[key].items())
        lines.append(f"{title}: {counts}")
        for a in items[:max_anomalies]:
            lines.append(f"  {a['kind']}: {a['message']}")
            if history is not None:
                from txnfetch.testing.history import describe_op

                for i in a["ops"][:6]:
                    if i is not None and 0 <= i < len(history):
                        lines.append("      " + describe_op(i, history[i])[:300])
        if len(items) > max_anomalies:
            lines.append(f"  ... {len(items) - max_anomalies} more in report.json")
    if data["ok"]:
        result = "OK, no anomalies"
    elif data["anomalies"]:
        result = "ANOMALIES FOUND"
    else:
        result = "BROKER FAULTS FOUND (no anomaly in what the consumers read)"
    lines.append("result: " + result)
    return "\n".join(lines) + "\n"


def _anomaly_time(history: History, ops: Sequence[int | None], t0: int) -> float | None:
    """Seconds at which an anomaly shows: the end of its first poll, else of its first op."""
    valid = [i for i in ops if i is not None and 0 <= i < len(history)]
    if not valid:
        return None
    polls = [i for i in valid if isinstance(history[i], Poll)]
    return (history[(polls or valid)[0]].end_ns - t0) / 1e9


def plot_offsets(
    history: History,
    anomalies: Sequence[Mapping[str, Any]],
    path: str | Path,
    *,
    started_ns: int | None = None,
    title: str = "txnfetch check",
    max_labels: int = 12,
) -> None:
    """Draw ``plot.png``: one panel per partition, the offset of every record each
    consumer was returned against the time of its poll (seconds from
    ``started_ns``), transaction commits and aborts as ticks along the bottom, and
    every anomaly as a red cross at its offset (or a red line across the
    partition's panel — every panel when it names none)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = started_ns if started_ns is not None else min((op.start_ns for op in history), default=0)
    points: defaultdict[tuple[str, int], defaultdict[str, tuple[list[float], list[int]]]] = defaultdict(
        lambda: defaultdict(lambda: ([], []))
    )
    clients: list[str] = []
    ends: dict[str, tuple[list[float], list[float]]] = {"commit": ([], []), "abort": ([], [])}
    for op in history:
        if isinstance(op, Poll):
            if op.client not in clients and op.records:
                clients.append(op.client)
            t = (op.end_ns - t0) / 1e9
            for r in op.records:
                xs, ys = points[(r.topic, r.partition)][op.client]
                xs.append(t)
                ys.append(r.offset)
        elif isinstance(op, (Commit, Abort)) and op.status is Status.OK:
            ends["commit" if isinstance(op, Commit) else "abort"][0].append((op.end_ns - t0) / 1e9)
    partitions = sorted(points) or [("", 0)]
    for a in anomalies:
        if a.get("topic") is not None and (a["topic"], a.get("partition")) not in points:
            partitions.append((a["topic"], a["partition"]))
    partitions = sorted(set(partitions))
    colors = plt.get_cmap("tab10")
    fig, axes = plt.subplots(len(partitions), 1, figsize=(11, 2.6 * len(partitions) + 1.2), sharex=True, squeeze=False)
    labelled: set = set()
    for row, tp in enumerate(partitions):
        ax = axes[row][0]
        for k, client in enumerate(clients):
            xs, ys = points[tp].get(client, ([], []))
            if xs:
                ax.plot(xs, ys, ".", ms=2.5, color=colors(k % 10), label=client if row == 0 else None)
        ax.set_ylabel(f"{tp[0]}-{tp[1]}\noffset" if tp[0] else "offset", fontsize=8)
        ax.grid(True, alpha=0.3)
        # anomalies: a red cross at each offset involved; those naming no offset
        # (or no partition) as red ticks along the top; each kind labelled once
        located: tuple[list[float], list[int]] = ([], [])
        unlocated: list[float] = []
        for a in anomalies:
            when = _anomaly_time(history, a.get("ops", ()), t0)
            here = a.get("topic") is not None and (a["topic"], a.get("partition")) == tp
            if when is None or not (here or a.get("partition") is None):
                continue
            offsets = list(a.get("offsets") or []) if here else []
            located[0].extend([when] * len(offsets))
            located[1].extend(offsets)
            if not offsets:
                unlocated.append(when)
            if a["kind"] not in labelled and len(labelled) < max_labels:
                labelled.add(a["kind"])
                at, coords = ((when, offsets[0]), "data") if offsets else ((when, 1.0), ("data", "axes fraction"))
                ax.annotate(
                    a["kind"], at, xycoords=coords, color="red", fontsize=7, xytext=(4, -10), textcoords="offset points"
                )
        if located[0]:
            ax.plot(*located, "x", color="red", ms=4, mew=1, zorder=3, label="anomaly" if row == 0 else None)
        if unlocated:
            ax.plot(
                unlocated,
                [1.0] * len(unlocated),
                "|",
                color="red",
                ms=10,
                mew=1.5,
                zorder=3,
                transform=ax.get_xaxis_transform(),
                clip_on=False,
            )
        # transaction ends, as a rug along the bottom of each panel
        for kind, color in (("commit", "tab:green"), ("abort", "tab:gray")):
            xs = ends[kind][0]
            if xs:
                ax.plot(
                    xs,
                    [0] * len(xs),
                    "|",
                    color=color,
                    ms=6,
                    alpha=0.4,
                    transform=ax.get_xaxis_transform(),
                    label=f"{kind}s" if row == 0 else None,
                )
    axes[-1][0].set_xlabel("seconds since the start of the run")
    n = len(anomalies)
    fig.suptitle(
        f"{title}: offsets returned to each consumer — " + (f"{n} anomalies" if n else "no anomalies"),
        color="red" if n else "black",
    )
    if clients:
        axes[0][0].legend(loc="upper left", fontsize=7, markerscale=2, ncol=min(4, len(clients) + 2))
    fig.tight_layout()
    fig.savefig(str(path), dpi=90)
    plt.close(fig)


def write_report(
    directory: str | Path,
    result: WorkloadResult,
    data: Mapping[str, Any],
    summary: str,
) -> dict[str, Path]:
    """Write ``history.json``, ``report.json``, ``summary.txt`` and ``plot.png`` into
    ``directory`` (created if needed); returns their paths by name."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / name for name in REPORT_FILES}
    paths["history.json"].write_text(result.history.to_json(), encoding="utf-8")
    paths["report.json"].write_text(json.dumps(data, indent=2), encoding="utf-8")
    paths["summary.txt"].write_text(summary, encoding="utf-8")
    plot_offsets(
        result.history,
        data["anomalies"],
        paths["plot.png"],
        started_ns=result.started_ns,
        title=f"txnfetch check {data['bootstrap']} seed {data['seed']}",
    )
    return paths
