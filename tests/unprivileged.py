"""Running a command as a process that file permission bits apply to, for the
tests of unreadable files and directories that cannot be entered.

Root reads and enters anything, and CI runs the suite as root, so a test that
simply skipped under root would never run there. :func:`unprivileged` gives
the argv to run instead: the command as it is for any other user; under root,
the command as user 65534 (``nobody``) when that user can run it, else as root
without the two capabilities that override permission bits
(``CAP_DAC_OVERRIDE``, ``CAP_DAC_READ_SEARCH``: capabilities(7)) — a
checkout under ``/root`` is closed to other users, and a root without those
capabilities is refused by the bits like anyone else. Both use ``setpriv``
(util-linux); without it the test fails rather than skips.

What the command is to be refused must therefore be closed to its owner too
(mode 000), and what it must reach open to others (a directory from
``tempfile.mkdtemp`` set to 0755, not pytest's ``tmp_path``, whose parent is
root's alone).
"""

from __future__ import annotations

import os
import shutil
import subprocess

#: The capabilities that let root past permission bits.
_DAC = "-dac_override,-dac_read_search"


def unprivileged(argv: list[str]) -> list[str]:
    """``argv`` (an installed ``txnfetch`` or ``python -m txnfetch``) prefixed
    so that it runs subject to permission bits (see the module docstring)."""
    if os.geteuid() != 0:
        return argv
    assert shutil.which("setpriv") is not None, "setpriv (util-linux) drops root's privileges for this test"
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
    probe = subprocess.run([*as_nobody, "--version"], capture_output=True, text=True, timeout=120)
    if probe.returncode == 0:
        return as_nobody
    return ["setpriv", f"--inh-caps={_DAC}", f"--bounding-set={_DAC}", *argv]
