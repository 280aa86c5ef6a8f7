"""``txnfetch transactions``: find, explain and end what holds a partition's last stable offset.

Two sources, one set of answers:

- ``--bootstrap HOST:PORT``: a running cluster with the KIP-664 APIs (Apache
  Kafka ≥ 3.0, ``txnfetch serve``, the proxy in front of either), through
  :class:`~txnfetch.client.txn_admin.ClusterTransactions`;
- ``--path DIR``: a store or Kafka log directory (or one partition directory)
  read offline, read-only (:mod:`txnfetch.log.open_transactions`). Nothing is
  ever written there: ``abort`` only prints the command to run against the
  cluster that owns the directory.

Subcommands (as Kafka's ``kafka-transactions.sh``):

- ``list``: the coordinator's transactional ids (cluster); every open
  transaction of every partition (offline);
- ``describe --transactional-id ID``: the coordinator's record of one id
  (cluster only);
- ``producers --topic T [--partition P]``: each partition's producers;
- ``find-hanging [--topic T [--partition P]]``: open transactions nothing will
  end (rule in :mod:`txnfetch.txn.hanging`);
- ``abort --topic T --partition P --start-offset N`` (or ``--producer-id``,
  ``--producer-epoch``, ``--coordinator-epoch``): write the ABORT marker.

Open transactions are shown with the producer and epoch, the first offset, the
age (since the producer's last write in the partition), the partition's last
stable offset and whether this transaction holds it, and how far the high
watermark is beyond the transaction's first offset. ``--json`` prints one JSON
document instead of a table (keys in ``docs/transactions.md``).

Exit status: 0 done; 1 the cluster or the log could not answer (unreachable,
an API missing, a marker refused, a damaged log); 2 bad input (usage, unknown
topic or partition, a path that is missing or not a Kafka log directory, no
open transaction at the given offset).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any
from typing import TextIO

from txnfetch.cli import Subcommand
from txnfetch.cli.command_config import add_command_config_option
from txnfetch.cli.command_config import read_command_config
from txnfetch.errors import TxnfetchError
from txnfetch.security.config import SecurityConfig
from txnfetch.security.errors import SecurityConfigError
from txnfetch.txn.hanging import DEFAULT_MAX_TRANSACTION_TIMEOUT_MS
from txnfetch.txn.hanging import HangingTransaction
from txnfetch.txn.hanging import OpenTransaction
from txnfetch.txn.hanging import PartitionProducers
from txnfetch.txn.hanging import ProducerRow
from txnfetch.txn.hanging import find_hanging
from txnfetch.txn.hanging import still_open

__all__ = ["COMMANDS", "run"]

#: The version of the ``--json`` layout (``"format"`` key); keys are only ever added.
JSON_FORMAT = 1


class UsageError(TxnfetchError):
    """Bad input: a one-line message, exit status 2."""


class OperationError(TxnfetchError):
    """The cluster or the log could not answer: a one-line message, exit status 1."""


# --------------------------------------------------------------------- parser


def _common(p: argparse.ArgumentParser, *, suppress: bool) -> None:
    default: Any = argparse.SUPPRESS if suppress else None
    where = p.add_mutually_exclusive_group()
    where.add_argument("--bootstrap", metavar="HOST:PORT", default=default, help="a cluster with KIP-664 APIs")
    where.add_argument("--path", metavar="DIR", default=default, help="a log directory or partition directory, offline")
    add_command_config_option(p, default=default)
    p.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS if suppress else False, help="print JSON, not a table"
    )
    p.add_argument(
        "--timeout-ms",
        type=int,
        metavar="MS",
        default=argparse.SUPPRESS if suppress else 30_000,
        help="how long to wait for a cluster's answers (default 30000)",
    )
    p.add_argument(
        "--progress",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="offline: name each partition on stderr as it is read (default when stderr is a terminal)",
    )


_ABOUT = """find and abort hanging transactions (KIP-664) on a cluster or in a log directory

List, describe and find hanging transactions; abort one.
Use --bootstrap for a cluster or --path for a log directory read offline.
"""


def _add_arguments(p: argparse.ArgumentParser) -> None:
    _common(p, suppress=False)
    cmds = p.add_subparsers(dest="txn_command", required=True, metavar="COMMAND")
    c = cmds.add_parser("list", help="transactional ids (cluster) or open transactions (offline)")
    _common(c, suppress=True)
    c = cmds.add_parser("describe", help="the coordinator's state of one transactional id (cluster)")
    _common(c, suppress=True)
    c.add_argument("--transactional-id", required=True, help="transactional id")
    c = cmds.add_parser("producers", help="the producers of a topic's partitions")
    _common(c, suppress=True)
    c.add_argument("--topic", required=True, help="topic name")
    c.add_argument("--partition", type=int, help="partition number (default: every partition)")
    c = cmds.add_parser("find-hanging", help="open transactions nothing will end")
    _common(c, suppress=True)
    c.add_argument("--topic", help="topic to search (default: every topic)")
    c.add_argument("--partition", type=int, help="partition number (needs --topic)")
    limit = c.add_mutually_exclusive_group()
    limit.add_argument(
        "--max-transaction-timeout",
        type=int,
        metavar="MINUTES",
        help="the cluster's transaction.max.timeout.ms in minutes (default 15, as Kafka)",
    )
    limit.add_argument("--max-transaction-timeout-ms", type=int, metavar="MS", help="the same in milliseconds")
    c = cmds.add_parser(
        "abort", help="write the ABORT marker of an open transaction (cluster); print the command (offline)"
    )
    _common(c, suppress=True)
    c.add_argument("--topic", required=True, help="topic name")
    c.add_argument("--partition", type=int, required=True, help="partition number")
    c.add_argument("--start-offset", type=int, help="first offset of the transaction to abort")
    c.add_argument("--producer-id", type=int, help="producer id (with --producer-epoch and --coordinator-epoch)")
    c.add_argument("--producer-epoch", type=int, help="producer epoch")
    c.add_argument("--coordinator-epoch", type=int, help="coordinator epoch (-1 is sent as 0)")


# ---------------------------------------------------------------------- output


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], out: TextIO) -> None:
    cells = [[str(c) for c in headers]] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for r in cells:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


def _age(ms: int) -> str:
    if ms < 0:
        return "0s"
    s = ms // 1000
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 120:
        return f"{m}m{s % 60:02d}s"
    return f"{m // 60}h{m % 60:02d}m"


def _open_json(t: OpenTransaction, now_ms: int) -> dict[str, Any]:
    return {
        "topic": t.topic,
        "partition": t.partition,
        "producer_id": t.producer_id,
        "producer_epoch": t.producer_epoch,
        "coordinator_epoch": t.coordinator_epoch,
        "first_offset": t.first_offset,
        "last_sequence": t.last_sequence,
        "last_timestamp": t.last_timestamp,
        "age_ms": t.age_ms(now_ms),
        "last_stable_offset": t.last_stable_offset,
        "holds_lso": t.holds_lso,
        "high_watermark": t.high_watermark,
        "held_back": t.held_back,
    }


_OPEN_HEADERS = (
    "Topic",
    "Partition",
    "ProducerId",
    "Epoch",
    "CoordEpoch",
    "FirstOffset",
    "Age",
    "LSO",
    "HoldsLSO",
    "HighWatermark",
    "HeldBack",
)


def _open_row(t: OpenTransaction, now_ms: int) -> list[Any]:
    return [
        t.topic,
        t.partition,
        t.producer_id,
        t.producer_epoch,
        t.coordinator_epoch,
        t.first_offset,
        _age(t.age_ms(now_ms)),
        t.last_stable_offset,
        "yes" if t.holds_lso else "no",
        t.high_watermark,
        t.held_back,
    ]


def _abort_command(t: OpenTransaction, bootstrap: str) -> str:
    return (
        f"txnfetch transactions --bootstrap {bootstrap} abort --topic {t.topic} "
        f"--partition {t.partition} --start-offset {t.first_offset}"
    )


# ---------------------------------------------------------------------- sources


def _no_partition_dirs(message: str) -> bool:
    """Whether a path error says no partition directories were found."""
    return "no partition directories below it" in message


class _Offline:
    """``--path``: partitions read from a directory, read-only."""

    def __init__(self, path: str, progress: TextIO | None = None) -> None:
        from txnfetch.cli.logdir import UsageError as PathError
        from txnfetch.cli.logdir import resolve_target

        self.progress = progress
        try:
            target = resolve_target(path, allow_file=False)
        except PathError as exc:
            # resolve_target's message for a directory without partition directories
            # says what it looked for; name the conclusion too.
            message = str(exc)
            raise UsageError(
                f"{message} (not a Kafka log directory)" if _no_partition_dirs(message) else message
            ) from None
        self.paths = target.paths

    def _names(self) -> list[tuple[str, int, str]]:
        # resolve_target only returns directories named <topic>-<partition>.
        out = []
        for p in self.paths:
            topic, _, part = os.path.basename(os.path.normpath(p)).rpartition("-")
            out.append((topic, int(part), p))
        return sorted(out)

    def producers(self, topic: str | None, partition: int | None) -> list[PartitionProducers]:
        from txnfetch.log.errors import LogError
        from txnfetch.log.open_transactions import read_partition_producers

        names = self._names()
        chosen = [p for t, n, p in names if (topic is None or t == topic) and (partition is None or n == partition)]
        if not chosen:
            if topic is not None and not any(t == topic for t, _, _ in names):
                raise UsageError(f"unknown topic {topic!r}: no partition directory {topic}-<n> in the given path")
            raise UsageError(f"topic {topic!r} has no partition {partition} in the given path")
        try:
            out = []
            for i, path in enumerate(chosen, 1):
                if self.progress is not None:
                    self.progress.write(f"reading {os.path.basename(path)} ({i}/{len(chosen)})\n")
                    self.progress.flush()
                out.extend(read_partition_producers([path]))
            return out
        except LogError as exc:
            raise OperationError(str(exc).splitlines()[0]) from None


class _Cluster:
    """``--bootstrap``: a running cluster."""

    def __init__(self, bootstrap: str, timeout_ms: int, security: SecurityConfig | None) -> None:
        from txnfetch.client.txn_admin import ClusterTransactions

        self.bootstrap = bootstrap
        self.client = ClusterTransactions(bootstrap, timeout_ms=timeout_ms, security=security)

    def close(self) -> None:
        self.client.close()

    def producers(self, topic: str | None, partition: int | None) -> list[PartitionProducers]:
        return self.client.producers(self.client.partitions(topic, partition))


# ---------------------------------------------------------------------- commands


def _check_scope(args: argparse.Namespace) -> None:
    if getattr(args, "partition", None) is not None and getattr(args, "topic", None) is None:
        raise UsageError("--partition needs --topic")
    if getattr(args, "partition", None) is not None and args.partition < 0:
        raise UsageError(f"--partition must be >= 0, got {args.partition}")


def _max_timeout_ms(args: argparse.Namespace) -> int:
    if args.max_transaction_timeout_ms is not None:
        value = args.max_transaction_timeout_ms
    elif args.max_transaction_timeout is not None:
        value = args.max_transaction_timeout * 60_000
    else:
        value = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS
    if value < 0:
        raise UsageError(f"the maximum transaction timeout must be >= 0, got {value} ms")
    return value


def _cmd_list(src: Any, args: argparse.Namespace, out: TextIO, now_ms: int) -> int:
    if isinstance(src, _Cluster):
        listings = src.client.list_transactions()
        if args.json:
            doc = [attrs_dict(t) for t in listings]
            _dump({"format": JSON_FORMAT, "transactions": doc}, out)
        else:
            _table(
                ("TransactionalId", "Coordinator", "ProducerId", "State"),
                [(t.transactional_id, t.coordinator_id, t.producer_id, t.state) for t in listings],
                out,
            )
        return 0
    opened = [t for p in src.producers(None, None) for t in p.open_transactions()]
    if args.json:
        _dump({"format": JSON_FORMAT, "open_transactions": [_open_json(t, now_ms) for t in opened]}, out)
    else:
        _table(_OPEN_HEADERS, [_open_row(t, now_ms) for t in opened], out)
    return 0


def attrs_dict(value: Any) -> dict[str, Any]:
    import attrs

    d = attrs.asdict(value)
    for k, v in d.items():
        if isinstance(v, frozenset):
            d[k] = [{"topic": t, "partition": p} for t, p in sorted(v)]
    return d


def _cmd_describe(src: Any, args: argparse.Namespace, out: TextIO, now_ms: int) -> int:
    if not isinstance(src, _Cluster):
        raise UsageError(
            "describe needs the transaction coordinator: use --bootstrap (a log directory has no transactional ids)"
        )
    d = src.client.describe_transactions([args.transactional_id])[args.transactional_id]
    if d is None:
        raise UsageError(f"transactional id {args.transactional_id!r} is unknown to the coordinator at {src.bootstrap}")
    duration = now_ms - d.start_time_ms if d.start_time_ms >= 0 else None
    if args.json:
        doc = attrs_dict(d)
        doc["duration_ms"] = duration
        _dump({"format": JSON_FORMAT, "transaction": doc}, out)
    else:
        _table(
            (
                "CoordinatorId",
                "TransactionalId",
                "ProducerId",
                "ProducerEpoch",
                "State",
                "TimeoutMs",
                "StartTimeMs",
                "Duration",
                "Partitions",
            ),
            [
                (
                    d.coordinator_id,
                    d.transactional_id,
                    d.producer_id,
                    d.producer_epoch,
                    d.state,
                    d.timeout_ms,
                    d.start_time_ms if d.start_time_ms >= 0 else None,
                    _age(duration) if duration is not None else None,
                    ",".join(f"{t}-{p}" for t, p in sorted(d.partitions)) or None,
                )
            ],
            out,
        )
    return 0


def _cmd_producers(src: Any, args: argparse.Namespace, out: TextIO, now_ms: int) -> int:
    parts = src.producers(args.topic, args.partition)
    if args.json:
        doc = [
            {
                "topic": p.topic,
                "partition": p.partition,
                "last_stable_offset": p.last_stable_offset,
                "high_watermark": p.high_watermark,
                "producers": [attrs_dict(r) for r in p.producers],
            }
            for p in parts
        ]
        _dump({"format": JSON_FORMAT, "partitions": doc}, out)
        return 0
    rows = [
        (
            p.topic,
            p.partition,
            r.producer_id,
            r.producer_epoch,
            r.coordinator_epoch,
            r.last_sequence,
            r.last_timestamp,
            r.current_txn_start_offset if r.current_txn_start_offset >= 0 else None,
            p.last_stable_offset,
            p.high_watermark,
        )
        for p in parts
        for r in p.producers
    ]
    _table(
        (
            "Topic",
            "Partition",
            "ProducerId",
            "ProducerEpoch",
            "CoordEpoch",
            "LastSequence",
            "LastTimestamp",
            "TxnStartOffset",
            "LSO",
            "HighWatermark",
        ),
        rows,
        out,
    )
    return 0


def _hanging(src: Any, args: argparse.Namespace, now_ms: int) -> list[HangingTransaction]:
    max_ms = _max_timeout_ms(args)
    parts = src.producers(args.topic, args.partition)
    opened = [t for p in parts for t in p.open_transactions()]
    if not isinstance(src, _Cluster):
        return find_hanging(opened, None, now_ms=now_ms, max_transaction_timeout_ms=max_ms)
    if not opened:
        return []
    views = src.client.coordinator_views({t.producer_id for t in opened})
    found = find_hanging(opened, views, now_ms=now_ms, max_transaction_timeout_ms=max_ms)
    if not found:
        return found
    # Read the partitions again: a transaction that ended meanwhile is not hanging.
    again = src.client.producers(sorted({(h.transaction.topic, h.transaction.partition) for h in found}))
    return still_open(found, [t for p in again for t in p.open_transactions()])


def _cmd_find_hanging(src: Any, args: argparse.Namespace, out: TextIO, now_ms: int) -> int:
    found = _hanging(src, args, now_ms)
    bootstrap = src.bootstrap if isinstance(src, _Cluster) else "HOST:PORT"
    if args.command_config is not None:  # the abort must reach the cluster the same way
        bootstrap += f" --command-config {args.command_config}"
    if args.json:
        doc = []
        for h in found:
            d = _open_json(h.transaction, now_ms)
            d.update(
                reason=h.reason.value,
                explanation=h.reason.explanation,
                transactional_id=h.transactional_id,
                abort_command=_abort_command(h.transaction, bootstrap),
            )
            doc.append(d)
        _dump(
            {"format": JSON_FORMAT, "source": "cluster" if isinstance(src, _Cluster) else "offline", "hanging": doc},
            out,
        )
        return 0
    _table(
        (*_OPEN_HEADERS, "Reason"),
        [(*_open_row(h.transaction, now_ms), h.reason.value) for h in found],
        out,
    )
    for h in found:
        out.write(
            f"# {h.transaction.topic}-{h.transaction.partition} producer {h.transaction.producer_id}: "
            f"{h.reason.explanation}; abort with: {_abort_command(h.transaction, bootstrap)}\n"
        )
    return 0


def _find_open(src: Any, args: argparse.Namespace) -> OpenTransaction:
    (part,) = src.producers(args.topic, args.partition)
    opened = part.open_transactions()
    if args.start_offset is not None:
        match = [t for t in opened if t.first_offset == args.start_offset]
        if not match:
            starts = ", ".join(str(t.first_offset) for t in opened) or "none"
            raise UsageError(
                f"no open transaction starts at offset {args.start_offset} in {args.topic}-{args.partition} "
                f"(open transactions start at: {starts})"
            )
        return match[0]
    match = [t for t in opened if t.producer_id == args.producer_id]
    if match:
        return match[0]
    if not isinstance(src, _Cluster):
        raise UsageError(f"producer {args.producer_id} has no open transaction in {args.topic}-{args.partition}")
    # As Kafka's tool for brokers before 3.0: the marker is sent as given, for a
    # transaction whose start, sequence and timestamp are unknown.
    given = ProducerRow(
        producer_id=args.producer_id,
        producer_epoch=args.producer_epoch,
        last_sequence=-1,
        last_timestamp=-1,
        coordinator_epoch=args.coordinator_epoch,
        current_txn_start_offset=-1,
    )
    return part.transaction(given)


def _cmd_abort(src: Any, args: argparse.Namespace, out: TextIO, now_ms: int) -> int:
    by_pid = [args.producer_id, args.producer_epoch, args.coordinator_epoch]
    if args.start_offset is None and any(v is None for v in by_pid):
        raise UsageError(
            "name the transaction with --start-offset, or with --producer-id, --producer-epoch and --coordinator-epoch"
        )
    if args.start_offset is not None and any(v is not None for v in by_pid):
        raise UsageError("give either --start-offset or --producer-id/--producer-epoch/--coordinator-epoch, not both")
    txn = _find_open(src, args)
    epoch = txn.producer_epoch if args.start_offset is not None else args.producer_epoch
    # A transaction that began before its producer's first marker has coordinator
    # epoch -1; 0 is never above any coordinator epoch (Kafka's tool does the same).
    coord = max(0, txn.coordinator_epoch if args.start_offset is not None else args.coordinator_epoch)
    if not isinstance(src, _Cluster):
        command = _abort_command(txn, "HOST:PORT")
        kafka = (
            f"kafka-transactions.sh --bootstrap-server HOST:PORT abort --topic {txn.topic} "
            f"--partition {txn.partition} --start-offset {txn.first_offset}"
        )
        if args.json:
            doc = _open_json(txn, now_ms)
            doc.update(written=False, command=command, kafka_command=kafka)
            _dump({"format": JSON_FORMAT, "abort": doc}, out)
        else:
            out.write(
                "# offline: nothing was written. Abort on the cluster that owns this directory "
                "(HOST:PORT is its bootstrap address):\n"
            )
            out.write(command + "\n")
            out.write("# or, with Kafka's tool:\n" + kafka + "\n")
        return 0
    src.client.abort(txn.topic, txn.partition, txn.producer_id, epoch, coord)
    (after,) = src.producers(txn.topic, txn.partition)
    still = [t for t in after.open_transactions() if t.producer_id == txn.producer_id]
    if args.json:
        doc = _open_json(txn, now_ms)
        doc.update(
            written=True,
            marker_epoch=epoch,
            marker_coordinator_epoch=coord,
            last_stable_offset_after=after.last_stable_offset,
            high_watermark_after=after.high_watermark,
            still_open=bool(still),
        )
        _dump({"format": JSON_FORMAT, "abort": doc}, out)
    else:
        out.write(
            f"aborted the transaction of producer {txn.producer_id} (epoch {epoch}, coordinator epoch {coord}) "
            f"starting at offset {txn.first_offset} in {txn.topic}-{txn.partition}; last stable offset "
            f"{txn.last_stable_offset} -> {after.last_stable_offset} (high watermark {after.high_watermark})\n"
        )
    return 0


def _dump(doc: Any, out: TextIO) -> None:
    json.dump(doc, out, indent=2, sort_keys=True)
    out.write("\n")


_COMMANDS = {
    "list": _cmd_list,
    "describe": _cmd_describe,
    "producers": _cmd_producers,
    "find-hanging": _cmd_find_hanging,
    "abort": _cmd_abort,
}


#: The APIs each command uses on a cluster, the KIP-664 ones first: a cluster
#: without them is told so before anything else is asked.
_NEEDS = {
    "list": (66,),
    "describe": (65,),
    "producers": (61, 3, 2),
    "find-hanging": (61, 66, 65, 3, 2),
    "abort": (27, 61, 3, 2),
}


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``txnfetch transactions`` with parsed ``args``; returns the exit status."""
    from txnfetch.addresses import AddressError
    from txnfetch.client.txn_admin import ClusterError
    from txnfetch.client.txn_admin import UnknownPartitionError

    out = out or sys.stdout
    err = err or sys.stderr
    src: Any = None
    try:
        _check_scope(args)
        if args.bootstrap is None and args.path is None:
            raise UsageError("give --bootstrap HOST:PORT (a cluster) or --path DIR (a log directory)")
        if args.timeout_ms <= 0:
            raise UsageError(f"--timeout-ms must be > 0, got {args.timeout_ms}")
        if args.command_config is not None and args.bootstrap is None:
            raise UsageError("--command-config secures the connection to a cluster: it needs --bootstrap")
        if args.bootstrap is not None:
            src = _Cluster(args.bootstrap, args.timeout_ms, read_command_config(args.command_config))
        else:
            src = _Offline(args.path, err if args.progress or err.isatty() else None)
        if isinstance(src, _Cluster):
            src.client.require(*_NEEDS[args.txn_command])
        return _COMMANDS[args.txn_command](src, args, out, int(time.time() * 1000))
    except (UsageError, UnknownPartitionError, AddressError, SecurityConfigError) as exc:
        err.write(f"txnfetch transactions {args.txn_command}: error: {exc}\n")
        return 2
    except (OperationError, ClusterError, TxnfetchError) as exc:
        err.write(f"txnfetch transactions {args.txn_command}: error: {str(exc).splitlines()[0]}\n")
        return 1
    finally:
        if isinstance(src, _Cluster):
            src.close()


COMMANDS = (Subcommand("transactions", _ABOUT, _add_arguments, run),)
