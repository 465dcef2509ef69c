"""Test support shared by the node tests: a fault-injecting TCP proxy, a linearizability checker
and helpers that run real kraft processes on loopback."""
