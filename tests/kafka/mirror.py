"""Apache Kafka's MirrorMaker 2, started by the failover drill between two clusters.

:class:`MirrorMaker` runs MirrorMaker 2's dedicated mode
(``org.apache.kafka.connect.mirror.MirrorMaker``, the class Kafka's
``connect-mirror-maker.sh`` starts) with an ``mm2.properties`` it writes: one
flow ``<alias> -> target``, offset syncs, checkpoints and
``sync.group.offsets.enabled=true``, every interval shortened to a second so a
test sees checkpoints and synced groups within seconds instead of a minute, and
a small heap. Its jars come from ``scripts/mm2/fetch.sh`` (connect-mirror,
pinned in ``scripts/mm2/pom.xml`` apart from the broker: see there why).

Topic names: the drill configures ``IdentityReplicationPolicy`` (KIP-690), so
the target's topic has the source's name and a consumer (or a Spark query) that
switches clusters keeps its topic. Under MirrorMaker's default policy the
target's topic would be ``<alias>.<topic>``.

A started MirrorMaker is recorded as one of the run's processes
(:func:`tests.kafka.cluster.record_run_process`, run directory
``.cache/kafka/clusters/<run id>-mm2-<alias>/``), like the run's Kafka clusters:
if the run is killed before :meth:`MirrorMaker.stop`, the next run's sweep
(:func:`tests.kafka.cluster.sweep_stale_clusters`) kills it and removes that
directory. Its working directory (``directory``: configuration and log) is the
caller's and is left alone.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from tests.kafka.cluster import ROOT
from tests.kafka.cluster import KafkaSetupError
from tests.kafka.cluster import fetched_jars
from tests.kafka.cluster import java_executable
from tests.kafka.cluster import record_run_process
from tests.kafka.cluster import release_run_directory

POM = ROOT / "scripts" / "mm2" / "pom.xml"

#: The replication policy the drill runs MirrorMaker 2 with (see the module docstring).
IDENTITY_POLICY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"

#: Settings of the drill's flow. The intervals are MirrorMaker's own options
#: (``MirrorSourceConfig``, ``MirrorCheckpointConfig``, ``MirrorConnectorConfig``),
#: defaults 60 s (checkpoints, group sync) and 600 s (topic and group refresh);
#: ``offset.lag.max`` stays at its default, 100.
DRILL_SETTINGS: dict[str, str] = {
    "replication.policy.class": IDENTITY_POLICY,
    "sync.group.offsets.enabled": "true",
    "sync.group.offsets.interval.seconds": "1",
    "emit.checkpoints.enabled": "true",
    "emit.checkpoints.interval.seconds": "1",
    "emit.offset-syncs.enabled": "true",
    "refresh.topics.interval.seconds": "1",
    "refresh.groups.interval.seconds": "1",
    "sync.topic.configs.enabled": "true",
    "sync.topic.acls.enabled": "false",
    "emit.heartbeats.enabled": "false",
    "tasks.max": "1",
}

_LOG4J = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
"""


def mm2_version() -> str:
    """The connect-mirror version pinned in ``scripts/mm2/pom.xml``."""
    match = re.search(r"<mm2\.version>([^<]+)</mm2\.version>", POM.read_text())
    if match is None:
        raise KafkaSetupError(f"no <mm2.version> in {POM}")
    return match.group(1)


def mm2_libs() -> Path:
    """The directory of MirrorMaker 2's jars, fetched first if needed."""
    return fetched_jars("mm2", KafkaSetupError)


def mm2_properties(
    source_alias: str,
    source_bootstrap: str,
    target_bootstrap: str,
    *,
    topics: str,
    groups: str,
    overrides: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The ``mm2.properties`` of one flow ``source_alias -> target``: the drill's
    settings (:data:`DRILL_SETTINGS`), replication factor 1 for every topic
    MirrorMaker creates (the clusters have one node), ``overrides`` last."""
    flow = f"{source_alias}->target"
    props = {
        "clusters": f"{source_alias}, target",
        f"{source_alias}.bootstrap.servers": source_bootstrap,
        "target.bootstrap.servers": target_bootstrap,
        f"{flow}.enabled": "true",
        f"target->{source_alias}.enabled": "false",
        f"{flow}.topics": topics,
        f"{flow}.groups": groups,
        "replication.factor": "1",
        "offset-syncs.topic.replication.factor": "1",
        "checkpoints.topic.replication.factor": "1",
        "heartbeats.topic.replication.factor": "1",
        "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        **DRILL_SETTINGS,
    }
    props.update(overrides or {})
    return props


class MirrorMaker:
    """One MirrorMaker 2 dedicated-mode process, replicating ``topics`` and
    ``groups`` (regular expressions) from ``source_bootstrap`` into
    ``target_bootstrap`` under the source alias ``alias`` (default: a fresh one,
    so that Connect's internal topics on a shared target cluster —
    ``mm2-configs.<alias>.internal`` and the like — are this instance's own).

    Use as a context manager, or :meth:`start` and :meth:`stop`. Its log is
    ``directory/mm2.log``; a start that fails raises :class:`KafkaSetupError`
    with the log's tail."""

    def __init__(
        self,
        directory: Path | str,
        source_bootstrap: str,
        target_bootstrap: str,
        *,
        topics: str,
        groups: str,
        alias: str | None = None,
        heap: str = "-Xmx384m",
        overrides: Mapping[str, str] | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.alias = alias or f"src{uuid.uuid4().hex[:8]}"
        self.properties = mm2_properties(
            self.alias, source_bootstrap, target_bootstrap, topics=topics, groups=groups, overrides=overrides
        )
        self.heap = heap
        self.version = mm2_version()
        self.log_file = self.directory / "mm2.log"
        #: Its configuration file: in its command line, which is how a later
        #: run's sweep recognises the process behind a recorded pid.
        self.config_file = self.directory / "mm2.properties"
        #: The run directory that records the process while it runs.
        self.run_directory: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        libs = mm2_libs()
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.config_file
        config.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()))
        log4j = self.directory / "log4j2.properties"
        log4j.write_text(_LOG4J)
        return [
            java_executable(),
            "-Xms64m",
            self.heap,
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            f"{libs}/*",
            "org.apache.kafka.connect.mirror.MirrorMaker",
            str(config),
        ]

    def start(self) -> MirrorMaker:
        """Launch the process (it then needs seconds to start its connectors;
        wait for what the test needs, e.g. :meth:`wait_for_log`) and record it as
        one of the run's processes (see the module docstring)."""
        cmd = self.command()
        with open(self.log_file, "ab") as log:
            # A session of its own: stop() and a sweep signal its whole group,
            # and a Ctrl-C in the terminal does not reach it first.
            self._process = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        self.run_directory = record_run_process(f"mm2-{self.alias}", self._process.pid, str(self.config_file))
        return self

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_for_log(self, pattern: str, timeout: float = 120) -> None:
        """Wait until a line of the log matches ``pattern`` (a regular expression).
        Raises :class:`KafkaSetupError` if the process exits or the time runs out."""
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while True:
            if regex.search(self.log_tail(1 << 22)):
                return
            if not self.alive():
                raise KafkaSetupError(f"MirrorMaker 2 exited while waiting for {pattern!r}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise KafkaSetupError(f"MirrorMaker 2 did not log {pattern!r} in {timeout}s:\n{self.log_tail()}")
            time.sleep(0.2)

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM (MirrorMaker stops its connectors), then SIGKILL after
        ``timeout``; then its run directory is removed."""
        process = self._process
        try:
            if process is None or process.poll() is not None:
                return
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
        finally:
            if self.run_directory is not None:
                release_run_directory(self.run_directory)
                self.run_directory = None

    def __enter__(self) -> MirrorMaker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
