"""The measurements: the modules `python -m bench` runs (`bench_<name>.py`, each with
`run() -> dict`), the comparison's scenarios, and the tools run on their own (`latency_floor`,
`lane_shells`, `lane_switch`, `write_path`)."""
