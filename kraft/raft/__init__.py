"""The KRaft consensus core: a pure, deterministic state machine (events in, effects out)."""
