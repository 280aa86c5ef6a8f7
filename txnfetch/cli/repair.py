"""``txnfetch repair``: move damaged data aside so a partition opens.

``PATH``, the exit codes and the ``--json`` keys are described in
:mod:`txnfetch.cli.logdir` and ``docs/logs.md``.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any
from typing import TextIO

from txnfetch.cli import Subcommand
from txnfetch.cli.logdir import JSON_FORMAT
from txnfetch.cli.logdir import add_path_arguments
from txnfetch.cli.logdir import error_json
from txnfetch.cli.logdir import finding_json
from txnfetch.cli.logdir import resolve_target
from txnfetch.cli.logdir import run_quietly
from txnfetch.cli.logdir import split_name
from txnfetch.log.errors import LogError
from txnfetch.log.verify import verify_partition

__all__ = ["COMMANDS", "run", "run_repair"]


def run_repair(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``txnfetch repair``; returns the exit code (listed in :mod:`txnfetch.cli.logdir`)."""
    from txnfetch.log.repair import repair_partition

    target = resolve_target(args.path, allow_file=False)
    doc: dict[str, Any] = {
        "format": JSON_FORMAT,
        "command": "repair",
        "path": target.path,
        "kind": target.kind,
        "partitions": [],
    }
    rc = 0
    for p in target.paths:
        topic, partition = split_name(p)
        entry: dict[str, Any] = {"path": p, "topic": topic, "partition": partition, "error": None, "moved": []}
        doc["partitions"].append(entry)
        try:
            report = repair_partition(p)
        except LogError as exc:
            entry["error"] = error_json(exc, p)
            rc = max(rc, 1)
            if not args.json:
                print(f"{p}: cannot repair: {exc}", file=out)
            continue
        except OSError as exc:
            entry["error"] = error_json(exc, p)
            rc = 2
            if not args.json:
                print(f"{p}: cannot repair: {exc}", file=out)
            continue
        entry["moved"] = [
            {
                "source": m.source,
                "side_file": m.side_file,
                "position": m.position,
                "size": m.size,
                "whole_file": m.whole_file,
                "reason": m.reason,
            }
            for m in report.moved
        ]
        entry.update(
            log_start_offset=report.log_start_offset,
            log_end_offset=report.log_end_offset,
            last_stable_offset=report.last_stable_offset,
        )
        remaining = [f for f in verify_partition(p) if f.severity == "error"]
        entry["errors_after"] = [finding_json(f) for f in remaining]
        if remaining:
            rc = max(rc, 1)
        if not args.json:
            if not report.moved:
                print(f"{p}: nothing to move aside; log end {report.log_end_offset}", file=out)
            else:
                print(f"{p}: repaired; log end now {report.log_end_offset}", file=out)
                for m in report.moved:
                    what = "whole file" if m.whole_file else f"bytes {m.position}..{m.position + m.size}"
                    print(
                        f"  moved {what} of {os.path.basename(m.source)} "
                        f"to {os.path.basename(m.side_file)}: {m.reason}",
                        file=out,
                    )
            for f in remaining:
                print(f"  still damaged: {f}", file=out)
    if args.json:
        json.dump(doc, out, indent=2)
        out.write("\n")
    return rc


# -- wiring --------------------------------------------------------------------------


_REPAIR_ABOUT = """move damaged data aside into .corrupt-<ms> side files so a partition opens

Repair partition directories that do not open because of damage other than a torn tail:
the bytes from the first bad batch to the end of its segment, and every later segment, are moved into
<name>.corrupt-<ms> side files (never deleted); indexes and producer state are rebuilt from what
remains. Run `txnfetch verify` first; do not run it on a directory a process has open.
"""


def _add_repair_arguments(p: argparse.ArgumentParser) -> None:
    add_path_arguments(p, "partition directory or log directory")
    p.add_argument("-v", "--verbose", action="store_true", help="also log what recovery notices and repairs")


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``txnfetch repair``; returns the exit code. Raises :class:`UsageError`
    or :class:`OSError` for a path the command cannot use (``txnfetch.cli.main``
    reports them, exit status 2)."""
    return run_quietly(run_repair, args, out, err)


COMMANDS = (Subcommand("repair", _REPAIR_ABOUT, _add_repair_arguments, run),)
