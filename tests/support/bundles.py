"""Extracting the tar bundles that `kraft export` and `/v1/export` write, in tests."""

from __future__ import annotations

import tarfile
from pathlib import Path


def extract(tar: tarfile.TarFile, dest: Path) -> None:
    """Extract `tar` into `dest`, refusing any member that is not a plain file or directory or
    that would land outside `dest`. Uses tarfile's "data" filter where the interpreter has it
    (CPython 3.11.4 and later); older 3.11 builds, such as Debian 12's 3.11.2, get the same
    checks here."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(dest, filter="data")
        return
    root = Path(dest).resolve()
    for member in tar.getmembers():
        target = (root / member.name).resolve()
        if not (member.isfile() or member.isdir()) or not target.is_relative_to(root):
            raise ValueError(f"refusing tar member {member.name!r}")
    tar.extractall(dest)  # every member was checked above
