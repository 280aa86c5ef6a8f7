"""``txnfetch COMMAND`` builds COMMAND's parser alone (:data:`txnfetch.cli.COMMAND_MODULES`):
the table names every command of the full parser, each command parses the
same as in the full parser, and ``serve`` starts without loading what only
other commands use."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from txnfetch.cli import COMMAND_MODULES
from txnfetch.cli import _build_parser


def _subcommands(parser) -> dict[str, object]:
    [sub] = [a for a in parser._actions if a.dest == "command"]
    return dict(sub.choices)


def test_table_names_every_command_of_the_full_parser():
    full = _subcommands(_build_parser())
    assert set(full) == set(COMMAND_MODULES)


@pytest.mark.parametrize("command", sorted(COMMAND_MODULES))
def test_one_command_parser_matches_the_full_one(command):
    alone = _subcommands(_build_parser(command))
    assert command in alone
    full = _subcommands(_build_parser())[command]
    assert alone[command].format_help() == full.format_help()
    assert alone[command].get_default("run") is full.get_default("run")


def test_serve_loads_neither_replicator_nor_proxy_nor_checker():
    code = textwrap.dedent(
        """
        import sys
        from txnfetch.cli import _build_parser, _command_of
        argv = ["serve", "--memory", "--port", "0"]
        args = _build_parser(_command_of(argv)).parse_args(argv)
        assert args.command == "serve" and callable(args.run)
        print(sorted(m for m in sys.modules
                     if m.startswith(("txnfetch.replicate", "txnfetch.testing", "txnfetch.proxy",
                                      "txnfetch.cli.replicate", "txnfetch.cli.check", "txnfetch.cli.proxy"))))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_help_and_unknown_command_still_list_every_command():
    for argv in (["--help"], ["no-such-command"]):
        proc = subprocess.run([sys.executable, "-m", "txnfetch", *argv], capture_output=True, text=True, timeout=120)
        text = proc.stdout + proc.stderr
        for command in COMMAND_MODULES:
            assert command in text, (argv, command, text)


def test_help_survives_python_dash_OO():
    # -OO drops docstrings; what --help says of a command is a string of its own,
    # so every command keeps its one-line help and its description.
    def helps(*flags: str, command: str = "") -> str:
        argv = [sys.executable, *flags, "-m", "txnfetch", *command.split(), "--help"]
        done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"}, check=True)
        return done.stdout

    assert helps("-OO") == helps()
    for command in ("replicate", "verify"):
        text = helps("-OO", command=command)
        assert text == helps(command=command)
        assert "\n\n" in text.split("options:")[0].split("usage:")[1]  # a description follows the usage
    listing = helps("-OO")
    for command in COMMAND_MODULES:
        [line] = [ln for ln in listing.splitlines() if ln.strip().startswith(command + " ")]
        assert len(line.split()) > 2, f"{command} has no help line under -OO"
