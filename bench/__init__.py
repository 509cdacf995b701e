"""Benchmarks of mpicomp: ``python -m mpicomp.bench --help``."""
