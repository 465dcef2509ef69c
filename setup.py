"""The one compiled part of kraft-quorum: the native lane (`kraft.lane._native`, see
docs/native-lane.md). Everything else is in pyproject.toml. The extension is optional: where it
does not build (no C compiler), the install goes on without it, and `kraft.lane.native()`
says so. `LANE` is also what the benchmark builds into its export of a commit
(`bench.systems.peers.export_head`)."""

import os
from pathlib import Path

from setuptools import Extension, setup

LANE = Extension(
    "kraft.lane._native",
    # one extension, one source per job (kraft/lane/csrc/lane.h lists them); the KV state
    # machine's PUT lives with the state machine (kraft/statemachine/csrc/kv_put.c)
    sorted(str(p) for p in Path("kraft/lane/csrc").glob("*.c"))
    + ["kraft/statemachine/csrc/kv_put.c"],
    include_dirs=["kraft/lane/csrc"],
    depends=["kraft/lane/csrc/lane.h"],
    extra_compile_args=["-O2", "-std=c11", "-pthread", "-Wall", "-Wextra",
                        "-Werror=implicit-function-declaration"],
    extra_link_args=["-pthread"],  # FollowerShell's thread
    # KRAFT_REQUIRE_LANE=1 (the image's build) makes a failed C build an error, not a skip
    optional=os.environ.get("KRAFT_REQUIRE_LANE") != "1",
)

if __name__ == "__main__":  # (pip's build runs this file as the main module)
    setup(ext_modules=[LANE])
