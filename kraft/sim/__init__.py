"""Deterministic simulator that drives the raft core under injected faults."""
