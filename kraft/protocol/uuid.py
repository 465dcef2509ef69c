"""Kafka's 128-bit Uuid: 16 raw bytes on the wire, URL-safe base64 without padding as text."""

from __future__ import annotations

import base64
import binascii
import secrets
from typing import ClassVar

from kraft.protocol.errors import MalformedInputError


class Uuid:
    """An immutable Kafka Uuid (topic ids, directory ids, cluster ids).

    The all-zero value means "no uuid" and `Uuid(1)`-style value 0..01 is reserved for the
    metadata topic id; `Uuid.random()` never returns either, nor a value whose text starts
    with '-', matching Kafka's rules for generated ids.
    """

    __slots__ = ("_bytes",)
    ZERO: ClassVar[Uuid]
    METADATA_TOPIC_ID: ClassVar[Uuid]

    def __init__(self, raw: bytes) -> None:
        if len(raw) != 16:
            raise ValueError(f"a Uuid is 16 bytes, got {len(raw)}")
        self._bytes = bytes(raw)

    @classmethod
    def random(cls) -> Uuid:
        """Generate a fresh random id, never ZERO, never the metadata topic id, never '-'-led."""
        while True:
            u = cls(secrets.token_bytes(16))
            if u != cls.ZERO and u != cls.METADATA_TOPIC_ID and not str(u).startswith("-"):
                return u

    @classmethod
    def parse(cls, text: str) -> Uuid:
        """Parse the 22-character base64url text form; raises ValueError naming the bad text."""
        if len(text) != 22:
            raise ValueError(f"invalid uuid {text!r}: expected 22 base64url characters")
        try:
            raw = base64.urlsafe_b64decode(text + "==")
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"invalid uuid {text!r}: {exc}") from None
        if len(raw) != 16 or base64.urlsafe_b64encode(raw).rstrip(b"=").decode() != text:
            raise ValueError(f"invalid uuid {text!r}: not a canonical base64url encoding")
        return cls(raw)

    @classmethod
    def from_wire(cls, raw: bytes | memoryview, where: str = "uuid") -> Uuid:
        """Build from 16 wire bytes; raises MalformedInputError when the length is wrong."""
        if len(raw) != 16:
            raise MalformedInputError(f"{where}: expected 16 bytes, got {len(raw)}")
        return cls(bytes(raw))

    @property
    def bytes(self) -> bytes:
        """The 16 raw bytes (most significant 64 bits first)."""
        return self._bytes

    def is_zero(self) -> bool:
        """True for the all-zero "no uuid" value."""
        return self._bytes == b"\x00" * 16

    def __str__(self) -> str:
        return base64.urlsafe_b64encode(self._bytes).rstrip(b"=").decode("ascii")

    def __repr__(self) -> str:
        return f"Uuid({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Uuid) and other._bytes == self._bytes

    def __hash__(self) -> int:
        return hash(self._bytes)

    def __lt__(self, other: Uuid) -> bool:
        return self._bytes < other._bytes


Uuid.ZERO = Uuid(b"\x00" * 16)
Uuid.METADATA_TOPIC_ID = Uuid(b"\x00" * 15 + b"\x01")
