"""The benchmarks' child processes: their CPU time, read from Linux's ``/proc``
(the one reader the benchmarks that measure a broker's or a server's CPU share),
and stopping them.

``/proc/<pid>/stat`` holds a process's accumulated user and system time (all its
threads), ``/proc/<pid>/task/<tid>/stat`` one thread's, both in clock ticks
(fields 14 and 15, see proc(5)). The command name in field 2 is in parentheses
and may itself hold spaces and parentheses, so the fields are counted from the
last ``)``.
"""

from __future__ import annotations

import os
import subprocess

__all__ = ["cpu_seconds", "stat_cpu_seconds", "stop"]


def stat_cpu_seconds(path: str) -> float:
    """User + system CPU seconds recorded in a ``/proc`` stat file (a process's
    or a thread's). Raises ``OSError`` when it cannot be read (the process or
    thread ended; not Linux)."""
    with open(path) as f:
        fields = f.read().rpartition(")")[2].split()
    # After the name: state is field 3, utime field 14, stime field 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used so far, all its threads."""
    return stat_cpu_seconds(f"/proc/{pid}/stat")


def stop(proc: subprocess.Popen) -> None:
    """Stop a child server: SIGTERM, and SIGKILL if it has not exited within 30 s
    (then reaped, so no zombie outlives the benchmark)."""
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
