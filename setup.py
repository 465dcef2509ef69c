"""The one compiled part of kraft-quorum: the native lane's rules (`kraft.raft._lane`, see
docs/native-lane.md). Everything else is in pyproject.toml. The extension is optional: where it
does not build (no C compiler), the install goes on without it, and `kraft.raft.lane.native()`
says so."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kraft.raft._lane",
            ["kraft/raft/_lane.c"],
            extra_compile_args=["-O2", "-std=c11", "-pthread", "-Wall", "-Wextra",
                                "-Werror=implicit-function-declaration"],
            extra_link_args=["-pthread"],  # FollowerShell's thread
            optional=True,
        )
    ]
)
