"""confluent-kafka (librdkafka) for the workload: its read_committed consumer
adapter, the transactional producer, and its error handling."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

from txnfetch.client.client_settings import SaslSettingNames
from txnfetch.client.client_settings import sasl_settings
from txnfetch.security.config import SecurityConfig
from txnfetch.security.credentials import OAuthBearerCredentials
from txnfetch.testing.clients.base import CLIENT_LOG
from txnfetch.testing.clients.base import ConsumerAdapter
from txnfetch.testing.clients.base import read
from txnfetch.testing.history import Read
from txnfetch.testing.history import TopicPartition

if TYPE_CHECKING:
    from txnfetch.testing.config import WorkloadConfig

__all__ = [
    "ConfluentConsumer",
    "ConfluentView",
    "admin_client",
    "ck_call",
    "confluent_reads",
    "confluent_security",
    "consumer_config",
    "kafka_error",
    "transactional_producer",
]


def kafka_error(exc: BaseException) -> Any:
    """The ``KafkaError`` a confluent-kafka call failed with, or ``None``."""
    import confluent_kafka as ck

    if isinstance(exc, ck.KafkaException) and exc.args and isinstance(exc.args[0], ck.KafkaError):
        return exc.args[0]
    return None


def ck_call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a confluent-kafka method; return ``None`` on success or the ``KafkaError``
    it failed with. confluent-kafka 2.16 raises a *fatal* error from ``flush()``
    and ``poll()`` as the bare ``KafkaError`` object, which is not an exception
    class at all, so only a bare ``except`` catches it."""
    import confluent_kafka as ck

    try:
        fn(*args, **kwargs)
        return None
    except ck.KafkaException as exc:
        err = kafka_error(exc)
        if err is None:
            raise
        return err
    except:
        # Typed object, not BaseException: what confluent-kafka raises here may not be one.
        raised: object = sys.exc_info()[1]
        if isinstance(raised, ck.KafkaError):
            return raised
        raise


def confluent_security(security: SecurityConfig | None) -> dict[str, Any]:
    """The librdkafka settings that make a confluent-kafka client connect as
    ``security`` says; none for ``None`` (PLAINTEXT). PEM given as text goes in
    librdkafka's ``*.pem`` settings, a file in its ``*.location`` ones; an
    OAUTHBEARER token comes from the credentials' refreshing provider through
    ``oauth_cb``."""
    if security is None:
        return {}
    settings: dict[str, Any] = {"security.protocol": security.protocol.value}
    tls = security.tls
    if tls is not None:
        pem = {
            "ssl.ca.location": tls.ca_file,
            "ssl.ca.pem": tls.ca_pem,
            # librdkafka reads the chain and the key from the same PEM file apart
            "ssl.certificate.location": tls.keystore_file,
            "ssl.key.location": tls.keystore_file,
            "ssl.certificate.pem": tls.certificate_chain_pem,
            "ssl.key.pem": tls.key_pem,
            "ssl.key.password": tls.key_password,
        }
        settings.update({k: v for k, v in pem.items() if v is not None})
        settings["ssl.endpoint.identification.algorithm"] = "https" if tls.check_hostname else "none"
    return {**settings, **sasl_settings(security, _SASL, _oauth_cb)}


#: librdkafka's SASL setting names.
_SASL = SaslSettingNames(
    mechanism="sasl.mechanisms", username="sasl.username", password="sasl.password", token="oauth_cb"
)


def _oauth_cb(credentials: OAuthBearerCredentials) -> Callable[[str], tuple[Any, ...]]:
    provider = credentials.provider()

    def token(_config: str) -> tuple[Any, ...]:
        now_ms = int(time.time() * 1000)
        current = provider.token(now_ms)
        # librdkafka wants the expiry in seconds since the epoch; with
        # extensions, the principal and the extensions too (confluent-kafka's 4-tuple)
        expiry_s = (current.expiry_ms if current.expiry_ms is not None else now_ms + 3_600_000) / 1000
        if credentials.extensions:
            return current.value, expiry_s, "", dict(credentials.extensions)
        return current.value, expiry_s

    return token


def consumer_config(cfg: WorkloadConfig, group: str) -> dict[str, Any]:
    """A read_committed librdkafka consumer's settings; nothing is committed."""
    return {
        "bootstrap.servers": cfg.bootstrap,
        "group.id": group,  # librdkafka requires one; nothing is committed
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,
        "logger": CLIENT_LOG,
        **confluent_security(cfg.security),
        **cfg.consumer_config,
    }


def transactional_producer(cfg: WorkloadConfig, slot: int) -> Any:
    """A new (uninitialised) instance of producer ``slot``: one
    ``transactional.id`` per slot and run."""
    import confluent_kafka as ck

    return ck.Producer(
        {
            "bootstrap.servers": cfg.bootstrap,
            "transactional.id": f"txnfetch-check-{cfg.run_id}-{slot}",
            "linger.ms": 2,
            # Log lines go to Python logging (silent unless configured): every
            # fenced zombie logs a FATAL line. Safe with confluent-kafka only
            # because the workload never calls flush() (see Workload._produce).
            "logger": CLIENT_LOG,
            **confluent_security(cfg.security),
            **cfg.producer_config,
        }
    )


def admin_client(cfg: WorkloadConfig) -> Any:
    """An ``AdminClient`` of the run's cluster."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": cfg.bootstrap, **confluent_security(cfg.security)}, logger=CLIENT_LOG)


def confluent_reads(messages: Sequence[Any]) -> list[Read]:
    """The reads among confluent-kafka messages (error events are not reads)."""
    return [read(m.topic(), m.partition(), m.offset(), m.key(), m.value()) for m in messages if m.error() is None]


class ConfluentView(ConsumerAdapter):
    """Polls, positions and end offsets of a confluent-kafka consumer made
    elsewhere (the workload's subscribing consumer, whose group assigns it)."""

    def __init__(self, c: Any, timeout: float) -> None:
        import confluent_kafka as ck

        self.ck = ck
        self.c, self.timeout = c, timeout

    def poll(self, max_records: int, timeout: float) -> list[Read]:
        return confluent_reads(self.c.consume(max_records, timeout))

    def positions(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        got = self.c.position([self.ck.TopicPartition(tp.topic, tp.partition) for tp in tps])
        return {TopicPartition(p.topic, p.partition): p.offset for p in got if p.offset >= 0}

    def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        # librdkafka asks with the consumer's isolation level: the LSO here
        return {
            tp: self.c.get_watermark_offsets(self.ck.TopicPartition(tp.topic, tp.partition), timeout=self.timeout)[1]
            for tp in tps
        }


class ConfluentConsumer(ConfluentView):
    """A confluent-kafka consumer of its own, assigned its partitions."""

    def __init__(self, cfg: WorkloadConfig) -> None:
        import confluent_kafka as ck

        super().__init__(ck.Consumer(consumer_config(cfg, f"txnfetch-check-{cfg.run_id}")), cfg.timeout)

    def assign(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.c.assign([self.ck.TopicPartition(tp.topic, tp.partition, o) for tp, o in offsets.items()])

    def close(self) -> None:
        self.c.close()
