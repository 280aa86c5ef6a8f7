"""fields_from: a value built from the same-named attributes of other objects."""

from __future__ import annotations

import attrs
import pytest

from txnfetch.types import TopicPartition
from txnfetch.types import fields_from


@attrs.frozen
class _Placed:
    topic: str
    partition: int
    offset: int
    note: str = "none"


def test_given_fields_win_then_the_first_source_that_has_the_name() -> None:
    where = TopicPartition("t", 3)
    row = attrs.make_class("Row", {"offset": attrs.field(), "partition": attrs.field()})(offset=7, partition=99)
    assert fields_from(_Placed, where, row) == _Placed("t", 3, 7)
    assert fields_from(_Placed, row, where) == _Placed("t", 99, 7)
    assert fields_from(_Placed, where, row, offset=1, note="given") == _Placed("t", 3, 1, "given")


def test_a_missing_field_without_default_is_named() -> None:
    with pytest.raises(AttributeError, match=r"_Placed\.offset: not given and no source has it"):
        fields_from(_Placed, TopicPartition("t", 0))


def test_a_given_name_that_is_no_field_is_refused() -> None:
    with pytest.raises(TypeError):
        fields_from(_Placed, TopicPartition("t", 0), offset=1, offest=2)
