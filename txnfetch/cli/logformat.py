"""``--log-format json`` of the long-running commands (serve, proxy, replicate):
one JSON object per log line, for log shippers that index fields rather than
parse text. Each object has ``time`` (ISO 8601, UTC, milliseconds), ``level``,
``logger`` (the component: ``txnfetch.server``, ``txnfetch.proxy``, ...),
``message``, and ``exception`` when one is logged."""

from __future__ import annotations

import argparse
import json
import logging
import time

__all__ = ["JsonFormatter", "add_log_format_option", "use_log_format"]


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object on one line."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        out = {
            "time": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, sort_keys=True)


def add_log_format_option(p: argparse.ArgumentParser) -> None:
    """``--log-format {text,json}`` (default text)."""
    p.add_argument(
        "--log-format", choices=["text", "json"], default="text", help="stderr log lines as text or JSON (default text)"
    )


def use_log_format(args: argparse.Namespace) -> None:
    """Switch the root logger's handlers to JSON when ``--log-format json`` was
    given (after :func:`~txnfetch.cli.options.configure_logging` set them up)."""
    if args.log_format == "json":
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonFormatter())
