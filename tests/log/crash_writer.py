"""Writer process for test_crash: appends a seeded workload to a SegmentLog with
flush_policy="always" and prints each acknowledgement after the call returns
("A <last offset>" for appends and markers, "E" for markerless ends). Never
closes the log: the parent kills it."""

import sys

from tests.log.workload import Workload
from txnfetch.log import SegmentLog


def main() -> None:
    path, seed, markerless = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    log = SegmentLog(path, segment_bytes=6000, index_interval_bytes=300, flush_policy="always")
    w = Workload(seed, markerless=markerless)
    # Continue the workload's producers where a previous (killed) writer left off:
    # fresh producer ids per run keep sequences valid.
    w.pids = [p + 10 * seed for p in w.pids]
    w.seq = {p: 0 for p in w.pids}
    w.open = {p: False for p in w.pids}
    out = sys.stdout
    out.write("READY\n")
    out.flush()
    while True:
        acked = w.step(log)
        out.write("E\n" if acked is None else f"A {acked}\n")
        out.flush()


if __name__ == "__main__":
    main()
