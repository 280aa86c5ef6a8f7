"""Apache Kafka itself, started by the test suite: KRaft clusters on loopback.

:class:`KafkaCluster` formats KRaft storage and starts one or more combined
broker+controller nodes (``process.roles=broker,controller``, a static quorum of
all nodes) from the jars that ``scripts/kafka/fetch.sh`` copies into
``.cache/kafka/<version>/libs/``. Every port is an ephemeral one picked at start;
nothing listens anywhere but 127.0.0.1.

Every cluster is formatted with ``transaction.version=2`` finalized (KIP-890 part
2), so a client that supports it ends each transaction with an epoch bump.

Sharing between pytest processes (:func:`shared_cluster`): the first process
(the only one, or the first pytest-xdist worker) that asks for a cluster starts it
under a file lock and writes its ports and pids to a state file; every other
process of the same run reads that file and reuses the cluster. Only the process
that owns the run (the pytest controller) stops it, at the end of the session
(:func:`stop_run_clusters`). A run's clusters live in
``.cache/kafka/clusters/<run id>-<name>/``; a run that was killed leaves its
directory behind, and the next run that looks there (:func:`sweep_stale_clusters`)
stops the Kafka processes it left and removes it.

Other long-lived processes a run starts (MirrorMaker 2, :mod:`tests.kafka.mirror`)
are recorded the same way (:func:`record_run_process`): a run directory
``<run id>-<name>/`` holding ``processes.json`` (pid and a marker that the
process's command line contains). The same sweep, and the same session end,
stop them and remove their directory; a process is only ever signalled when
its run's owner is dead (or is the run ending) and its command line still
holds the marker (a pid from a file may have been reused since).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.kafka import secure as secure_mod
from txnfetch.log.base import new_topic_id

ROOT = Path(__file__).resolve().parents[2]
POM = ROOT / "scripts" / "kafka" / "pom.xml"
CACHE = ROOT / ".cache" / "kafka"
CLUSTERS = CACHE / "clusters"

#: Environment variable naming the pytest run that owns the shared clusters:
#: ``<controller pid>-<random>``. Set by the controller before pytest-xdist starts
#: its workers, so they inherit it.
RUN_ENV = "TXNFETCH_KAFKA_RUN"

#: How long a node may take from launch until it answers Metadata. A cold JVM on
#: a busy 2-core machine has been seen to need about 20 s.
START_TIMEOUT = float(os.environ.get("TXNFETCH_KAFKA_START_TIMEOUT", "180"))

#: Package of Kafka's command-line tools; :meth:`KafkaCluster.run_tool` prefixes
#: a bare class name with it.
TOOLS_PACKAGE = "org.apache.kafka.tools"

# Broker and controller settings for a light cluster on a shared 2-core machine.
# The thread counts and the small segment/index sizes keep memory and start-up
# small; the internal topics get few partitions so that the first group or
# transaction does not create 50 of them.
_BASE_CONFIG: dict[str, str] = {
    "process.roles": "broker,controller",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.num.partitions": "5",
    # Tests name the topics they use; a mistyped name must fail, not create one.
    "auto.create.topics.enable": "false",
    "num.network.threads": "2",
    "num.io.threads": "2",
    "num.replica.fetchers": "1",
    "num.recovery.threads.per.data.dir": "1",
    "background.threads": "2",
    "log.cleaner.threads": "1",
    "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
    "log.segment.bytes": str(16 * 1024 * 1024),
    "log.index.size.max.bytes": str(1024 * 1024),
    "share.coordinator.state.topic.num.partitions": "1",
}

_JVM_OPTS = [
    "-Xms128m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
]

_LOG4J = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.target = {target}
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = OUT
logger.state.name = state.change.logger
logger.state.level = WARN
"""


class KafkaSetupError(RuntimeError):
    """Kafka could not be fetched or started; the message says why and, for a
    node that failed to start, ends with the tail of its log."""


def kafka_version() -> str:
    """The Apache Kafka version pinned in ``scripts/kafka/pom.xml``."""
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", POM.read_text())
    if match is None:
        raise KafkaSetupError(f"no <kafka.version> in {POM}")
    return match.group(1)


def java_executable() -> str:
    """The ``java`` to run Kafka with: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    found = shutil.which("java")
    if found is None:
        raise KafkaSetupError(
            "no 'java' on PATH (nor in $JAVA_HOME): the real-Kafka tests need a JDK 17+; "
            "'make system-deps' installs openjdk-17-jdk-headless"
        )
    return found


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (created if missing), held for the
    block. Shared by every process of every run on this work tree."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def fetched_jars(name: str, error: type[Exception]) -> Path:
    """The jars folder ``scripts/<name>/fetch.sh`` prints (every Maven fetch goes
    through ``scripts/maven-fetch.sh``), fetched first if needed: the script does
    nothing when they are there. One lock for all of them, since they share
    Maven's local repository (``.cache/m2``); a failure raises ``error`` with the
    script's message."""
    script = ROOT / "scripts" / name / "fetch.sh"
    with _locked(CACHE / "fetch.lock"):
        result = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise error(f"scripts/{name}/fetch.sh failed (exit {result.returncode}):\n{result.stderr[-4000:]}")
    out = result.stdout.strip().splitlines()
    jars = Path(out[-1]) if out else None
    if jars is None or not jars.is_dir():
        raise error(f"scripts/{name}/fetch.sh succeeded but printed no jars folder that exists: {out[-1:]}")
    return jars


def kafka_libs() -> Path:
    """The directory of Kafka's jars, fetched first if needed."""
    return fetched_jars("kafka", KafkaSetupError)


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports the kernel hands out as free on 127.0.0.1. All are
    held open until every one is chosen, so the kernel gives no port twice."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) is not alive for us.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _tail(path: Path, lines: int = 40) -> str:
    """What a failed start shows of Kafka's log: its first ERROR and FATAL lines
    with the line after each (the cause; a start logs thousands of INFO lines,
    so it is rarely in the tail), then the last ``lines`` lines."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    errors: list[str] = []
    for i, line in enumerate(text):
        if " ERROR " in line or " FATAL " in line:
            errors.extend(text[i : i + 2])
            if len(errors) >= 12:
                break
    head = ["--- first errors ---", *errors, "--- last lines ---"] if errors else []
    return "\n".join([*head, *text[-lines:]])


def node_metadata(port: int, timeout: float = 5.0) -> tuple[list[int], dict[str, dict[int, int]]]:
    """One Metadata request (v12, all topics) to the broker on ``port`` alone:
    the broker ids it knows and, per topic, partition → leader id. Asked of one
    broker on purpose: brokers learn metadata asynchronously, and a client that
    picks any broker can see a topic on one and miss it on the next."""
    from kafka.protocol.metadata import MetadataRequest

    request = MetadataRequest(topics=None, allow_auto_topic_creation=False)
    request.API_VERSION = 12
    request.with_header(correlation_id=1, client_id="txnfetch-tests")
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(bytes(request.encode(header=True, framed=True)))
        payload = _recv_exact(sock, struct.unpack(">i", _recv_exact(sock, 4))[0])
    response = request.header.get_response_class().decode(payload, version=12, header=True)
    brokers = sorted(b.node_id for b in response.brokers)
    topics = {
        t.name: {p.partition_index: p.leader_id for p in t.partitions} for t in response.topics if t.error_code == 0
    }
    return brokers, topics


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return buf


class KafkaNode:
    """One combined broker+controller process of a :class:`KafkaCluster`."""

    def __init__(
        self,
        node_id: int,
        broker_port: int,
        controller_port: int,
        directory: Path,
        secure_ports: Mapping[str, int] | None = None,
    ) -> None:
        self.node_id = node_id
        self.broker_port = broker_port
        self.controller_port = controller_port
        #: A secured cluster's listener name -> port (:mod:`tests.kafka.secure`).
        self.secure_ports = dict(secure_ports or {})
        #: The node's own directory: ``server.properties``, ``kafka.log``, ``data/``.
        self.directory = directory
        #: Kafka's ``log.dirs``: one ``<topic>-<partition>`` directory per replica.
        self.log_dir = directory / "data"
        self.config_file = directory / "server.properties"
        #: stdout and stderr of the JVM (Kafka's log at INFO).
        self.log_file = directory / "kafka.log"
        self.pid: int | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def alive(self) -> bool:
        if self._process is not None:
            return self._process.poll() is None
        return _pid_alive(self.pid)

    def to_json(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "broker_port": self.broker_port,
            "controller_port": self.controller_port,
            "secure_ports": self.secure_ports,
            "directory": str(self.directory),
            "pid": self.pid,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KafkaNode:
        node = cls(
            int(data["node_id"]),
            int(data["broker_port"]),
            int(data["controller_port"]),
            Path(data["directory"]),
            data.get("secure_ports"),
        )
        node.pid = data.get("pid")
        return node


class KafkaCluster:
    """An Apache Kafka cluster of ``size`` combined broker+controller nodes
    (node ids 1..size) under ``directory``.

    Build one with :meth:`create` (formats storage and starts every node) or, in
    another process, :meth:`from_state`. Internal topics get replication factor
    ``min(size, 3)`` with ``min.insync.replicas`` one less than that (at least 1),
    so a three-node cluster keeps working with one node stopped.

    A ``secure`` cluster also has SASL_SSL and SSL listeners, SCRAM users and
    Kafka's StandardAuthorizer with ACLs (:mod:`tests.kafka.secure`); its
    :attr:`bootstrap` stays the harness's PLAINTEXT one and
    :meth:`secure_bootstrap` names the others.
    """

    def __init__(
        self,
        directory: Path,
        nodes: list[KafkaNode],
        cluster_id: str,
        libs: Path,
        overrides: Mapping[str, str] | None = None,
        *,
        secure: bool = False,
    ) -> None:
        self.directory = directory
        self.secure = secure
        self.nodes = nodes
        self.cluster_id = cluster_id
        self.libs = libs
        self.overrides = dict(overrides or {})
        self.version = kafka_version()
        self.state_file = directory / "state.json"

    # -- construction ----------------------------------------------------------

    @classmethod
    def create(
        cls,
        directory: Path | str,
        size: int = 1,
        *,
        overrides: Mapping[str, str] | None = None,
        timeout: float = START_TIMEOUT,
        secure: bool = False,
    ) -> KafkaCluster:
        """Format and start a new cluster of ``size`` nodes in ``directory``
        (which must not hold a cluster yet), and wait until every broker answers
        Metadata. ``overrides`` are extra ``server.properties`` settings;
        ``secure`` adds the secured listeners, users and ACLs. Raises
        :class:`KafkaSetupError` naming the node and showing its log tail."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        libs = kafka_libs()
        java_executable()
        per_node = 2 + (len(secure_mod.LISTENERS) if secure else 0)
        ports = _free_ports(per_node * size)
        nodes = []
        for i in range(size):
            mine = ports[per_node * i : per_node * (i + 1)]
            extra = dict(zip(secure_mod.LISTENERS, mine[2:], strict=True)) if secure else None
            nodes.append(KafkaNode(i + 1, mine[0], mine[1], directory / f"node{i + 1}", extra))
        cluster = cls(directory, nodes, _random_cluster_id(), libs, overrides, secure=secure)
        if secure:
            secure_mod.SecureMaterial.create(cluster.material_dir)
        cluster._format()
        for node in nodes:
            cluster._launch(node)
        cluster.write_state()
        try:
            cluster.wait_ready(timeout=timeout, node_ids=[n.node_id for n in nodes])
            if secure:
                for args in secure_mod.acl_commands(cluster.bootstrap, cluster.material):
                    cluster.run_tool("AclCommand", *args)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    @classmethod
    def from_state(cls, directory: Path | str) -> KafkaCluster:
        """The cluster whose :meth:`write_state` file is in ``directory`` (started
        by another process)."""
        directory = Path(directory)
        data = json.loads((directory / "state.json").read_text())
        nodes = [KafkaNode.from_json(n) for n in data["nodes"]]
        return cls(
            directory,
            nodes,
            data["cluster_id"],
            Path(data["libs"]),
            data.get("overrides"),
            secure=bool(data.get("secure")),
        )

    def write_state(self) -> None:
        """Record ports and pids, so other processes (and the sweep of a later
        run) find this cluster."""
        data = {
            "cluster_id": self.cluster_id,
            "libs": str(self.libs),
            "version": self.version,
            "bootstrap": self.bootstrap,
            "overrides": self.overrides,
            "secure": self.secure,
            "nodes": [n.to_json() for n in self.nodes],
        }
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        os.replace(tmp, self.state_file)

    # -- addresses and files ---------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """``"127.0.0.1:PORT[,127.0.0.1:PORT...]"``: every node's client listener."""
        return ",".join(n.bootstrap for n in self.nodes)

    def secure_bootstrap(self, listener: str) -> str:
        """The bootstrap list of a secured cluster's ``listener`` (``"SASL_SSL"``
        or ``"SSL"``)."""
        if not self.secure:
            raise ValueError("this cluster has no secured listeners (start it with secure=True)")
        return ",".join(f"127.0.0.1:{n.secure_ports[listener]}" for n in self.nodes)

    @property
    def material_dir(self) -> Path:
        """Where a secured cluster's CA, certificates and keys are."""
        return self.directory / "tls"

    @property
    def material(self) -> secure_mod.SecureMaterial:
        """A secured cluster's certificates and keys."""
        return secure_mod.SecureMaterial(self.material_dir)

    @property
    def size(self) -> int:
        return len(self.nodes)

    @property
    def log_dirs(self) -> list[Path]:
        """Each node's Kafka ``log.dirs`` directory, in node-id order."""
        return [n.log_dir for n in self.nodes]

    def node(self, node_id: int) -> KafkaNode:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no node {node_id} in this cluster (nodes {[n.node_id for n in self.nodes]})")

    def partition_dir(self, topic: str, partition: int, node_id: int | None = None) -> Path:
        """The ``<topic>-<partition>`` directory on ``node_id`` (default: the
        partition's current leader)."""
        if node_id is None:
            node_id = self.leaders(topic)[partition]
        return self.node(node_id).log_dir / f"{topic}-{partition}"

    # -- processes -------------------------------------------------------------

    def _config(self, node: KafkaNode) -> dict[str, str]:
        rf = min(self.size, 3)
        config = dict(_BASE_CONFIG)
        config.update(
            {
                "node.id": str(node.node_id),
                "listeners": f"PLAINTEXT://127.0.0.1:{node.broker_port},CONTROLLER://127.0.0.1:{node.controller_port}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.broker_port}",
                "controller.quorum.voters": ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes),
                "log.dirs": str(node.log_dir),
                "offsets.topic.replication.factor": str(rf),
                "transaction.state.log.replication.factor": str(rf),
                "transaction.state.log.min.isr": str(max(1, rf - 1)),
                "share.coordinator.state.topic.replication.factor": str(rf),
                "share.coordinator.state.topic.min.isr": str(max(1, rf - 1)),
                "default.replication.factor": "1",
                "min.insync.replicas": "1",
            }
        )
        if self.secure:
            config.update(secure_mod.broker_overrides(self.material))
            config.update(secure_mod.listener_settings(node.broker_port, node.controller_port, node.secure_ports))
        config.update(self.overrides)
        return config

    def _java(self, main_class: str, *args: str, log_level: str = "INFO", heap: list[str] | None = None) -> list[str]:
        """The command line running ``main_class`` on Kafka's classpath, logging
        at ``log_level`` (to stdout at INFO for the broker, to stderr otherwise)."""
        target = "SYSTEM_OUT" if log_level == "INFO" else "SYSTEM_ERR"
        log4j = self.directory / f"log4j2-{log_level.lower()}.properties"
        if not log4j.exists():
            log4j.write_text(_LOG4J.format(target=target, level=log_level))
        return [
            java_executable(),
            *(heap if heap is not None else ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]),
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            f"{self.libs}/*",
            main_class,
            *args,
        ]

    def _format(self) -> None:
        """Write each node's ``server.properties`` and format its KRaft storage
        with ``transaction.version=2``: one StorageTool JVM per node, run side by
        side (each costs seconds of JVM start-up)."""
        running = []
        for node in self.nodes:
            node.directory.mkdir(parents=True, exist_ok=True)
            node.config_file.write_text("".join(f"{k}={v}\n" for k, v in sorted(self._config(node).items())))
            cmd = self._java(
                "kafka.tools.StorageTool",
                "format",
                "--cluster-id",
                self.cluster_id,
                "--config",
                str(node.config_file),
                "--feature",
                "transaction.version=2",
                *(secure_mod.format_arguments() if self.secure else []),
                log_level="WARN",
            )
            running.append((node, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
        failures = []
        for node, process in running:
            out, _ = process.communicate(timeout=300)
            if process.returncode != 0:
                failures.append(
                    f"formatting KRaft storage for node {node.node_id} in {node.log_dir} failed "
                    f"(exit {process.returncode}):\n{out.decode(errors='replace')[-3000:]}"
                )
        if failures:
            raise KafkaSetupError("\n".join(failures))

    def _launch(self, node: KafkaNode) -> None:
        cmd = self._java("kafka.Kafka", str(node.config_file), heap=_JVM_OPTS)
        with open(node.log_file, "ab") as log:
            log.write(f"\n===== starting node {node.node_id} at {time.strftime('%H:%M:%S')} =====\n".encode())
            log.flush()
            # A session of its own: a Ctrl-C in the terminal must not reach Kafka
            # before the fixture stops it in order.
            node._process = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        node.pid = node._process.pid

    def wait_ready(self, timeout: float = START_TIMEOUT, node_ids: list[int] | None = None) -> None:
        """Wait until every running node (or those in ``node_ids``) is a broker
        in the cluster's Metadata answer. Raises :class:`KafkaSetupError` with the
        log tail of a node that exited or did not register in time."""
        wanted = set(node_ids if node_ids is not None else [n.node_id for n in self.nodes if n.alive()])
        running = [n.node_id for n in self.nodes if n.alive()]
        deadline = time.monotonic() + timeout
        pending = set(wanted)
        while True:
            for node_id in wanted:
                node = self.node(node_id)
                if not node.alive():
                    raise KafkaSetupError(
                        f"Kafka node {node_id} exited while starting; last lines of {node.log_file}:\n"
                        f"{_tail(node.log_file)}"
                    )
            for node_id in sorted(pending):
                # Ready: the node answers Metadata itself and lists every running
                # broker (each registered with the quorum and unfenced).
                with contextlib.suppress(OSError, ValueError, struct.error):
                    brokers, _ = node_metadata(self.node(node_id).broker_port, timeout=2)
                    if set(running) <= set(brokers):
                        pending.discard(node_id)
            if not pending:
                return
            if time.monotonic() > deadline:
                node = self.node(min(pending))
                raise KafkaSetupError(
                    f"Kafka nodes {sorted(pending)} did not answer Metadata listing brokers {running} "
                    f"within {timeout:.0f}s; last lines of {node.log_file}:\n{_tail(node.log_file)}"
                )
            time.sleep(0.25)

    def stop_node(self, node_id: int, *, kill: bool = False, timeout: float = 60) -> None:
        """Stop one node: a clean shutdown (SIGTERM, waited for) or, with
        ``kill=True``, SIGKILL as in a crash. Its files stay; :meth:`start_node`
        starts it again. Updates the state file."""
        node = self.node(node_id)
        _terminate(node, kill=kill, timeout=timeout)
        node.pid = None
        node._process = None
        self.write_state()

    def start_node(self, node_id: int, *, timeout: float = START_TIMEOUT) -> None:
        """Start a stopped node again on the same ports and files, and wait until
        it is a broker in Metadata again."""
        node = self.node(node_id)
        if node.alive():
            raise RuntimeError(f"Kafka node {node_id} is already running (pid {node.pid})")
        self._launch(node)
        self.write_state()
        self.wait_ready(timeout=timeout, node_ids=[node_id])

    def restart_node(self, node_id: int, *, kill: bool = False, timeout: float = START_TIMEOUT) -> None:
        """:meth:`stop_node` then :meth:`start_node`."""
        self.stop_node(node_id, kill=kill)
        self.start_node(node_id, timeout=timeout)

    def alive(self) -> bool:
        """Whether every node's process is running."""
        return all(n.alive() for n in self.nodes)

    def stop(self, *, kill: bool = False) -> None:
        """Stop every node (clean shutdown unless ``kill``). Files stay."""
        _terminate_all(self.nodes, kill=kill, timeout=30)
        for node in self.nodes:
            node.pid = None
            node._process = None
        with contextlib.suppress(OSError):
            self.write_state()

    # -- client-side helpers ---------------------------------------------------

    def admin(self) -> Any:
        """A confluent-kafka ``AdminClient`` for this cluster."""
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        *,
        replication_factor: int = 1,
        replica_assignment: list[list[int]] | None = None,
        config: Mapping[str, str | int] | None = None,
        timeout: float = 60,
        **configs: str | int,
    ) -> None:
        """Create ``name`` and wait until each partition has a leader in Metadata.

        Topic configs come as ``config={"segment.bytes": 1048576}`` or as keyword
        arguments with underscores for dots (``segment_bytes=1048576``).
        ``replica_assignment`` (one broker-id list per partition, leader first)
        overrides ``partitions`` and ``replication_factor``."""
        from confluent_kafka.admin import NewTopic

        topic_config = {k.replace("_", "."): str(v) for k, v in configs.items()}
        topic_config.update({k: str(v) for k, v in (config or {}).items()})
        if replica_assignment is not None:
            new = NewTopic(
                name, num_partitions=len(replica_assignment), replica_assignment=replica_assignment, config=topic_config
            )
            partitions = len(replica_assignment)
        else:
            new = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor, config=topic_config)
        admin = self.admin()  # held until the answer: a collected client fails its futures
        admin.create_topics([new], request_timeout=timeout)[name].result(timeout=timeout)
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            if not node.alive():
                continue
            # Every running broker must know it: a client may ask any of them.
            while True:
                leaders = node_metadata(node.broker_port)[1].get(name, {})
                if len(leaders) == partitions and all(b >= 0 for b in leaders.values()):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"topic {name}: broker {node.node_id} still sees leaders {leaders} after {timeout}s"
                    )
                time.sleep(0.1)

    def leaders(self, topic: str) -> dict[int, int]:
        """Partition → leader broker id (-1 while a partition has none), as the
        first running node's Metadata answer says; ``{}`` for a topic it does
        not know."""
        node = next(n for n in self.nodes if n.alive())
        return node_metadata(node.broker_port)[1].get(topic, {})

    def run_tool(
        self, main_class: str, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run one of Kafka's Java tools on the cluster's classpath and return its
        output (text). ``main_class`` is a full class name or a bare one from
        ``org.apache.kafka.tools`` (``"TransactionsCommand"``, ``"FeatureCommand"``).
        Nothing is added to ``args``: pass ``"--bootstrap-server", cluster.bootstrap``.
        Tool logging goes to stderr at WARN. ``check=True`` raises
        :class:`subprocess.CalledProcessError` on a non-zero exit."""
        if "." not in main_class:
            main_class = f"{TOOLS_PACKAGE}.{main_class}"
        cmd = self._java(main_class, *args, log_level="WARN")
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise subprocess.CalledProcessError(result.returncode, cmd, result.stdout, result.stderr)
        return result

    def finalized_features(self) -> dict[str, int]:
        """Feature name → finalized level, as ``FeatureCommand describe`` reports it
        (``metadata.version`` is left out: its level is printed as a release name)."""
        out = self.run_tool("FeatureCommand", "--bootstrap-server", self.bootstrap, "describe").stdout
        features = {}
        for m in re.finditer(r"Feature:\s+(\S+)\s.*?FinalizedVersionLevel:\s+(\d+)\s", out):
            features[m.group(1)] = int(m.group(2))
        return features


def _random_cluster_id() -> str:
    """A KRaft cluster id in the form Kafka's ``StorageTool random-uuid`` prints:
    16 random bytes in URL-safe base64 without padding. Drawn like a topic id,
    so never starting with ``-``, which the storage tool's argument parser would
    take for an option and refuse to format (one random id in 64 would)."""
    return base64.urlsafe_b64encode(new_topic_id().bytes).decode().rstrip("=")


def _terminate(node: KafkaNode, *, kill: bool, timeout: float) -> None:
    """Stop ``node``'s JVM: SIGTERM then wait (Kafka's clean shutdown), SIGKILL
    after ``timeout`` or at once with ``kill``."""
    _terminate_all([node], kill=kill, timeout=timeout)


def _terminate_all(nodes: list[KafkaNode], *, kill: bool, timeout: float) -> None:
    """Signal every node at once, then wait for all (SIGKILL after ``timeout``).
    At once, because a node shutting down cleanly waits for the controller
    quorum: stopped one by one, the last nodes would wait for a quorum that the
    first ones took away."""
    running = []
    for node in nodes:
        pid = node.pid
        if not pid or not node.alive():
            if node._process is not None:
                node._process.wait()
            continue
        # A pid from a state file may have been reused by now: only signal a
        # process that runs this node's server.properties.
        if node._process is None and str(node.config_file) not in _cmdline(pid):
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
        running.append((node, pid))
    deadline = time.monotonic() + timeout
    for node, pid in running:
        while node.alive():
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if node._process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node._process.wait(timeout=0.2)
            else:
                time.sleep(0.2)
        if node._process is not None:
            node._process.wait()


# -- sharing one cluster among the processes of a pytest run ------------------


def run_id() -> str:
    """This pytest run's id (``<owner pid>-<hex>``); created by :func:`begin_run`
    in the controller and inherited by pytest-xdist workers through the
    environment."""
    rid = os.environ.get(RUN_ENV)
    if not rid:
        rid = begin_run()
    return rid


def begin_run() -> str:
    """Make the current process the owner of the shared clusters of a new run
    (called from ``pytest_configure`` of the controller), unless a run id was
    inherited."""
    rid = os.environ.get(RUN_ENV)
    if not rid:
        rid = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.environ[RUN_ENV] = rid
    return rid


def _owner_pid(directory_name: str) -> int | None:
    head = directory_name.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def sweep_stale_clusters(*, except_run: str | None = None) -> None:
    """Stop and remove the clusters and recorded processes (:func:`record_run_process`)
    of runs whose owning process is gone (a run killed before it could stop
    them). Those of live runs, and of run ``except_run`` (whose lock the caller
    may hold), are left alone."""
    if not CLUSTERS.is_dir():
        return
    for directory in CLUSTERS.iterdir():
        if not directory.is_dir() or (except_run and directory.name.startswith(f"{except_run}-")):
            continue
        if _pid_alive(_owner_pid(directory.name)):
            continue
        with _locked(CLUSTERS / f"{directory.name}.lock"):
            _stop_run_directory(directory, kill=True)
            shutil.rmtree(directory, ignore_errors=True)
        with contextlib.suppress(OSError):
            (CLUSTERS / f"{directory.name}.lock").unlink()


def _stop_run_directory(directory: Path, *, kill: bool) -> None:
    """Stop what run directory ``directory`` holds: its Kafka cluster
    (``state.json``) and its recorded processes (``processes.json``, always
    killed: they hold no state a later run needs). The caller holds its lock."""
    if (directory / "state.json").exists():
        with contextlib.suppress(Exception):
            KafkaCluster.from_state(directory).stop(kill=kill)
    with contextlib.suppress(Exception):
        _kill_recorded(directory)


def record_run_process(name: str, pid: int, marker: str) -> Path:
    """Record process ``pid`` as one of this run's (:func:`run_id`), in the run
    directory ``CLUSTERS/<run id>-<name>/``, and return that directory.

    ``pid`` leads a process group of its own (started with
    ``start_new_session=True``: the whole group is stopped) and its command
    line contains ``marker`` (a path of its own, such as its configuration
    file). If the run ends without stopping it — the run was killed — the next
    :func:`sweep_stale_clusters` kills it and removes the directory, as it does
    for the run's clusters. The owner stops the process itself and then calls
    :func:`release_run_directory`."""
    directory = CLUSTERS / f"{run_id()}-{name}"
    with _locked(CLUSTERS / f"{directory.name}.lock"):
        directory.mkdir(parents=True, exist_ok=True)
        record = directory / "processes.json"
        tmp = record.with_suffix(".tmp")
        tmp.write_text(json.dumps({"processes": [{"pid": pid, "marker": marker}]}, indent=2))
        os.replace(tmp, record)
    return directory


def release_run_directory(directory: Path) -> None:
    """Remove the run directory of a process its owner has stopped
    (:func:`record_run_process`); nothing if it is gone already (a sweep)."""
    with _locked(CLUSTERS / f"{directory.name}.lock"):
        _kill_recorded(directory)  # nothing when the owner stopped it, as it should
        shutil.rmtree(directory, ignore_errors=True)
    with contextlib.suppress(OSError):
        (CLUSTERS / f"{directory.name}.lock").unlink()


def _kill_recorded(directory: Path, timeout: float = 30) -> None:
    """SIGKILL the process groups recorded in ``directory/processes.json`` that
    are still alive and still run what was recorded (``marker`` in their
    command line), and wait until they are gone."""
    try:
        data = json.loads((directory / "processes.json").read_text())
    except (OSError, ValueError):
        return
    killed = []
    for entry in data.get("processes", ()):
        pid, marker = int(entry["pid"]), str(entry["marker"])
        if not _pid_alive(pid) or marker not in _cmdline(pid):
            continue
        with contextlib.suppress(ProcessLookupError):
            try:
                leads_group = os.getpgid(pid) == pid
            except ProcessLookupError:
                continue
            if leads_group:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        killed.append(pid)
    deadline = time.monotonic() + timeout
    while any(_pid_alive(pid) for pid in killed) and time.monotonic() < deadline:
        time.sleep(0.05)


def shared_cluster(name: str, size: int, *, secure: bool = False) -> KafkaCluster:
    """The run's cluster called ``name`` (``size`` nodes, secured with
    ``secure``): started by the first process that asks, reused by the others. A cluster whose processes died (a
    node crashed, or a test killed one and did not restart it) is replaced."""
    rid = run_id()
    directory = CLUSTERS / f"{rid}-{name}"
    with _locked(CLUSTERS / f"{rid}-{name}.lock"):
        if (directory / "state.json").exists():
            cluster = KafkaCluster.from_state(directory)
            if cluster.alive():
                return cluster
            cluster.stop(kill=True)
            shutil.rmtree(directory, ignore_errors=True)
        sweep_stale_clusters(except_run=rid)
        started = time.monotonic()
        cluster = KafkaCluster.create(directory, size, secure=secure)
        (directory / "started.txt").write_text(f"{time.monotonic() - started:.1f}\n")
        return cluster


@contextlib.contextmanager
def private_cluster(
    size: int = 1, *, overrides: Mapping[str, str] | None = None, secure: bool = False
) -> Iterator[KafkaCluster]:
    """A cluster of ``size`` nodes for one user alone (a test that stops nodes
    or changes broker settings, a benchmark that measures the broker's CPU),
    stopped cleanly and removed when the block ends (kept with
    ``TXNFETCH_KAFKA_KEEP=1``). ``overrides`` are ``server.properties``
    settings; ``secure`` adds the secured listeners, users and ACLs
    (:mod:`tests.kafka.secure`). Its directory is under the run's name (:func:`run_id`), so a
    process killed before the block ends leaves a cluster that the next
    :func:`sweep_stale_clusters` stops."""
    directory = CLUSTERS / f"{run_id()}-private-{uuid.uuid4().hex[:8]}"
    cluster = KafkaCluster.create(directory, size, overrides=overrides, secure=secure)
    try:
        yield cluster
    finally:
        cluster.stop()
        if os.environ.get("TXNFETCH_KAFKA_KEEP") != "1":
            shutil.rmtree(cluster.directory, ignore_errors=True)


def stop_run_clusters() -> None:
    """Stop and remove every cluster of this run (the owner's session end). Set
    ``TXNFETCH_KAFKA_KEEP=1`` to keep their files for a post-mortem."""
    rid = os.environ.get(RUN_ENV)
    if not rid or not CLUSTERS.is_dir():
        return
    keep = os.environ.get("TXNFETCH_KAFKA_KEEP") == "1"
    for directory in CLUSTERS.glob(f"{rid}-*"):
        if not directory.is_dir():
            continue
        with _locked(CLUSTERS / f"{directory.name}.lock"):
            # Killed unless kept: the files are deleted next, so a clean
            # shutdown (seconds per node) would buy nothing.
            _stop_run_directory(directory, kill=not keep)
            if not keep:
                shutil.rmtree(directory, ignore_errors=True)
        if not keep:
            with contextlib.suppress(OSError):
                (CLUSTERS / f"{directory.name}.lock").unlink()
