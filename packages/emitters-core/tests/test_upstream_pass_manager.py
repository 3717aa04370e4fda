"""Upstream pipelines are parsed once per context and thread and reused
(heron.emitters.pipeline.upstream): the same pass manager for the same pipeline in
the same context, a new one in another context or thread, the same IR either way."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("mlir")

from mlir import ir  # noqa: E402

from heron.emitters.dialect.context import fresh_context  # noqa: E402
from heron.emitters.pipeline.manager import run_upstream  # noqa: E402
from heron.emitters.pipeline.upstream import upstream_pass_manager  # noqa: E402

CANONICALIZE = "builtin.module(canonicalize)"
TEXT = """
func.func @f(%x: i32) -> i32 {
  %zero = arith.constant 0 : i32
  %y = arith.addi %x, %zero : i32
  return %y : i32
}
"""


def test_a_pipeline_is_parsed_once_per_context() -> None:
    context = fresh_context()
    first = upstream_pass_manager(CANONICALIZE, context)
    assert upstream_pass_manager(CANONICALIZE, context) is first
    assert upstream_pass_manager("builtin.module(cse)", context) is not first
    assert upstream_pass_manager(CANONICALIZE, fresh_context()) is not first


def test_another_thread_makes_its_own() -> None:
    context = fresh_context()
    mine = upstream_pass_manager(CANONICALIZE, context)
    theirs = []
    worker = threading.Thread(
        target=lambda: theirs.append(upstream_pass_manager(CANONICALIZE, context))
    )
    worker.start()
    worker.join()
    assert theirs and theirs[0] is not mine


def test_a_reused_pass_manager_rewrites_each_module() -> None:
    context = fresh_context()
    for _ in range(3):  # the second and third runs reuse the first's pass manager
        with context:
            module = ir.Module.parse(TEXT)
        run_upstream(module, CANONICALIZE)
        assert "arith.addi" not in str(module) and "return %arg0" in str(module)
