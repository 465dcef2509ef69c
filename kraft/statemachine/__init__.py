"""Application state machines replicated through the log (built-in key-value store)."""
