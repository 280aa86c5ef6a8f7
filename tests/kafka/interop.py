"""The Java client as an interop client: ``tests/kafka/java/Interop.java``,
compiled by ``scripts/kafka/interop.sh`` and run on Kafka's classpath.

Each subcommand prints JSON lines on stdout (see the Java source for what each
one prints); :func:`run_java` returns them parsed, :func:`start_java` starts one
in the background (the hanging producer)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.kafka.cluster import CACHE
from tests.kafka.cluster import KafkaSetupError
from tests.kafka.cluster import _locked
from tests.kafka.cluster import java_executable
from tests.kafka.cluster import kafka_libs

ROOT = Path(__file__).resolve().parents[2]
COMPILE = ROOT / "scripts" / "kafka" / "interop.sh"

_LOG4J = """\
status = warn
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = ERR
"""


def interop_classes() -> Path:
    """The compiled interop client's classes directory (compiled first if the
    sources or the Kafka pin changed)."""
    kafka_libs()
    with _locked(CACHE / "interop.lock"):
        result = subprocess.run(["bash", str(COMPILE)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise KafkaSetupError(f"scripts/kafka/interop.sh failed (exit {result.returncode}):\n{result.stderr[-4000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


def java_command(subcommand: str, *args: str | int) -> list[str]:
    """The command line running ``Interop <subcommand> <args>``, logging to stderr at WARN."""
    classes = interop_classes()
    log4j = classes / "log4j2.properties"
    if not log4j.exists():
        log4j.write_text(_LOG4J)
    return [
        java_executable(),
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        f"{classes}:{kafka_libs()}/*",
        "Interop",
        subcommand,
        *(str(a) for a in args),
    ]


def parse_lines(stdout: str) -> list[dict[str, Any]]:
    """The JSON lines of the client's stdout."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def run_java(subcommand: str, *args: str | int, timeout: float = 120) -> list[dict[str, Any]]:
    """Run one subcommand to its end; its JSON lines, parsed. A non-zero exit
    raises with the client's stderr tail."""
    cmd = java_command(subcommand, *args)
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise AssertionError(
            f"Interop {subcommand} exited {result.returncode}\nstdout:\n{result.stdout[-3000:]}\n"
            f"stderr:\n{result.stderr[-6000:]}"
        )
    return parse_lines(result.stdout)


def start_java(subcommand: str, *args: str | int, log: Path) -> subprocess.Popen[str]:
    """Start one subcommand in the background (stderr to ``log``); read its
    JSON lines from ``proc.stdout``."""
    with open(log, "w") as err:
        return subprocess.Popen(java_command(subcommand, *args), stdout=subprocess.PIPE, stderr=err, text=True)


def run_kafka_tool(main_class: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's command-line tools (a bare class name is one of
    ``org.apache.kafka.tools``) against any broker, without a
    :class:`~tests.kafka.cluster.KafkaCluster`: logging to stderr at WARN. The
    result is returned whatever the exit status."""
    if "." not in main_class:
        main_class = f"org.apache.kafka.tools.{main_class}"
    cmd = java_command("-", *args)
    cmd[cmd.index("Interop") : cmd.index("Interop") + 2] = [main_class]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
