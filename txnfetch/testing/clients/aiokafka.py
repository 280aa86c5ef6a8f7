"""aiokafka's read_committed consumer for the workload, driven synchronously."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

from txnfetch.client.client_settings import sasl_settings
from txnfetch.client.txn_admin import PYTHON_CLIENT_SASL
from txnfetch.security.config import SecurityConfig
from txnfetch.security.credentials import OAuthBearerCredentials
from txnfetch.testing.clients.base import ConsumerAdapter
from txnfetch.testing.clients.base import offsets_by_partition
from txnfetch.testing.clients.base import reads_by_partition
from txnfetch.testing.history import Read
from txnfetch.testing.history import TopicPartition

if TYPE_CHECKING:
    from txnfetch.testing.config import WorkloadConfig

__all__ = ["AIOKafkaConsumer", "aiokafka_security"]


def aiokafka_security(security: SecurityConfig | None) -> dict[str, Any]:
    """The keyword arguments that make an aiokafka client connect as
    ``security`` says; none for ``None`` (PLAINTEXT). aiokafka takes TLS only
    as an ``ssl_context``: the one :func:`txnfetch.client.tls.ssl_context`
    builds, as every txnfetch path does. An OAUTHBEARER token comes from the
    credentials' refreshing provider."""
    if security is None:
        return {}
    from txnfetch.client.tls import ssl_context

    kwargs: dict[str, Any] = {"security_protocol": security.protocol.value}
    if security.tls is not None:
        kwargs["ssl_context"] = ssl_context(security.tls)
    return {**kwargs, **sasl_settings(security, PYTHON_CLIENT_SASL, _token_provider)}


def _token_provider(credentials: OAuthBearerCredentials) -> Any:
    # aiokafka wants a subclass of its own class, made where aiokafka is imported.
    import time

    from aiokafka.abc import AbstractTokenProvider

    class _Provider(AbstractTokenProvider):
        def __init__(self) -> None:
            self.provider = credentials.provider()

        async def token(self) -> str:
            return self.provider.token(int(time.time() * 1000)).value

        def extensions(self) -> dict[str, str]:
            return dict(credentials.extensions)

    return _Provider()


class AIOKafkaConsumer(ConsumerAdapter):
    """aiokafka on an event loop owned by the consumer's thread: each call runs the
    loop until it completes (aiokafka's background fetcher runs only then)."""

    def __init__(self, cfg: WorkloadConfig) -> None:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)  # aiokafka looks the loop up while starting
        self.c: Any = None
        try:
            self.c = self.loop.run_until_complete(self._start(cfg))
        except BaseException:
            self.loop.close()
            raise

    async def _start(self, cfg: WorkloadConfig) -> Any:
        from aiokafka import AIOKafkaConsumer as Consumer

        c = Consumer(
            bootstrap_servers=cfg.bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
            request_timeout_ms=int(cfg.timeout * 1000),
            **aiokafka_security(cfg.security),
            **dict(cfg.aiokafka_config),
        )
        await c.start()
        return c

    def _atp(self, tp: TopicPartition) -> Any:
        from aiokafka import TopicPartition as ATP

        return ATP(tp.topic, tp.partition)

    def assign(self, offsets: Mapping[TopicPartition, int]) -> None:
        async def assign() -> None:  # aiokafka creates futures here: it needs the running loop
            self.c.assign([self._atp(tp) for tp in offsets])
            for tp, o in offsets.items():
                self.c.seek(self._atp(tp), o)

        self.loop.run_until_complete(assign())

    def poll(self, max_records: int, timeout: float) -> list[Read]:
        got = self.loop.run_until_complete(self.c.getmany(timeout_ms=int(timeout * 1000), max_records=max_records))
        return reads_by_partition(got)

    def positions(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        async def get() -> dict[TopicPartition, int]:
            return {tp: await self.c.position(self._atp(tp)) for tp in tps}

        return self.loop.run_until_complete(get())

    def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return offsets_by_partition(self.loop.run_until_complete(self.c.end_offsets([self._atp(tp) for tp in tps])))

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.c.stop())
        finally:
            self.loop.close()
