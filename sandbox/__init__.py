"""The sandbox: an emulated Kubernetes API and local nodes that run every Pod as `kraft`
processes, so the operator and its scenarios run with no cluster (docs/sandbox.md)."""
