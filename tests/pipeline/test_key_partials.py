"""The workload's per-key partial sums (`_key_partials`, no Spark session): commands of every
kind, in order, give the codec's verdicts; a key first seen as PUT or DELETE and then again,
keys that are not UTF-8, other commands and the high watermark all count as the codec says."""

from __future__ import annotations

import pyarrow as pa
from kraft_pipeline.workload import _key_partials

from kraft.records.batch import build_batch
from kraft.statemachine.kv import encode_barrier, encode_cas, encode_delete, encode_put


def _partials(batches: list[tuple[int, list[bytes]]], hw: int) -> dict[str | None, dict]:
    rows = {"batch_base_offset": [], "batch_last_offset": [], "data": []}
    for base, values in batches:
        rows["batch_base_offset"].append(base)
        rows["batch_last_offset"].append(base + len(values) - 1)
        rows["data"].append(build_batch(base, 1, values, 1000))
    table = pa.RecordBatch.from_pydict(rows)
    out = pa.Table.from_batches(list(_key_partials(iter([table]), hw, True))).to_pylist()
    by: dict[str | None, dict] = {}
    for r in out:
        name = r["k"] if r["k"] is not None else f"op:{r['op']}"
        by[name] = r
    return by


def test_every_command_counts_as_the_codec_says() -> None:
    not_utf8 = bytes([1, 1, 0, 0, 0, 1, 0xFF, 0, 0, 0, 0])  # PUT of key b"\xff", empty value
    batches = [
        (0, [encode_put("a", b"12"), encode_put("b", b"x"), encode_put("a", b"1234")]),
        (3, [encode_delete("b"), not_utf8, encode_put("a", b""), encode_cas("c", None, b"zz")]),
        (7, [encode_barrier(b"t"), encode_delete("c"), b"\x01\x09junk", encode_put("b", b"q")]),
        (11, [encode_put("a", b"late")]),
    ]
    got = _partials(batches, hw=10)
    a, b, c = got["a"], got["b"], got["c"]
    assert (a["writes"], a["deletes"], a["last_offset"], a["last_op"]) == (3, 0, 5, "PUT")
    assert (a["vlen_sum"], a["vlen_n"], a["vlen_max"], a["key_len"]) == (6, 3, 4, 1)
    assert (b["writes"], b["deletes"], b["last_offset"], b["last_op"]) == (2, 1, 3, "DELETE")
    assert (b["vlen_sum"], b["vlen_n"], b["vlen_max"]) == (1, 1, 1)
    assert (c["writes"], c["deletes"], c["last_offset"], c["last_op"]) == (2, 1, 8, "DELETE")
    ops = {k[3:]: v["writes"] for k, v in got.items() if k.startswith("op:")}
    # offsets 0-9 only: the PUT of b at 10 and everything at 11 are above the high watermark
    assert ops == {"PUT": 4, "DELETE": 2, "CAS": 1, "BARRIER": 1, "INVALID": 2}
    assert set(got) == {"a", "b", "c"} | {f"op:{k}" for k in ops}
