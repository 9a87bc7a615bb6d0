"""Benchmarks run by ``make bench``; each writes JSON under ``bench/results/``."""
