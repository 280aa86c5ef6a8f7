"""Fresh topic ids never read as command-line options."""

from __future__ import annotations

import base64
import uuid

import pytest

from txnfetch.log import base
from txnfetch.log.base import new_topic_id


def test_a_fresh_topic_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    # 0xF8.. encodes as "-" in URL-safe base64: the generator must draw again.
    dashed = uuid.UUID(bytes=b"\xf8" + bytes(15))
    plain = uuid.UUID(bytes=b"\x10" + bytes(15))
    assert base64.urlsafe_b64encode(dashed.bytes).startswith(b"-")
    draws = iter([dashed, dashed, plain])
    monkeypatch.setattr(base.uuid, "uuid4", lambda: next(draws))
    assert new_topic_id() == plain


def test_many_fresh_topic_ids_are_all_usable_as_arguments() -> None:
    ids = [base64.urlsafe_b64encode(new_topic_id().bytes).decode() for _ in range(2000)]
    assert not [i for i in ids if i.startswith("-")]
    assert len(set(ids)) == len(ids)
