"""Sharding annotations are their operand on one device (XLA's ShardingRemover)."""

# ruff: noqa: E501 - HLO as jax prints it

from __future__ import annotations

import numpy as np
import pytest

from heron.hlo.errors import HloError
from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.hlo.passes import run_pipeline, simplification_pipeline
from heron.hlo.passes.manager import pipeline_of
from heron.hlo.passes.registry import pass_named

# What jax prints for lax.with_sharding_constraint on one device.
CONSTRAINED = """
HloModule jit__lambda, entry_computation_layout={(f32[3,4]{1,0})->f32[3,4]{1,0}}
ENTRY main.1 {
  x.1 = f32[3,4]{1,0} parameter(0)
  constant.3 = f32[] constant(2)
  broadcast.3 = f32[3,4]{1,0} broadcast(constant.3), dimensions={}
  mul.1 = f32[3,4]{1,0} multiply(x.1, broadcast.3)
  sharding_constraint.1 = f32[3,4]{1,0} custom-call(mul.1), custom_call_target="Sharding", sharding={replicated}
  constant.2 = f32[] constant(1)
  broadcast.2 = f32[3,4]{1,0} broadcast(constant.2), dimensions={}
  ROOT add.1 = f32[3,4]{1,0} add(sharding_constraint.1, broadcast.2)
}
"""

# A shard_map over two devices: the shard is half the value, no annotation to drop.
SPLIT = """
HloModule split
ENTRY main {
  x = f32[4,4]{1,0} parameter(0)
  ROOT s = f32[2,4]{1,0} custom-call(x), custom_call_target="SPMDFullToShardShape", sharding={manual}
}
"""


def _custom_calls(module) -> list[str]:
    return [i.name for i in module.instructions() if i.opcode == "custom-call"]


def test_an_annotation_is_its_operand():
    module = parse_module(CONSTRAINED)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    expected = x * 2 + 1
    np.testing.assert_array_equal(evaluate_module(module, [x]), expected)  # the evaluator
    report = run_pipeline(module, pipeline_of([pass_named("sharding-remover")]))
    assert report.changed and not _custom_calls(module)
    np.testing.assert_array_equal(evaluate_module(module, [x]), expected)


def test_the_simplification_pipeline_removes_it_first():
    module = parse_module(CONSTRAINED)
    run_pipeline(module, simplification_pipeline())
    assert not _custom_calls(module)


def test_a_shard_of_another_shape_stays_and_is_refused_by_name():
    module = parse_module(SPLIT)
    report = run_pipeline(module, pipeline_of([pass_named("sharding-remover")]))
    assert not report.changed and _custom_calls(module) == ["s"]
    with pytest.raises(HloError, match="SPMDFullToShardShape"):
        evaluate_module(module, [np.zeros((4, 4), np.float32)])
