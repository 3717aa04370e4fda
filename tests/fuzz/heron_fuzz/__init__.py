"""heron's fuzzer: deterministic mutants of the corpus, generated valid fusions, hostile npz.

Not shipped: it lives beside the tests so that the exit-status contract of
docs/reliability.md ("Fuzzing") stays checked. ``python -m heron_fuzz`` from
tests/fuzz (or ``nox -s fuzz``) runs it; tests/test_fuzz_sample.py runs a fixed
sample in CI.
"""
