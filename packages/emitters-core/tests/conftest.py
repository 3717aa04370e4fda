"""Fixtures shared by emitters-core's tests (the repository's conftest.py holds the corpus ones).

- ``ctx``: a fresh MLIR context with the heron_gpu dialect loaded and an
  unknown location, entered for the test (one per test: passes mutate IR, and
  a context's uniqued types and attributes must not leak between tests).
  Files that only build ops share one per module by overriding it.
"""

from __future__ import annotations

import pytest
from mlir import ir

from heron.emitters.dialect import make_context


@pytest.fixture
def ctx():
    context = make_context()
    with context, ir.Location.unknown(context):
        yield context
