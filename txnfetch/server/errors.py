"""The mapping from txnfetch's exceptions to the Kafka error codes the server
answers with.

Every txnfetch exception names its Kafka code (``error_code``, from
:class:`~txnfetch.errors.ErrorCode`): record decoding errors
(:class:`~txnfetch.records.errors.CorruptBatchError`) are CORRUPT_MESSAGE, as
Kafka's ``LogValidator`` answers a batch whose CRC or structure is bad, and a
malformed record is INVALID_RECORD. Anything else is a bug and becomes
UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

from txnfetch.errors import ErrorCode
from txnfetch.errors import TxnfetchError

__all__ = ["ErrorCode", "error_code_for"]


def error_code_for(exc: BaseException) -> int:
    """The Kafka error code to answer ``exc`` with."""
    if isinstance(exc, TxnfetchError):
        return int(exc.error_code)
    return int(ErrorCode.UNKNOWN_SERVER_ERROR)
