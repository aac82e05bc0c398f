"""Benchmarks: each prints ours next to a baseline in one run (python -m distgrail.benchmarks.<name>)."""
