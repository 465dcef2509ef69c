"""The one compiled part of kraft-quorum: the native lane (`kraft.lane._native`, see
docs/native-lane.md), and the packages with their console scripts. Everything else is in
pyproject.toml. The extension is optional: where it does not build (no C compiler), the install
goes on without it, and `kraft.lane.native()` says so. `LANE` is also what the benchmark builds
into its export of a commit (`bench.systems.peers.export_head`).

The sandbox (`sandbox/`, installed as `kraft_sandbox`) is a test world, not part of the product:
it goes in, with its `kraft-sandbox` command, only where its folder is in the tree. The image's
build context has no `sandbox/` (.dockerignore), so the image's wheel holds neither."""

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

# `operator/` is installed as `kraft_operator` so it never shadows the standard library's
# `operator`; `pipeline/` is installed as `kraft_pipeline`, `sandbox/` as `kraft_sandbox`. New
# subpackages are listed here.
PACKAGE_DIR = {"kraft_operator": "operator", "kraft_pipeline": "pipeline"}
PACKAGES = [
    "kraft", "kraft.protocol", "kraft.records", "kraft.config", "kraft.storage", "kraft.raft",
    "kraft.lane", "kraft.sim", "kraft.statemachine", "kraft.server", "kraft.admin", "kraft.cli",
    "kraft_operator", "kraft_operator.planner", "kraft_operator.actions", "kraft_pipeline",
]
SCRIPTS = ["kraft = kraft.cli.main:main", "kraft-operator = kraft_operator.main:main"]

SANDBOX_DIR = {"kraft_sandbox": "sandbox"}
SANDBOX_PACKAGES = ["kraft_sandbox"]
SANDBOX_SCRIPTS = ["kraft-sandbox = kraft_sandbox.cli:main"]


def layout(root: Path) -> tuple[dict[str, str], list[str], list[str]]:
    """The package folders, packages and console scripts of the tree at `root`: the sandbox's
    only when `sandbox/` is there."""
    if (root / "sandbox").is_dir():
        return ({**PACKAGE_DIR, **SANDBOX_DIR}, PACKAGES + SANDBOX_PACKAGES,
                SCRIPTS + SANDBOX_SCRIPTS)
    return dict(PACKAGE_DIR), list(PACKAGES), list(SCRIPTS)


if __name__ == "__main__":  # (pip's build runs this file as the main module)
    package_dir, packages, scripts = layout(Path(__file__).resolve().parent)
    setup(ext_modules=[LANE], package_dir=package_dir, packages=packages,
          entry_points={"console_scripts": scripts})
