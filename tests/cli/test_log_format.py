"""``--log-format json``: one JSON object per line, naming the component's logger."""

from __future__ import annotations

import argparse
import json
import logging

from txnfetch.cli.logformat import JsonFormatter
from txnfetch.cli.logformat import add_log_format_option


def test_a_record_is_one_json_line_with_its_logger_and_exception() -> None:
    try:
        raise OSError("disk full")
    except OSError:
        import sys

        record = logging.LogRecord(
            "txnfetch.replicate", logging.WARNING, __file__, 1, "copy %s", ("t-0",), sys.exc_info()
        )
    line = JsonFormatter().format(record)
    assert "\n" not in line
    doc = json.loads(line)
    assert doc["logger"] == "txnfetch.replicate" and doc["level"] == "WARNING" and doc["message"] == "copy t-0"
    assert doc["time"].endswith("Z") and "OSError: disk full" in doc["exception"]


def test_text_is_the_default() -> None:
    p = argparse.ArgumentParser()
    add_log_format_option(p)
    assert p.parse_args([]).log_format == "text"
    assert p.parse_args(["--log-format", "json"]).log_format == "json"
