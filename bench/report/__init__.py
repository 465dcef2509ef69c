"""The report writers: the comparison's section of docs/benchmarks.md (`compare`) and its
charts in docs/img/ (`charts`)."""
