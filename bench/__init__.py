"""Benchmarks (run with `make bench`; never part of `make test`)."""
