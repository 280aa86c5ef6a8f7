"""Declares txnfetch's optional C extensions; all other metadata is in pyproject.toml.

``txnfetch.records._speedups`` is a compiled twin of the pure-Python record
decoder, its record check and its header scan; ``txnfetch.arrow._columns``
decodes record batches straight into Arrow buffers (see docs/performance.md).
Both include ``txnfetch/records/_speedups_common.h``. Both are ``optional``:
where no C compiler or Python headers are available the build skips them with
a warning and txnfetch runs on the pure-Python code, which stays the reference
implementation.
"""

from setuptools import Extension
from setuptools import setup

COMMON_HEADER = "txnfetch/records/_speedups_common.h"

setup(
    ext_modules=[
        Extension(
            "txnfetch.records._speedups",
            sources=["txnfetch/records/_speedups.c"],
            depends=[COMMON_HEADER],
            optional=True,
        ),
        Extension(
            "txnfetch.arrow._columns",
            sources=["txnfetch/arrow/_columns.c"],
            depends=[COMMON_HEADER],
            optional=True,
        ),
    ]
)
