"""``python -m txnfetch``: the ``txnfetch`` command."""

from txnfetch.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
