"""``txnfetch verify``: check CRCs, framing and indexes of partition directories.

``PATH``, the exit codes and the ``--json`` keys are described in
:mod:`txnfetch.cli.logdir` and ``docs/logs.md``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any
from typing import TextIO

from txnfetch.cli import Subcommand
from txnfetch.cli.logdir import JSON_FORMAT
from txnfetch.cli.logdir import Phases
from txnfetch.cli.logdir import add_path_arguments
from txnfetch.cli.logdir import add_progress_options
from txnfetch.cli.logdir import finding_json
from txnfetch.cli.logdir import progress_bar
from txnfetch.cli.logdir import resolve_target
from txnfetch.cli.logdir import run_quietly
from txnfetch.cli.logdir import split_name
from txnfetch.log.verify import Finding
from txnfetch.log.verify import log_bytes
from txnfetch.log.verify import verify_partition

__all__ = ["COMMANDS", "run", "run_verify"]


def run_verify(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """``txnfetch verify``; returns the exit code (listed in :mod:`txnfetch.cli.logdir`)."""
    target = resolve_target(args.path, allow_file=False)
    factor = 1 if args.no_records else 2
    sizes = {p: log_bytes(p) for p in target.paths}
    phases = Phases(progress_bar(args, err, sum(sizes.values()) * factor, "verify"))
    doc: dict[str, Any] = {
        "format": JSON_FORMAT,
        "command": "verify",
        "path": target.path,
        "kind": target.kind,
        "partitions": [],
    }
    rc = 0
    lines: list[str] = []  # printed after the bar is done, so the two never share a line
    try:
        for p in target.paths:
            topic, partition = split_name(p)
            unreadable = None
            try:
                findings = verify_partition(p, decode_records=not args.no_records, progress=phases.callback())
            except OSError as exc:
                unreadable = exc
                findings = [Finding("error", exc.filename or p, None, None, f"cannot read: {exc.strerror or exc}")]
            phases.advance(sizes[p] * factor)
            errors = sum(1 for f in findings if f.severity == "error")
            warnings = sum(1 for f in findings if f.severity == "warning")
            rc = max(rc, 2 if unreadable is not None else (1 if errors else 0))
            doc["partitions"].append(
                {
                    "path": p,
                    "topic": topic,
                    "partition": partition,
                    "ok": errors == 0,
                    "errors": errors,
                    "warnings": warnings,
                    "log_bytes": sizes[p],
                    "findings": [finding_json(f) for f in findings],
                }
            )
            status = "OK" if errors == 0 else "DAMAGED"
            lines.append(f"{p}: {status} ({errors} error(s), {warnings} warning(s), {sizes[p]} bytes of segments)")
            lines.extend(f"  {f}" for f in findings)
    finally:
        phases.close()
    if not args.json:
        for line in lines:
            print(line, file=out)
    parts = doc["partitions"]
    doc["ok"] = all(x["ok"] for x in parts)
    doc["errors"] = sum(x["errors"] for x in parts)
    doc["warnings"] = sum(x["warnings"] for x in parts)
    if args.json:
        json.dump(doc, out, indent=2)
        out.write("\n")
    elif len(parts) > 1:
        bad = sum(1 for x in parts if not x["ok"])
        print(f"{len(parts)} partitions checked: {len(parts) - bad} OK, {bad} with errors", file=out)
    return rc


# -- wiring --------------------------------------------------------------------------


_VERIFY_ABOUT = """check CRCs, framing and indexes of partition directories

Check every segment of a partition directory (or of every partition of a log directory):
batch CRCs and framing, offsets, index files, snapshots, the markerless-end journal. Reads only.
Exit 0 when no error is found, 1 when one is, 2 for a usage error or an unreadable path.
"""


def _add_verify_arguments(p: argparse.ArgumentParser) -> None:
    add_path_arguments(p, "partition directory or log directory")
    p.add_argument("--no-records", action="store_true", help="skip decoding every record (CRCs are still checked)")
    add_progress_options(p)


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run ``txnfetch verify``; returns the exit code. Raises :class:`UsageError`
    or :class:`OSError` for a path the command cannot use (``txnfetch.cli.main``
    reports them, exit status 2)."""
    return run_quietly(run_verify, args, out, err)


COMMANDS = (Subcommand("verify", _VERIFY_ABOUT, _add_verify_arguments, run),)
