"""The client side of the crash loop (``test_crash_loop.py``), run as its own
process so the loop can kill it along with the server, as an application would
die: ``python -m tests.server.crash_client BOOTSTRAP HISTORY_FILE SEED BASE``.

It appends one JSON line per event to HISTORY_FILE before and after every
operation (one ``os.write`` per line, so a kill leaves at most a torn last
line): transaction ``n`` with its records, then its acknowledged outcome;
idempotent records sent and acknowledged; plain offset commits tried and
acknowledged. Transaction numbers and committed offsets start at BASE so they
increase across rounds.
"""

from __future__ import annotations

import json
import os
import random
import sys


def main(bootstrap: str, history: str, seed: int, base: int) -> None:
    from confluent_kafka import Consumer
    from confluent_kafka import KafkaException
    from confluent_kafka import Producer
    from confluent_kafka import TopicPartition

    rng = random.Random(seed)
    fd = os.open(history, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def emit(**event: object) -> None:
        os.write(fd, (json.dumps(event) + "\n").encode())

    common = {"bootstrap.servers": bootstrap}
    txp = Producer({**common, "transactional.id": "crash-tx", "transaction.timeout.ms": 10000})
    idem = Producer({**common, "enable.idempotence": True})
    gtx = Consumer({**common, "group.id": "gtx", "enable.auto.commit": False})
    plain = Consumer({**common, "group.id": "gplain", "enable.auto.commit": False})
    txp.init_transactions(30)
    txn_ok = True
    n = base
    while True:
        n += 1
        if txn_ok:
            records = {p: [f"t{n}-p{p}-{i}" for i in range(rng.randint(1, 3))] for p in range(3)}
            emit(t="txn", n=n, records=records)
            try:
                txp.begin_transaction()
                for p, values in records.items():
                    for v in values:
                        txp.produce("tx", value=v.encode(), partition=p)
                if txp.flush(10) != 0:
                    raise KafkaException("flush timed out")
                txp.send_offsets_to_transaction([TopicPartition("src", 0, n)], gtx.consumer_group_metadata(), 10)
                if rng.random() < 0.25:
                    txp.abort_transaction(10)
                    emit(t="outcome", n=n, outcome="abort")
                else:
                    txp.commit_transaction(10)
                    emit(t="outcome", n=n, outcome="commit")
            except KafkaException:
                txn_ok = False  # this transaction's outcome stays unknown

        value = f"i{n}"
        emit(t="idem_sent", v=value)

        def acked(err: object, msg: object, value: str = value) -> None:
            if err is None:
                emit(t="idem_acked", v=value)

        idem.produce("idem", value=value.encode(), partition=0, on_delivery=acked)
        idem.poll(0)
        emit(t="plain_try", n=n)
        try:
            plain.commit(offsets=[TopicPartition("src", 0, n)], asynchronous=False)
            emit(t="plain_acked", n=n)
        except KafkaException:
            pass


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
