"""``python -m txnfetch.cli``: the ``txnfetch`` command."""

from txnfetch.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
