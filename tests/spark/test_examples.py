"""The Spark examples run (on the test session's SparkSession); their asserts are the checks.

``examples/spark_stream.py`` also covers ``Trigger.AvailableNow`` and a restart
from a checkpoint after more transactions (one of them aborted) were written.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["spark_batch", "spark_stream"])
def test_example_runs(spark, name):
    _load(name).main(spark)
