"""Benchmarks of the CDC processor against the baselines a user would pick (BENCHMARKS.md).

``python -m bench [--quick]``: seeded data, our job and the baselines run side by side in one
process on one SparkSession, ratios printed and written to ``bench/results.json``.
"""
