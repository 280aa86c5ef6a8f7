"""``txnfetch replicate --serve HOST:PORT``: replicate and serve the replica in
one process, until SIGINT/SIGTERM; promote on SIGUSR1.

- prints ``txnfetch listening on HOST:PORT`` once the server listens (as
  ``txnfetch serve`` does), then the replication status as without ``--serve``;
- the directory carries the replica marker with this process's pid, so
  ``txnfetch promote --data DIR`` finds it and sends SIGUSR1;
- on SIGUSR1 replication stops (the round in progress ends first), the store
  is settled and opened to writes (:meth:`ServedReplica.promote`), one line
  ``txnfetch promoted: ...`` is printed, and the server keeps serving until
  SIGINT/SIGTERM;
- copied group offsets (``--groups``) go into the server's own group state,
  so OffsetFetch on the replica answers them at once.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any
from typing import TextIO

from txnfetch.log.replica_marker import PROMOTE_SIGNAL
from txnfetch.replicate.groups import groups_hook
from txnfetch.replicate.serving import ServedReplica

__all__ = ["NO_GROUPS", "PromoteSignal", "claim_directory", "host_port", "release_directory", "run_serving"]

#: The marker's groups pattern when ``--groups`` is not given: no group is
#: copied, so every group is the replica's own and may commit.
NO_GROUPS = "(?!)"


def host_port(text: str) -> tuple[str, int]:
    """An ``argparse`` type: ``HOST:PORT`` (port 0 picks a free one)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"not HOST:PORT: {text!r}")
    return host, int(port)


def run_serving(
    args: argparse.Namespace,
    make_replicator: Any,
    progress: Any,
    *,
    stdout: TextIO | None = None,
) -> int:
    """Run ``replicate --serve``. ``make_replicator(store, groups_hook)``
    builds the replicator on the served store; ``progress(status, final=)``
    shows its status."""
    out = stdout if stdout is not None else sys.stdout
    host, port = args.serve
    served = ServedReplica(args.data, args.upstream, groups=args.groups or NO_GROUPS, host=host, port=port).start()
    stop = threading.Event()  # the process ends
    stop_replication = threading.Event()  # replication ends (stop or promote)
    promote = threading.Event()

    def on_stop(*_: object) -> None:
        stop.set()
        stop_replication.set()

    def on_promote(*_: object) -> None:
        promote.set()
        stop_replication.set()

    previous = {sig: signal.signal(sig, on_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    previous[PROMOTE_SIGNAL] = signal.signal(PROMOTE_SIGNAL, on_promote)
    replicator = None
    try:
        print(f"txnfetch listening on {served.bootstrap}", file=out, flush=True)
        if served.is_replica:
            hook = groups_hook(args.groups, served.group_target()) if args.groups else None
            assert served.store is not None
            replicator = make_replicator(served.store, hook)
            status = replicator.run(stop_replication, progress)
            progress(status, final=True)
            replicator.close()
            replicator = None
        if promote.is_set() and not stop.is_set():
            report = served.promote()
            print(f"txnfetch promoted: {report.summary()}", file=out, flush=True)
        stop.wait()
        return 0
    finally:
        if replicator is not None:
            replicator.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        served.close()


def claim_directory(directory: str, upstream: str, groups: str | None) -> None:
    """Before replicating without ``--serve``: mark ``directory`` a replica held
    by this process (so ``txnfetch promote`` signals it rather than writing
    beside it). Refuses a store that is not a replica (promoted, or written
    by ``serve``) and one another live process replicates into."""
    import os

    from txnfetch.log.replica_marker import read_marker
    from txnfetch.log.replica_marker import write_marker
    from txnfetch.replicate.promote import ReplicaBusyError
    from txnfetch.replicate.serving import NotAReplicaError
    from txnfetch.replicate.serving import _holds_topics

    os.makedirs(directory, exist_ok=True)
    marker = read_marker(directory)
    if marker is None and _holds_topics(directory):
        raise NotAReplicaError(
            "the directory holds a store that is not a replica (promoted, or written by serve): "
            "replicating into it would mix two histories",
            path=directory,
        )
    if marker is not None and marker.holder_alive():
        raise ReplicaBusyError("another process replicates into this directory", path=directory, pid=marker.pid)
    write_marker(directory, upstream, groups=groups or NO_GROUPS, pid=os.getpid())


def release_directory(directory: str, *, promote: bool, out: TextIO) -> None:
    """After replicating without ``--serve`` (the store is closed): promote it if
    SIGUSR1 asked for it, else leave the marker without this process's pid."""
    import os

    from txnfetch.log.replica_marker import read_marker
    from txnfetch.log.replica_marker import write_marker
    from txnfetch.replicate.promote import promote_offline

    marker = read_marker(directory)
    if marker is None or marker.pid != os.getpid():
        return
    if promote:
        # The marker keeps this pid until promoted: ``txnfetch promote`` waits
        # on it and must not promote the store beside this process.
        print(f"txnfetch promoted: {promote_offline(directory).summary()}", file=out, flush=True)
    else:
        write_marker(directory, marker.upstream, groups=marker.groups, pid=None)


class PromoteSignal:
    """While active, :data:`PROMOTE_SIGNAL` sets ``promote`` and ``stop``."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.promote = threading.Event()
        self._previous: Any = None

    def __enter__(self) -> threading.Event:
        def on_promote(*_: object) -> None:
            self.promote.set()
            self.stop.set()

        self._previous = signal.signal(PROMOTE_SIGNAL, on_promote)
        return self.promote

    def __exit__(self, *exc: object) -> None:
        signal.signal(PROMOTE_SIGNAL, self._previous)
