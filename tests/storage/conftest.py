"""Shared fixtures for storage tests: batch factories and a silent-but-captured logger."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kraft.records.batch import build_batch


def make_batches(
    start: int, count: int, *, epoch: int = 1, records: int = 2, size: int = 100
) -> list[bytes]:
    """`count` consecutive data batches from offset `start`."""
    out = []
    off = start
    for i in range(count):
        values = [bytes([(off + j) % 251]) * size for j in range(records)]
        out.append(build_batch(off, epoch, values, 1_000 + off + i))
        off += records
    return out


@pytest.fixture
def batches() -> Callable[..., list[bytes]]:
    """Factory: batches(start, count, epoch=1, records=2, size=100)."""
    return make_batches
