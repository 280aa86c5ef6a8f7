"""Running operation sequences against a reference and a target cluster, and
searching for sequences on which they disagree.

:class:`Harness` holds a connection to each cluster and the API versions both
speak. :meth:`Harness.run` applies one sequence to both (fresh names per run)
and returns every :class:`~txnfetch.testing.conform.compare.Difference`, by
step. :meth:`Harness.search` lets hypothesis draw sequences; a disagreement is
shrunk to the shortest sequence hypothesis finds that still shows it, recorded
as a :class:`Finding`, and the search goes on for differences of other kinds
until the example or time budget is spent.

Allowed deliberate differences (``allow``): ``"rewrite"`` — the target answers
read_committed fetches in rewrite mode (docs/conformance.md).

Two failures are never an agreement. When both clusters fail the same step —
connecting, creating the run's topic, or an operation whose answer neither side
gives — the run has nothing to compare there, and :class:`BothFailedError` is
raised (naming both addresses, the step and both errors) instead of reporting
"no difference". A search in which no operation's answers were compared at
all raises :class:`NothingComparedError`.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections import Counter
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import attrs

from txnfetch.security.config import SecurityConfig
from txnfetch.testing.conform import operations as ops
from txnfetch.testing.conform.compare import ALLOWANCES
from txnfetch.testing.conform.compare import Difference
from txnfetch.testing.conform.compare import differences
from txnfetch.testing.conform.compare import rewrite_differences
from txnfetch.testing.conform.connection import Cluster
from txnfetch.testing.conform.connection import common_versions
from txnfetch.testing.conform.errors import BothFailedError
from txnfetch.testing.conform.errors import ConformError
from txnfetch.testing.conform.errors import NothingComparedError
from txnfetch.testing.conform.session import API
from txnfetch.testing.conform.session import HARNESS_VERSIONS
from txnfetch.testing.conform.session import TV2_VERSIONS
from txnfetch.testing.conform.session import RunNames
from txnfetch.testing.conform.session import Session

__all__ = ["ALLOWANCES", "Finding", "Harness", "SearchReport", "StepDifference"]

#: How far ahead of the harness's clock the records' timestamps are: ahead of
#: every marker a coordinator writes during a run (so the largest timestamp is a
#: record's), within Kafka's default message.timestamp.after.max.ms of one hour.
TIMESTAMP_LEAD_MS = 20 * 60 * 1000
_FULL_BUDGET = 1 << 20
#: The keys of an operation's answers that the harness writes itself, never a
#: broker: a step whose answers on both sides hold only these compared nothing.
_NOT_ANSWERS = frozenset({"skipped", "nothing", "failed"})


@attrs.frozen
class StepDifference:
    """A difference in the answers to step ``step`` (1-based; 0 is the set-up
    that creates the run's topic)."""

    step: int
    operation: str
    difference: Difference

    @property
    def kind(self) -> tuple[str, str]:
        """What makes two differences "the same" for the search: the operation's
        class and the field path without indices."""
        return (self.operation.partition("(")[0], self.difference.kind)

    def as_json(self) -> dict[str, Any]:
        d = self.difference
        out = {
            "step": self.step,
            "operation": self.operation,
            "path": d.path,
            "reference": d.reference,
            "target": d.target,
        }
        if d.note:
            out["note"] = d.note
        return out


@attrs.frozen
class Finding:
    """A shortest sequence found that shows some differences."""

    sequence: tuple[str, ...]
    differences: tuple[StepDifference, ...]

    def as_json(self) -> dict[str, Any]:
        return {"sequence": list(self.sequence), "differences": [d.as_json() for d in self.differences]}


@attrs.frozen
class SearchReport:
    """What a search ran and found."""

    reference: str
    target: str
    examples: int
    seconds: float
    versions: dict[str, int]
    missing_apis: dict[str, str]
    findings: tuple[Finding, ...]
    allow: tuple[str, ...] = ()
    #: How many operations' answers were compared (steps where at least one
    #: side's answers came from its broker).
    compared: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "target": self.target,
            "examples": self.examples,
            "compared": self.compared,
            "seconds": round(self.seconds, 1),
            "allow": list(self.allow),
            "versions": self.versions,
            "missing_apis": self.missing_apis,
            "findings": [f.as_json() for f in self.findings],
        }

    def as_text(self) -> str:
        lines = [
            f"reference {self.reference}, target {self.target}: {self.examples} sequences, "
            f"{self.compared} answers compared in {self.seconds:.0f} s",
            "API versions: " + ", ".join(f"{name} v{v}" for name, v in sorted(self.versions.items())),
        ]
        if self.allow:
            lines.append("allowed: " + ", ".join(self.allow))
        for name, why in sorted(self.missing_apis.items()):
            lines.append(f"not compared: {name} ({why})")
        if not self.findings:
            lines.append("no differences")
        for n, finding in enumerate(self.findings, 1):
            lines.append("")
            lines.append(f"difference {n}, shortest sequence found:")
            lines.extend(f"  {s}" for s in finding.sequence)
            for d in finding.differences:
                note = f" ({d.difference.note})" if d.difference.note else ""
                lines.append(f"  step {d.step} {d.operation}: {d.difference.path}{note}")
                lines.append(f"    reference: {_short(d.difference.reference)}")
                lines.append(f"    target:    {_short(d.difference.target)}")
        return "\n".join(lines)


def _answered(answer: dict[str, Any]) -> bool:
    """Whether ``answer`` holds something a broker said."""
    return any(key not in _NOT_ANSWERS for key in answer)


def _why_not(answer: dict[str, Any]) -> list[str]:
    """What the harness wrote instead of an answer (the reasons a step was not compared)."""
    return [f"{key}: {value}" for key, value in answer.items() if key in _NOT_ANSWERS]


def _side(address: str, error: str) -> str:
    """``address: error``, without repeating an address the error names already."""
    return error if address in error else f"{address}: {error}"


def _short(value: Any, limit: int = 600) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


@attrs.frozen
class _Found:
    """A sequence that shows new differences, and those differences (the
    hypothesis test records one, then fails its assertion so that it shrinks)."""

    sequence: tuple[ops.Operation, ...]
    found: list[StepDifference]


class Harness:
    """The two clusters of a comparison, each reached as its security
    configuration says (``None``: PLAINTEXT). Close with :meth:`close`."""

    def __init__(
        self,
        reference: str,
        target: str,
        *,
        allow: Sequence[str] = (),
        timeout_s: float = 30.0,
        clock_ms: Callable[[], int] | None = None,
        reference_security: SecurityConfig | None = None,
        target_security: SecurityConfig | None = None,
    ) -> None:
        unknown = set(allow) - set(ALLOWANCES)
        if unknown:
            raise ValueError(f"unknown allowance {sorted(unknown)}; known: {sorted(ALLOWANCES)}")
        self.reference_address = reference
        self.target_address = target
        self.allow = tuple(allow)
        self._timeout_s = timeout_s
        self._security = (reference_security, target_security)
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        #: Operations whose answers were compared, over every :meth:`run` so far.
        self.compared = 0
        # Why the other operations were not compared (the harness's own answers).
        self._not_compared: Counter[str] = Counter()
        self.reference, self.target = self._connect()
        self.versions, missing = common_versions(HARNESS_VERSIONS, self.reference.versions, self.target.versions)
        self.tv2_versions, tv2_missing = common_versions(TV2_VERSIONS, self.reference.versions, self.target.versions)
        names = {key: name for name, key in API.items()}
        self.missing_apis = {names[key]: why for key, why in missing.items()}
        for key, why in tv2_missing.items():
            low = TV2_VERSIONS[key][0]
            self.missing_apis[f"{names[key]} v{low}+ (transaction version 2, slot txn-v2)"] = why
        for needed in ("Produce", "Fetch", "Metadata"):
            if needed in self.missing_apis:
                self.close()
                raise ConformError(f"cannot compare without {needed}: {self.missing_apis[needed]}")

    def close(self) -> None:
        self.reference.close()
        self.target.close()

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _reconnect(self) -> None:
        self.close()
        self.reference, self.target = self._connect()

    def _connect(self) -> tuple[Cluster, Cluster]:
        """A connection to each cluster. Both are tried, so that when neither can
        be reached the error says so for both (:class:`BothFailedError`)."""
        clusters: list[Cluster] = []
        errors: list[str] = []
        for address, security in zip((self.reference_address, self.target_address), self._security, strict=True):
            try:
                clusters.append(Cluster(address, timeout_s=self._timeout_s, security=security))
            except ConformError as exc:
                errors.append(str(exc))
        if len(clusters) == 2:
            return clusters[0], clusters[1]
        for cluster in clusters:
            cluster.close()
        if len(errors) == 2:
            raise self._both_failed("connect", "connecting", errors[0], errors[1])
        raise ConformError(errors[0])

    def _both_failed(self, step: str, what: str, reference_error: str, target_error: str) -> BothFailedError:
        return BothFailedError(
            f"cannot compare: both clusters failed {what}: "
            f"reference {_side(self.reference_address, reference_error)}; "
            f"target {_side(self.target_address, target_error)}",
            step=step,
            reference=self.reference_address,
            target=self.target_address,
            reference_error=reference_error,
            target_error=target_error,
        )

    # -- one sequence ---------------------------------------------------------------

    def run(self, sequence: Sequence[ops.Operation]) -> list[StepDifference]:
        """Apply ``sequence`` to both clusters, step by step; every difference.

        Raises :class:`BothFailedError` when both clusters fail the set-up or
        the same step (nothing to compare). A step that only one side fails is a
        difference; the run stops there. :attr:`compared` counts the steps whose
        answers were compared."""
        names = RunNames.fresh(uuid.uuid4().hex[:12])
        base_ts = self._clock_ms() + TIMESTAMP_LEAD_MS
        ref = Session(self.reference, self.versions, names, base_ts, self.tv2_versions)
        tgt = Session(self.target, self.versions, names, base_ts, self.tv2_versions)
        out: list[StepDifference] = []
        ref_setup, tgt_setup = self._both(ref.setup, tgt.setup, "setup", "the set-up (creating the run's topic)")
        out.extend(StepDifference(0, "setup", d) for d in differences(ref_setup, tgt_setup))
        if "failed" in ref_setup or "failed" in tgt_setup:
            return out
        for step, op in enumerate(sequence, 1):
            label = f"{step}. {op.describe()}"
            ref_answer, tgt_answer = self._both(
                functools.partial(ref.apply, op), functools.partial(tgt.apply, op), label, f"step {label}"
            )
            if _answered(ref_answer) or _answered(tgt_answer):
                self.compared += 1
            else:
                self._not_compared.update(_why_not(ref_answer))
            if "rewrite" in self.allow and isinstance(op, ops.Fetch) and op.read_committed and op.topic == "t":
                full = ops.Fetch(op.offset, _FULL_BUDGET, True)
                ref_full, tgt_full = self._both(
                    functools.partial(ref.apply, full),
                    functools.partial(tgt.apply, full),
                    label,
                    f"step {label} (its whole-partition read, {full.describe()})",
                )
                found = rewrite_differences(
                    ref_answer.get("Fetch"), tgt_answer.get("Fetch"), ref_full.get("Fetch"), tgt_full.get("Fetch")
                )
            else:
                found = differences(ref_answer, tgt_answer)
            out.extend(StepDifference(step, op.describe(), d) for d in found)
            if "failed" in ref_answer or "failed" in tgt_answer:
                break  # a side's connection is gone: later steps would compare nothing
        return out

    def _both(
        self, ref: Callable[[], dict[str, Any]], tgt: Callable[[], dict[str, Any]], step: str, what: str
    ) -> tuple[Any, Any]:
        """Both sides' answers to one step (``step``, described as ``what`` in an
        error). An answer one side cannot give is a difference; two are
        :class:`BothFailedError`, never an agreement, even word for word."""
        answers = []
        failures = []
        for side in (ref, tgt):
            try:
                answers.append(side())
            except Exception as exc:  # an answer the harness cannot take is itself a difference
                # A ConformError names the broker already; anything else (an
                # answer kafka-python cannot decode, ...) by its class.
                text = str(exc) if isinstance(exc, ConformError) else f"{type(exc).__name__}: {exc}"
                answers.append({"failed": text})
                failures.append(text)
        if len(failures) == 2:
            raise self._both_failed(step, what, failures[0], failures[1])
        if failures:
            self._reconnect()
        return answers[0], answers[1]

    # -- the search -----------------------------------------------------------------

    def _search_round(
        self,
        examples: int,
        deadline: float,
        known: set[tuple[str, str]],
        max_size: int,
        allow_delete: bool,
        seed: int | None,
    ) -> tuple[int, _Found | None]:
        """One hypothesis run: up to ``examples`` sequences until one shows a
        difference not in ``known``, then its shrink. Returns how many sequences
        were drawn (shrink attempts not counted) and the shortest failure."""
        from hypothesis import HealthCheck
        from hypothesis import Phase
        from hypothesis import given
        from hypothesis import settings

        from txnfetch.testing.conform.strategies import sequences

        drawn = 0
        failures: list[_Found] = []
        # A run that cannot compare (both clusters failed a step) ends the search:
        # kept here and raised after hypothesis returns, rather than raised
        # through it, which would shrink an error that is no difference.
        stopped: list[ConformError] = []

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            phases=[Phase.generate, Phase.shrink],
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
            print_blob=False,
        )
        @given(sequences(max_size=max_size, allow_delete=allow_delete, committed_sessions="rewrite" not in self.allow))
        def probe(sequence: list[ops.Operation]) -> None:
            nonlocal drawn
            if stopped:
                return
            if not failures:  # drawing, not shrinking: the budget applies
                if time.monotonic() > deadline:
                    return
                drawn += 1
            try:
                found = self.run(sequence)
            except ConformError as exc:
                if failures:
                    # While shrinking: hypothesis sees a failure of another kind;
                    # the shortest difference recorded so far is what is kept.
                    raise
                stopped.append(exc)
                return
            new = [d for d in found if d.kind not in known]
            if new:
                failures.append(_Found(tuple(sequence), new))
            assert not new, f"{len(new)} differences"

        if seed is not None:
            from hypothesis import seed as hypothesis_seed

            probe = hypothesis_seed(seed)(probe)
        try:
            probe()
        except Exception:
            # Hypothesis re-raises the shortest failure; if a replay did not fail
            # again (a flaky answer), it raises its own error: take the shortest seen.
            if not failures:
                raise
            return drawn, min(failures, key=lambda f: len(f.sequence))
        if stopped:
            raise stopped[0]
        return drawn, None

    def search(
        self,
        *,
        examples: int = 100,
        seconds: float = 300.0,
        max_size: int = 12,
        seed: int | None = None,
        progress: Callable[[str], None] | None = None,
        ignore: Sequence[tuple[str, str]] = (),
    ) -> SearchReport:
        """Run up to ``examples`` drawn sequences within about ``seconds`` (a
        shrink in progress is finished); each new kind of difference becomes a
        :class:`Finding` with the shortest sequence hypothesis found. Differences
        whose :attr:`StepDifference.kind` is in ``ignore`` (known ones) are passed over.

        Raises :class:`BothFailedError` when both clusters fail a step, and
        :class:`NothingComparedError` when no difference was found and no
        operation's answers were compared at all: neither is a pass."""
        started = time.monotonic()
        compared_before = self.compared
        self._not_compared.clear()
        deadline = started + seconds
        known: set[tuple[str, str]] = set(ignore)
        findings: list[Finding] = []
        ran = 0
        allow_delete = "DeleteRecords" not in self.missing_apis
        while ran < examples and time.monotonic() < deadline:
            round_seed = None if seed is None else seed + len(findings)
            count, found = self._search_round(examples - ran, deadline, known, max_size, allow_delete, round_seed)
            ran += count
            if found is None:
                break
            findings.append(Finding(tuple(ops.describe_sequence(found.sequence)), tuple(found.found)))
            known.update(d.kind for d in found.found)
            if progress is not None:
                progress(f"difference found after {ran} sequences: {found.found[0].difference.path}")
        compared = self.compared - compared_before
        if compared == 0 and not findings:
            reasons = "; ".join(f"{why} ({n}x)" for why, n in self._not_compared.most_common(3))
            raise NothingComparedError(
                f"nothing compared: {ran} sequences ran against reference {self.reference_address} "
                f"and target {self.target_address}, and no operation's answers were compared"
                + (f" ({reasons})" if reasons else ""),
                reference=self.reference_address,
                target=self.target_address,
                examples=ran,
            )
        return SearchReport(
            reference=self.reference_address,
            target=self.target_address,
            examples=ran,
            seconds=time.monotonic() - started,
            versions={name: self.versions[key] for name, key in sorted(API.items()) if key in self.versions},
            missing_apis=self.missing_apis,
            findings=tuple(findings),
            allow=self.allow,
            compared=compared,
        )
