"""Benchmarks (run as scripts; speed targets live here, not in the unit tests)."""
