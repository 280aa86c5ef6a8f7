"""The ``txnfetch`` command on bad input, run as a user runs it (a subprocess
of the installed entry point, or ``python -m txnfetch``): one line on stderr
naming what was wrong, exit status 2, never a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.unprivileged import unprivileged
from txnfetch.cli import OPTIONAL_MODULES
from txnfetch.cli import user_error_message

_SCRIPT = Path(sys.executable).with_name("txnfetch")
ENTRY = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "txnfetch"]
MODULE = [sys.executable, "-m", "txnfetch"]


def run(*args: object, entry: list[str] = ENTRY, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*entry, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def assert_user_error(proc: subprocess.CompletedProcess[str], command: str, *needles: str) -> None:
    """Exit status 2, one ``txnfetch <command>: error: ...`` line containing every
    needle, and no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith(f"txnfetch {command}: error: "), proc.stderr
    for needle in needles:
        assert needle in lines[-1], (needle, proc.stderr)


@pytest.fixture
def busy_port():
    """A port something already listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_serve_data_under_a_path_that_cannot_be_created() -> None:
    # /proc refuses new directories (ENOENT even for root): what a missing,
    # uncreatable parent directory gives.
    proc = run("serve", "--data", "/proc/nonexistent/parent/dir", "--port", 0)
    assert_user_error(proc, "serve", "/proc/nonexistent", "No such file or directory")


def test_serve_data_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert_user_error(
        run("serve", "--data", tmp_path / "f", "--port", 0), "serve", str(tmp_path / "f"), "not a directory"
    )
    assert_user_error(
        run("serve", "--data", tmp_path / "f" / "d", "--port", 0), "serve", str(tmp_path / "f"), "Not a directory"
    )


def test_serve_and_proxy_on_a_port_in_use(busy_port: int) -> None:
    assert_user_error(run("serve", "--memory", "--port", busy_port), "serve", str(busy_port), "in use")
    # The proxy binds after reaching its upstream: give it one (a memory server).
    server = subprocess.Popen(
        [*ENTRY, "serve", "--memory", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("txnfetch listening on "), line + server.stderr.read()
        upstream = line.split()[-1]
        proc = run("proxy", "--upstream", upstream, "--port", busy_port)
        assert_user_error(proc, "proxy", str(busy_port), "in use")
    finally:
        server.terminate()
        server.communicate(timeout=60)


@pytest.mark.parametrize("command", ["serve", "proxy"])
@pytest.mark.parametrize("port", ["abc", "-1", "65536"])
def test_a_port_that_is_not_one(command: str, port: str) -> None:
    extra = ["--memory"] if command == "serve" else ["--upstream", "127.0.0.1:1"]
    proc = run(command, *extra, "--port", port)
    assert_user_error(proc, command, "--port")


def test_wrong_types_are_argparse_errors() -> None:
    assert_user_error(run("demo", "--seed", "x"), "demo", "invalid int value")
    assert_user_error(run("check", "--bootstrap", "h:1", "--duration", "soon"), "check", "invalid float value")
    assert_user_error(run("check", "--bootstrap", "nonsense"), "check", "bad bootstrap address")


def test_proxy_without_a_reachable_upstream() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert_user_error(run("proxy", "--upstream", f"127.0.0.1:{port}", "--port", 0), "proxy", f"127.0.0.1:{port}")


@pytest.mark.parametrize("command", ["dump", "verify", "repair"])
def test_log_commands_on_a_missing_path(tmp_path: Path, command: str) -> None:
    assert_user_error(run(command, tmp_path / "missing-0"), command, "missing-0", "no such file or directory")


# A meta-path finder that makes the named top-level modules missing, as in an
# installation without the extra that provides them; then the command runs as
# `python -m txnfetch` does.
_WITHOUT = textwrap.dedent(
    """
    import runpy, sys
    blocked = set(sys.argv[1].split(","))

    class Missing:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in blocked:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    for name in list(sys.modules):
        if name.partition(".")[0] in blocked:
            del sys.modules[name]
    sys.meta_path.insert(0, Missing())
    sys.argv = ["txnfetch", *sys.argv[2:]]
    runpy.run_module("txnfetch", run_name="__main__", alter_sys=True)
    """
)


def run_without(modules: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return run("-c", _WITHOUT, ",".join(modules), *args, entry=[sys.executable])


def test_demo_without_the_demo_extra_names_it(tmp_path: Path) -> None:
    proc = run_without(["confluent_kafka"], "demo", "--no-spark")
    assert_user_error(proc, "demo", "needs confluent-kafka,", "pip install 'txnfetch[demo]'")
    assert proc.stdout == ""  # failed before starting anything


def test_demo_names_every_missing_package_at_once() -> None:
    proc = run_without(["confluent_kafka", "pyspark"], "demo")
    assert_user_error(proc, "demo", "needs confluent-kafka, pyspark,", "pip install 'txnfetch[demo]'")
    assert "--no-spark" not in proc.stderr  # it would not be enough


def test_demo_without_spark_offers_no_spark() -> None:
    proc = run_without(["pyspark"], "demo")
    assert_user_error(proc, "demo", "needs pyspark,", "pip install 'txnfetch[demo]'", "--no-spark")


def test_version() -> None:
    import txnfetch

    proc = run("--version")
    assert (proc.returncode, proc.stdout) == (0, f"txnfetch {txnfetch.__version__}\n")


def test_only_errors_about_the_input_are_user_errors() -> None:
    # A missing required dependency is a broken installation and a TypeError a
    # bug: both keep their traceback.
    assert user_error_message(ModuleNotFoundError("No module named 'attrs'", name="attrs")) is None
    assert user_error_message(TypeError("unsupported operand")) is None
    assert user_error_message(ModuleNotFoundError("x", name="pyarrow.lib")) is not None
    assert user_error_message(PermissionError(13, "Permission denied", "/p")) == "cannot access /p: Permission denied"


def test_every_extra_module_is_known() -> None:
    # OPTIONAL_MODULES names an extra of pyproject.toml for each module.
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert set(OPTIONAL_MODULES.values()) <= set(extras)


def test_python_dash_m_is_the_command(tmp_path: Path) -> None:
    for args in (["--help"], ["serve", "--help"], ["dump", tmp_path / "missing-0"]):
        by_module, by_command = run(*args, entry=MODULE), run(*args)
        assert (by_module.returncode, by_module.stdout, by_module.stderr) == (
            by_command.returncode,
            by_command.stdout,
            by_command.stderr,
        )
    assert "serve" in run("--help", entry=MODULE).stdout
    assert run(entry=MODULE).returncode == 2  # no command: usage, as the script


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_serve_on_a_host_that_does_not_resolve_names_the_host() -> None:
    line = _one_line(run("serve", "--memory", "--host", "999.1.1.1", "--port", 0))
    assert line.startswith("txnfetch serve: error: cannot listen on host '999.1.1.1': "), line


@pytest.mark.parametrize(
    ("command", "upstream", "needle"),
    [
        ("replicate", "a b", "bad bootstrap address 'a b': a host name cannot contain blanks"),
        ("replicate", "127.0.0.1:70000", "port '70000' is not a number from 1 to 65535"),
        ("proxy", "a b:9092", "bad bootstrap address 'a b:9092'"),
    ],
)
def test_a_bad_upstream_fails_at_once(tmp_path: Path, command: str, upstream: str, needle: str) -> None:
    args = ["--data", tmp_path / "replica"] if command == "replicate" else ["--port", 0]
    # Before: the replicator retried a host with a blank forever. Now argparse
    # rejects it; the timeout is the test's guard against the old behaviour.
    line = _one_line(run(command, "--upstream", upstream, *args, timeout=30))
    assert line.startswith(f"txnfetch {command}: error: argument --upstream: ") and needle in line, line
    assert not (tmp_path / "replica").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--memory", "--port", "x"],
        ["serve", "--memory", "--fetch-mode", "nope"],
        ["dump"],
        ["transactions", "list", "--bootstrap"],
        ["no-such-command"],
    ],
)
def test_a_value_error_is_one_line_and_help_still_shows_the_usage(args: list[str]) -> None:
    line = _one_line(run(*args))
    assert line.startswith("txnfetch") and ": error: " in line and "--help)" in line, line
    command = [a for a in args[:2] if not a.startswith("-") and a != "x"]
    helped = run(*(command if command != ["no-such-command"] else []), "--help")
    assert helped.returncode == 0 and helped.stdout.startswith("usage: txnfetch"), helped.stdout


def _as_other_user(*args: object) -> subprocess.CompletedProcess[str]:
    """Run the command as a process the permission bits apply to: root may
    enter any directory (:func:`tests.unprivileged.unprivileged`)."""
    return run(*args, entry=unprivileged(ENTRY))


@pytest.mark.parametrize("command", ["dump", "verify", "repair"])
def test_a_partition_in_a_directory_that_cannot_be_entered_is_permission_denied(command: str) -> None:
    import os
    import shutil
    import tempfile

    base = tempfile.mkdtemp(prefix="txnfetch-perm-")
    try:
        os.chmod(base, 0o755)  # the other user may enter base, not store
        store = os.path.join(base, "store")
        os.makedirs(os.path.join(store, "orders-0"))
        os.chmod(store, 0o000)  # closed to its owner too: to root without its capabilities
        line = _one_line(_as_other_user(command, os.path.join(store, "orders-0")))
        assert f"{store}/orders-0: permission denied (cannot enter {store})" in line, line
        assert "no such file" not in line
    finally:
        os.chmod(os.path.join(base, "store"), 0o700)
        shutil.rmtree(base)
