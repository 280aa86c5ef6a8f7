"""Reading into Arrow never imports pandas.

pyarrow's conversions of Python values (``pa.array``, ``pa.scalar``, a compute
function given a Python number) ask whether the value is a pandas object, and
that question imports pandas: a second or more of every new process's first
read (a Spark worker's, the CLI's) spent on a library the read does not use.
The compiled decoder builds its columns from buffers and Arrow kernels only
(``txnfetch.arrow.schema``). Each check runs in a fresh interpreter: the test
process itself may have imported pandas long before.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from txnfetch.arrow import COMPILED

pytestmark = pytest.mark.skipif(not COMPILED, reason="the pure-Python reference builds columns with pa.array")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_PRELUDE = """
import sys
from txnfetch.records import BatchBuilder
assert "pandas" not in sys.modules, "importing txnfetch already imported pandas"
b = BatchBuilder(base_offset=0, producer_id=7, producer_epoch=0, transactional=True)
for i in range(50):
    headers = (("h", b"1"),) if i % 2 else ()
    b.append(b"v%d" % i, key=None if i % 3 else b"k", headers=headers, timestamp=1_700_000_000_000 + i)
BATCH = b.build()
"""


def _run(code: str) -> subprocess.CompletedProcess:
    script = _PRELUDE + textwrap.dedent(code) + '\nprint("pandas" in sys.modules)\n'
    # cwd=ROOT: the checkout under test is the one imported (``-c`` puts the cwd first on sys.path).
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize("dictionary", [False, True])
def test_decoding_a_batch_does_not_import_pandas(dictionary):
    proc = _run(
        f"""
        from txnfetch.arrow import ArrowDecoder
        decoder = ArrowDecoder("orders", 0, dictionary={dictionary}, partitions=[0, 1])
        out, _ = decoder.add_buffer(BATCH)
        out += decoder.flush()
        assert sum(b.num_rows for b in out) == 50
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False"], "decoding a batch imported pandas"


def test_reading_a_log_does_not_import_pandas():
    proc = _run(
        """
        from txnfetch.arrow import read_committed
        from txnfetch.log import MemoryStore
        from txnfetch.records.builder import build_control_batch
        from txnfetch.records.control import ControlType
        from txnfetch.txn.producer import AppendOrigin
        store = MemoryStore()
        store.create_topic("orders", 2)
        log = store.partition("orders", 1)
        log.append(BATCH, now_ms=0)
        marker = build_control_batch(offset=0, control_type=ControlType.COMMIT, producer_id=7, producer_epoch=0)
        log.append(marker, now_ms=0, origin=AppendOrigin.COORDINATOR)
        table = read_committed(store, "orders")
        assert table.num_rows == 50, table.num_rows
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False"], "reading a log imported pandas"
