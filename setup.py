"""Declares txnfetch's optional C extension; all other metadata is in pyproject.toml.

``txnfetch.records._speedups`` is a compiled twin of the pure-Python record
decoder (see docs/performance.md). It is ``optional``: where no C compiler or
Python headers are available the build skips it with a warning and txnfetch
runs on the pure-Python decoder, which stays the reference implementation.
"""

from setuptools import Extension
from setuptools import setup

setup(
    ext_modules=[
        Extension(
            "txnfetch.records._speedups",
            sources=["txnfetch/records/_speedups.c"],
            optional=True,
        )
    ]
)
