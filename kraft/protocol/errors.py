"""Kafka error codes used by KRaft, and the one exception family for bad wire input.

Every decoder in `kraft.protocol` and `kraft.records` raises a subclass of `ProtocolError` for
input it cannot accept, with a message that names the api/version (or record structure), the
field and the byte offset where decoding stopped. Callers therefore only ever need to catch
`ProtocolError` to survive untrusted bytes.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """Kafka protocol error codes (the subset KRaft produces or must understand)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    MESSAGE_TOO_LARGE = 10
    NETWORK_EXCEPTION = 13
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_VERSION = 35
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127

    @classmethod
    def of(cls, code: int) -> ErrorCode | int:
        """Return the enum member for `code`, or the bare int for a code this module does not name."""
        try:
            return cls(code)
        except ValueError:
            return code


class ProtocolError(Exception):
    """Bytes that cannot be decoded: the base of every wire/record decoding failure."""


class TruncatedInputError(ProtocolError):
    """The input ended before the structure being decoded was complete."""


class MalformedInputError(ProtocolError):
    """The input is complete but a value is impossible (bad length, bad varint, bad UTF-8, ...)."""


class FrameTooLargeError(ProtocolError):
    """A size prefix announced more bytes than the configured limit allows."""


class UnsupportedVersionError(ProtocolError):
    """An api key or version that this implementation does not speak.

    Also raised when encoding a non-default value into a version that lacks the field (as
    Kafka's UnsupportedVersionException). When raised while decoding a request frame it
    carries the api key, api version and correlation id read from the header, so a server
    can still answer with UNSUPPORTED_VERSION; each is None when unknown.
    """

    def __init__(
        self,
        message: str = "",
        *,
        api_key: int | None = None,
        api_version: int | None = None,
        correlation_id: int | None = None,
    ) -> None:
        super().__init__(message)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class CorruptRecordError(ProtocolError):
    """A record batch whose CRC or structure is wrong."""
