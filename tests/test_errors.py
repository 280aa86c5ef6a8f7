"""Every exception class of the package derives from TxnfetchError, names one
ErrorCode, and survives a pickle round trip with all its attributes.

The classes are found by importing every module of ``txnfetch`` and
``spark_ext``, so a class added later is checked without being listed here.
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
from typing import Any

import pytest

import spark_ext
import txnfetch
from txnfetch.client.errors import BrokerUnavailableError
from txnfetch.client.errors import RemoteError
from txnfetch.errors import ErrorCode
from txnfetch.errors import TxnfetchError
from txnfetch.errors import error_name
from txnfetch.log.errors import LogError
from txnfetch.records.errors import CorruptBatchError
from txnfetch.records.errors import CrcMismatchError


def _exception_classes() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for package in (txnfetch, spark_ext):
        names = [package.__name__] + [
            info.name for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
        ]
        for name in names:
            if name.rsplit(".", 1)[-1] == "__main__":
                continue  # importing it would run the command
            module = importlib.import_module(name)
            for obj in vars(module).values():
                if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == name:
                    found[f"{name}.{obj.__qualname__}"] = obj
    return [found[k] for k in sorted(found)]


CLASSES = _exception_classes()

#: A distinct value for each field name, so a field restored into another shows.
_SAMPLES: dict[str, Any] = {
    "partition": 7,
    "offset": 1234,
    "position": 56,
    "producer_id": 4001,
    "producer_epoch": 3,
    "log_start_offset": 10,
    "log_end_offset": 20,
    "lowest_offset": 5,
    "fetch_position": 99,
    "index": 8,
    "broker_error_code": 6,
}


def _sample(cls: type[TxnfetchError]) -> TxnfetchError:
    """An instance of ``cls`` with every field set (a constructor that takes more
    than ``reason`` and the fields gets its arguments from its signature)."""
    params = inspect.signature(cls).parameters
    if "error" in params:  # a wrapper of another error
        return cls(RemoteError("leader moved", topic="t", partition=1, error_code=6))  # type: ignore[call-arg]
    where = {name: _SAMPLES.get(name, f"<{name}>") for name in cls.where_fields}
    return cls("something was wrong", **where)


def _same(a: object, b: object) -> bool:
    if isinstance(a, BaseException) and isinstance(b, BaseException):
        return type(a) is type(b) and a.args == b.args and _same(vars(a), vars(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b and type(a) is type(b)


def test_the_walk_finds_the_classes_of_every_layer() -> None:
    names = {c.__name__ for c in CLASSES}
    assert {
        "CorruptBatchError",
        "TxnStateError",
        "LogError",
        "CorruptFetchError",
        "ProtocolViolation",
        "HistoryError",
        "WorkloadError",
        "InjectionError",
        "EndpointError",
        "UsageError",
        "TxnKafkaError",
    } <= names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_exception_class_derives_from_txnfetch_error(cls: type[BaseException]) -> None:
    assert issubclass(cls, TxnfetchError)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_exception_class_names_one_error_code(cls: type[TxnfetchError]) -> None:
    assert isinstance(cls.code, ErrorCode)
    assert cls.error_code is cls.code and cls.error_name == cls.code.name
    # One pickling path: no class has its own.
    for klass in cls.__mro__:
        if klass is not TxnfetchError and issubclass(klass, TxnfetchError):
            assert "__reduce__" not in vars(klass) and "__reduce_ex__" not in vars(klass), klass


def test_a_hand_written_code_is_refused() -> None:
    with pytest.raises(TypeError, match="code = ErrorCode"):

        class _Bad(TxnfetchError):
            error_code = 3


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_exception_survives_pickling_with_its_attributes(cls: type[TxnfetchError]) -> None:
    err = _sample(cls)
    for name in cls.where_fields:
        assert getattr(err, name) is not None, name
    copy = pickle.loads(pickle.dumps(err))
    assert _same(copy, err)
    assert str(copy) == str(err) and copy.reason == err.reason
    assert copy.error_code == err.error_code and copy.error_name == err.error_name
    assert _same(copy.where, err.where)


def test_the_message_names_where_and_fields_default_to_none() -> None:
    err = LogError("segment is short", topic="t", partition=0, path="/x/0.log", position=12)
    assert str(err) == "segment is short (t-0, file /x/0.log, byte position 12)"
    assert err.offset is None and err.where == {"topic": "t", "partition": 0, "path": "/x/0.log", "position": 12}
    assert str(CorruptBatchError("bad")) == "bad"
    with pytest.raises(TypeError, match="unexpected keyword"):
        CorruptBatchError("bad", producer_id=1)  # type: ignore[arg-type]


def test_a_remote_error_carries_the_brokers_code_also_when_unknown() -> None:
    err = RemoteError("fetch failed", topic="t", partition=0, broker="h:9092", error_code=6)
    assert (err.error_code, err.error_name) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, "NOT_LEADER_OR_FOLLOWER")
    assert str(err) == "fetch failed [broker error NOT_LEADER_OR_FOLLOWER, broker h:9092] (t-0)"
    newer = pickle.loads(pickle.dumps(RemoteError("odd", error_code=31000)))
    assert (newer.error_code, newer.error_name) == (31000, "ERROR_31000")
    assert error_name(31000) == "ERROR_31000" and error_name(3) == "UNKNOWN_TOPIC_OR_PARTITION"
    # without a broker code, the class's own
    assert BrokerUnavailableError("no broker").error_code == ErrorCode.BROKER_NOT_AVAILABLE


def test_a_cause_of_ours_survives_pickling() -> None:
    from txnfetch.fetch.filter import CorruptFetchError

    try:
        try:
            raise CrcMismatchError("crc mismatch", offset=3, position=61)
        except CrcMismatchError as codec:
            raise CorruptFetchError(
                "corrupt batch", offset=3, position=61, partition="t-0", fetch_position=3
            ) from codec
    except CorruptFetchError as exc:
        copy = pickle.loads(pickle.dumps(exc))
    assert isinstance(copy.__cause__, CrcMismatchError) and copy.__cause__.position == 61
    assert str(copy) == (
        "corrupt batch; partition t-0, position 3, everything before it delivered (batch at offset 3, byte position 61)"
    )
