"""Benchmarks that measure swerl and its peer side by side: `python -m swerl.bench NAME`."""
