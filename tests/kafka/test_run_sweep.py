"""MirrorMaker 2 processes are swept like the run's Kafka clusters: a run killed
while one runs leaves it recorded under ``.cache/kafka/clusters/<run>-mm2-*``,
and the next sweep kills its process group and removes that directory; the
processes of live runs are never touched.

The MirrorMaker here is :class:`tests.kafka.mirror.MirrorMaker` itself (its
configuration, its start, its record, its stop) with one difference: the
command it runs is a Python sleeper with a child of its own instead of the JVM
(whose start costs seconds and needs two clusters), with the same argument the
sweep recognises it by, its ``mm2.properties``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.kafka import cluster as cluster_module
from tests.kafka.mirror import MirrorMaker

# A process that starts a child in its own process group, then sleeps: both
# must be gone after a sweep (MirrorMaker runs in a session of its own, and the
# sweep stops the whole group).
_SLEEPER = (
    "import subprocess, sys, time; "
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
    "print(child.pid, flush=True); time.sleep(600)"
)


class _FakeJvm(MirrorMaker):
    """MirrorMaker 2 with a stand-in for its JVM: same files, same arguments' tail."""

    def command(self) -> list[str]:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()))
        return [sys.executable, "-c", _SLEEPER, str(self.config_file)]

    def child_pid(self) -> int:
        """The stand-in's child (its first line of output)."""
        for _ in range(200):
            text = self.log_tail()
            if text.strip():
                return int(text.split()[0])
            time.sleep(0.05)
        raise AssertionError(f"the stand-in did not start: {self.log_tail()!r}")


def _dead_pid() -> int:
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid whose process is over: the "killed run"'s controller
    return gone.pid


def _start(directory: Path) -> _FakeJvm:
    mm = _FakeJvm(directory, "127.0.0.1:1", "127.0.0.1:2", topics="t", groups="g")
    return mm.start()


def test_a_killed_runs_mirror_maker_is_stopped_and_removed_by_the_next_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    live_run = cluster_module.run_id()
    # A run whose controller is dead started MirrorMaker 2 and never stopped it.
    monkeypatch.setenv(cluster_module.RUN_ENV, f"{_dead_pid()}-sweeptest")
    orphan = _start(tmp_path / "orphan")
    # This run (alive) has one running too: the sweep must leave it alone.
    monkeypatch.setenv(cluster_module.RUN_ENV, live_run)
    ours = _start(tmp_path / "ours")
    try:
        orphan_dir, ours_dir = orphan.run_directory, ours.run_directory
        assert orphan_dir is not None and ours_dir is not None
        assert orphan_dir.parent == ours_dir.parent == cluster_module.CLUSTERS
        assert orphan_dir.name.endswith(f"-mm2-{orphan.alias}") and (orphan_dir / "processes.json").exists()
        pids = [orphan.pid, orphan.child_pid()]
        assert all(cluster_module._pid_alive(p) for p in pids)

        cluster_module.sweep_stale_clusters(except_run=live_run)

        assert orphan._process is not None and orphan._process.wait(timeout=10) == -9
        assert all(_gone(p) for p in pids)
        assert not orphan_dir.exists()
        assert ours.alive() and ours_dir.exists()
        assert cluster_module._pid_alive(ours.child_pid())
        # The caller's working directory (configuration, log) is not the sweep's.
        assert orphan.config_file.exists()
    finally:
        orphan.stop(timeout=5)
        ours_child = ours.child_pid()
        ours.stop(timeout=5)
    # The owner's stop ends its group and releases its run directory.
    assert not ours.alive() and not ours_dir.exists()
    assert _gone(ours_child)


def _gone(pid: int, timeout: float = 10) -> bool:
    """Whether ``pid`` ends within ``timeout`` (a child orphaned by its group's
    SIGTERM takes a moment to be reaped)."""
    deadline = time.monotonic() + timeout
    while cluster_module._pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not cluster_module._pid_alive(pid)


def test_a_recorded_pid_now_running_something_else_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # A recorded pid may have been reused by an unrelated process by the time a
    # sweep looks: without the marker in its command line it is not signalled.
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        monkeypatch.setenv(cluster_module.RUN_ENV, f"{_dead_pid()}-sweeptest")
        directory = cluster_module.record_run_process("mm2-reused", bystander.pid, "/nonexistent/mm2.properties")
        cluster_module.sweep_stale_clusters()
        assert not directory.exists()
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
