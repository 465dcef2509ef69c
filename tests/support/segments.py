"""What a segment's index should be, built again from its batches."""

from __future__ import annotations

from kraft.records.batch import iter_batches
from kraft.storage.index import SegmentIndex


def rebuilt_index(data: bytes, base_offset: int, interval: int) -> SegmentIndex:
    """The sparse index of a segment holding `data`, as appending its batches one by one
    builds it."""
    index = SegmentIndex(base_offset, interval)
    for b in iter_batches(data):
        index.observe(b.position, b.last_offset, b.max_timestamp)
    return index
