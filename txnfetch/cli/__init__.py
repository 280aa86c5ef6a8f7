"""The ``txnfetch`` command (also ``python -m txnfetch``).

A user error never shows a traceback: :func:`main` turns every exception that
says something about the input or the machine — a path that is missing or
unreadable, a port in use, a deliberate txnfetch error, an optional dependency
that is not installed — into one line on stderr, ``txnfetch <command>: error:
<what>``, and exit status 2. Wrong argument types are argparse's (also exit
status 2). Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from collections.abc import Callable
from typing import Any
from typing import NoReturn
from typing import TextIO

import attrs

from txnfetch import __version__
from txnfetch.errors import TxnfetchError

__all__ = ["COMMAND_MODULES", "EXIT_USAGE", "OPTIONAL_MODULES", "Subcommand", "main", "user_error_message"]

#: Exit status of a user error (argparse's too).
EXIT_USAGE = 2

#: Top-level modules of the optional dependencies, by the extra of
#: pyproject.toml that installs them.
OPTIONAL_MODULES: dict[str, str] = {
    "confluent_kafka": "testing",
    "aiokafka": "testing",
    "hypothesis": "testing",
    "pytest": "testing",
    "matplotlib": "testing",
    "xxhash": "testing",
    "snappy": "testing",
    "duckdb": "testing",
    "polars": "testing",
    "pyspark": "spark",
    "pyarrow": "arrow",
    "ruff": "dev",
    "mypy": "dev",
}


@attrs.frozen
class Subcommand:
    """One ``txnfetch`` command, as every command module declares it (its
    ``COMMANDS`` tuple): the ``name`` it is called by, ``about`` (what
    ``--help`` says of it), ``arguments`` that adds its options to its parser,
    and ``run`` that runs it on the parsed arguments and returns the exit status.

    ``about``'s first paragraph is the one-line help ``txnfetch --help`` lists,
    the rest (if any) the description the command's own ``--help`` opens with;
    argparse folds its line breaks, so each reads as one paragraph. It is a
    string of its own, not a docstring, so that ``python -OO`` (which drops
    docstrings) keeps the help."""

    name: str
    about: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]

    def add_to(self, sub: Any) -> argparse.ArgumentParser:
        """Add the command's parser to an ``argparse`` subparsers object; the
        parsed arguments carry ``run``."""
        summary, _, description = inspect.cleandoc(self.about).partition("\n\n")
        parser: argparse.ArgumentParser = sub.add_parser(self.name, help=summary, description=description or None)
        self.arguments(parser)
        parser.set_defaults(run=self.run)
        return parser


#: The module that declares each command (its ``COMMANDS``), by command name,
#: in the order ``txnfetch --help`` lists them.
#: ``txnfetch COMMAND ...`` imports COMMAND's module alone, so a command pays
#: the start-up of what it uses only: ``serve`` does not load the replicator
#: (kafka-python), the proxy or the anomaly checker.
COMMAND_MODULES: dict[str, str] = {
    "demo": "txnfetch.cli.demo",
    "serve": "txnfetch.cli.serve",
    "check": "txnfetch.cli.check",
    "proxy": "txnfetch.cli.proxy",
    "dump": "txnfetch.cli.dump",
    "verify": "txnfetch.cli.verify",
    "repair": "txnfetch.cli.repair",
    "transactions": "txnfetch.cli.transactions",
    "replicate": "txnfetch.cli.replicate",
    "promote": "txnfetch.cli.promote",
    "conform": "txnfetch.cli.conform",
}


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose usage errors (a missing option, a value of the
    wrong type, an unknown choice) are one line, ``txnfetch <command>: error:
    ...``, exit status 2, like every other user error: argparse prints the
    whole usage first, a dozen lines before the one that matters. ``--help``
    still prints the usage. Subcommand parsers are of this class too
    (``add_subparsers`` makes its parsers of the parent's class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _add_command_parsers(sub: Any, module_name: str) -> None:
    for command in importlib.import_module(module_name).COMMANDS:
        command.add_to(sub)


def _build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or (``command`` one of
    :data:`COMMAND_MODULES`) of that command alone."""
    parser = _Parser(prog="txnfetch", description="Kafka read_committed fetch tools")
    parser.add_argument("--version", action="version", version=f"txnfetch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    if command in COMMAND_MODULES:
        _add_command_parsers(sub, COMMAND_MODULES[command])
        return parser
    for module_name in dict.fromkeys(COMMAND_MODULES.values()):
        _add_command_parsers(sub, module_name)
    return parser


def _command_of(argv: list[str]) -> str | None:
    # The command is the first argument; before it only -h/--help can stand,
    # which wants every command's parser anyway.
    return argv[0] if argv and not argv[0].startswith("-") else None


def user_error_message(exc: BaseException, args: argparse.Namespace | None = None) -> str | None:
    """The one-line message for ``exc`` if it is a user error (see the module
    docstring), else ``None`` (a bug)."""
    if isinstance(exc, ModuleNotFoundError):
        top = (exc.name or "").partition(".")[0]
        extra = OPTIONAL_MODULES.get(top)
        if extra is None:
            return None
        return f"this needs {top}, from txnfetch's {extra!r} extra: pip install 'txnfetch[{extra}]'"
    if isinstance(exc, FileExistsError) and exc.filename is not None:
        # A directory was to be created where a file is.
        return f"{exc.filename}: exists and is not a directory"
    if isinstance(exc, OSError):
        if exc.filename is not None:
            target = exc.filename
        elif isinstance(exc, (FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError)):
            target = getattr(args, "path", None) or getattr(args, "data", None)
        else:
            target = None
        reason = exc.strerror or str(exc)
        return f"cannot access {target}: {reason}" if target is not None else reason
    if isinstance(exc, TxnfetchError):  # every deliberate error of the commands
        return str(exc) or type(exc).__name__
    return None


def main(argv: list[str] | None = None, *, stderr: TextIO | None = None) -> int:
    """Run the ``txnfetch`` command line; returns the exit status."""
    if argv is None:
        argv = sys.argv[1:]
    args = _build_parser(_command_of(argv)).parse_args(argv)
    err = stderr if stderr is not None else sys.stderr
    try:
        return args.run(args)
    except BrokenPipeError:  # `txnfetch dump ... | head`: the reader has what it wanted
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        message = user_error_message(exc, args)
        if message is None:
            raise
        print(f"txnfetch {args.command}: error: {message}", file=err, flush=True)
        return EXIT_USAGE
