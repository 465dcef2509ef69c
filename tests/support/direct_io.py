"""Whether a test directory's filesystem takes `O_DIRECT` (tmpfs before Linux 6.6 and several
network filesystems do not): the write-through tests skip where it cannot run."""

from __future__ import annotations

import os
from pathlib import Path


def o_direct_supported(directory: Path) -> bool:
    """Open (and remove) a probe file under `directory` with O_DIRECT."""
    probe = directory / "o_direct_probe"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
    except OSError:
        return False
    finally:
        probe.unlink(missing_ok=True)
    os.close(fd)
    return True
