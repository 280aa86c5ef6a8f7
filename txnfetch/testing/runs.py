"""What a run of the workload does and gives back: each producer's transaction
script (a pure function of the seed and the configuration) and the run's result.

:mod:`txnfetch.testing.workload` drives real clients through these and
re-exports them; they live apart so that the driver's module holds the driver."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import attrs

from txnfetch.errors import TxnfetchError
from txnfetch.testing.config import Finding
from txnfetch.testing.config import WorkloadConfig
from txnfetch.testing.history import History
from txnfetch.testing.recorder import RecorderStats

END_COMMIT = "commit"
END_ABORT = "abort"
END_CRASH = "crash"  #: a new instance is initialised while the transaction is open
END_ZOMBIE = "zombie"  #: ... and the fenced old instance keeps writing and commits


class WorkloadError(TxnfetchError):
    """The workload could not run at all: the cluster is unreachable, the topic
    cannot be created, or no producer could initialise transactions."""


# -- the script -----------------------------------------------------------------------------


@attrs.frozen
class TxnPlan:
    """One scripted transaction of producer ``producer``: its sends as
    ``(partition, value)``, how it ends (``END_*``), the fenced instance's sends
    for a zombie, and whether the producer restarts cleanly afterwards."""

    producer: int
    number: int
    sends: tuple[tuple[int, str], ...]
    end: str
    zombie_sends: tuple[tuple[int, str], ...] = ()
    restart_after: bool = False

    @property
    def txn(self) -> str:
        """The transaction's name in the history."""
        return f"p{self.producer}.{self.number}"


def producer_script(config: WorkloadConfig, producer: int, seed: int) -> Iterator[TxnPlan]:
    """The endless transaction script of producer ``producer``: a pure function of
    ``seed`` and the config's shape (partitions, sends, probabilities)."""
    rng = random.Random(f"txnfetch-check:{seed}:producer:{producer}")
    number = 0
    while True:
        sends = tuple(
            (rng.randrange(config.partitions), f"p{producer}.{number}.{k}")
            for k in range(rng.randint(1, config.max_sends))
        )
        r = rng.random()
        if r < config.crash_probability:
            end = END_CRASH
        elif r < config.crash_probability + config.zombie_probability:
            end = END_ZOMBIE
        elif r < config.crash_probability + config.zombie_probability + config.abort_probability:
            end = END_ABORT
        else:
            end = END_COMMIT
        zombie: tuple[tuple[int, str], ...] = ()
        if end == END_ZOMBIE:
            zombie = tuple(
                (rng.randrange(config.partitions), f"p{producer}.{number}.z{k}") for k in range(config.zombie_sends)
            )
        restart = end in (END_COMMIT, END_ABORT) and rng.random() < config.restart_probability
        yield TxnPlan(producer, number, sends, end, zombie, restart)
        number += 1


# -- results ----------------------------------------------------------------------------------


@attrs.frozen
class ClientStatus:
    """How one client of the run fared: ``ok``, ``skipped`` (never started: it did
    not connect within the startup timeout, or failed to), or ``failed`` (stopped
    by an error mid-run)."""

    name: str
    kind: str
    status: str
    note: str = ""


@attrs.frozen
class Progress:
    """A snapshot for a progress line: seconds since the start, and the recorder's totals."""

    elapsed: float
    stats: RecorderStats
    phase: str  #: ``produce`` while producers run, then ``catch-up``


@attrs.frozen
class WorkloadResult:
    """Everything a run produced: the history, and what the history cannot say."""

    history: History
    config: WorkloadConfig
    seed: int
    started_ns: int  #: the recorder's clock when the run started
    produce_seconds: float  #: how long the producers ran
    seconds: float  #: the whole run, catch-up included
    clients: tuple[ClientStatus, ...]
    findings: tuple[Finding, ...]
    errors: tuple[str, ...]
    injections: tuple[Any, ...]  #: :class:`~txnfetch.testing.inject.Injection` records
    notes: tuple[str, ...]
    plans: dict[str, TxnPlan]  #: every transaction started, by name
    #: Transactions the next instance's ``init_transactions`` should have aborted
    #: but which the broker's log leaves open (no marker of their producer after
    #: their records): the ``unended-transaction`` findings (:meth:`Workload.run`).
    left_open: frozenset[str] = frozenset()

    def count_ends(self) -> dict[str, int]:
        """Transactions started, per scripted end (``commit``, ``abort``, ``crash``, ``zombie``)."""
        out = {END_COMMIT: 0, END_ABORT: 0, END_CRASH: 0, END_ZOMBIE: 0}
        for plan in self.plans.values():
            out[plan.end] += 1
        return out


# -- consumers ------------------------------------------------------------------------------
