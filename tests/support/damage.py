"""Damage to a frame, drawn by hypothesis: 1-3 bit flips, cuts or overwritten bytes, as the
lane's readers must survive them (tests/node/test_lane_*.py)."""

from __future__ import annotations

from hypothesis import strategies as st


def damaged(data: st.DataObject, frame: bytes) -> bytes:
    """`frame` with 1-3 damages drawn from `data`."""
    out = bytearray(frame)
    for _ in range(data.draw(st.integers(1, 3))):
        if not out:
            break
        at = data.draw(st.integers(0, len(out) - 1))
        how = data.draw(st.sampled_from(["flip", "cut", "set"]))
        if how == "flip":
            out[at] ^= 1 << data.draw(st.integers(0, 7))
        elif how == "cut":
            del out[at:]
        else:
            out[at] = data.draw(st.sampled_from([0, 1, 2, 0x7F, 0x80, 0xFF]))
    return bytes(out)
