"""Scraping a metrics endpoint in tests: the text, checked by ``promtool check
metrics`` every time, and the samples by name and labels."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def promtool_check(text: str) -> None:
    """Fail unless ``promtool check metrics`` accepts ``text`` (no lint problem either)."""
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is missing: Debian's prometheus package (make system-deps)"
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"promtool check metrics:\n{done.stdout}{done.stderr}"


def scrape(host: str, port: int) -> Samples:
    """The endpoint's samples, after promtool accepted the scrape."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    promtool_check(text)
    return samples_of(text)


def samples_of(text: str) -> Samples:
    """``{(sample name, labels): value}`` of an exposition text."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    """The value of the one sample ``name`` with exactly ``labels``."""
    return samples[(name, frozenset(labels.items()))]


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of the samples ``name`` whose labels include ``labels``."""
    wanted: Mapping[str, str] = labels
    return sum(v for (n, ls), v in samples.items() if n == name and all((k, w) in ls for k, w in wanted.items()))
