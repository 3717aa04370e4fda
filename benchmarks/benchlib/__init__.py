"""What the benchmark scripts share (a package, so that ``nox -s bench``, which runs
every ``benchmarks/*.py``, does not run it as a benchmark)."""
