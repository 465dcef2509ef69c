"""The consensus core's error: a rule that must never break did.

Raised by any part of the core (`kraft.raft.core` and its concern modules); the runtime stops
the replica rather than go on with a log it can no longer trust.
"""

from __future__ import annotations


class RaftFatalError(RuntimeError):
    """A rule that must never break did (e.g. truncation below the high watermark)."""
