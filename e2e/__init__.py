"""End-to-end scenarios of the operator: the sandbox or a real cluster as the backend, the same
scenario code (docs/e2e.md)."""
