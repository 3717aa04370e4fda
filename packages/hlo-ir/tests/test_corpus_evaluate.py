"""Every corpus program evaluates on random inputs to values of its declared shapes."""

from __future__ import annotations

import numpy as np
import pytest

from heron.hlo.errors import HloEvaluationError
from heron.hlo.evaluator import (
    TOKEN,
    EvaluatorOptions,
    evaluate_module,
    flatten_literal,
    random_arguments,
)
from heron.hlo.evaluator.interpreter import shape_bytes
from heron.hlo.ir import Module
from heron.hlo.opcodes import OPCODES, Category
from heron.hlo.parser import parse_module_file

#: Opcodes that only move, select or create data: with finite inputs and finite
#: constants their float results are finite.
_MOVING = {
    name
    for name, info in OPCODES.items()
    if info.category in (Category.DATA_MOVEMENT, Category.LEAF)
} | {"fusion", "call", "select", "concatenate"}


def _only_moves_data(module: Module) -> bool:
    for inst in module.instructions():
        if inst.opcode not in _MOVING:
            return False
        if inst.opcode == "constant":
            leaves = flatten_literal(inst.literal) if inst.literal is not None else []
            for leaf in leaves:
                if leaf.dtype.kind == "V" or leaf.dtype.kind in "fc":
                    if not np.all(np.isfinite(np.asarray(leaf, dtype=np.complex128))):
                        return False
    return True


def test_corpus_program_evaluates(corpus_file):
    module = parse_module_file(corpus_file)
    limit = EvaluatorOptions().max_bytes
    largest = max(shape_bytes(inst.shape) for inst in module.instructions())
    if largest > limit:
        # A few corpus programs test codegen limits with terabyte-sized shapes: the
        # evaluator must refuse them by name instead of trying to allocate.
        assert all(shape_bytes(p.shape) <= limit for p in module.entry.parameters)
        with pytest.raises(HloEvaluationError, match="over the evaluator's limit"):
            evaluate_module(module, random_arguments(module, seed=0))
        return
    args = random_arguments(module, seed=0)
    result = evaluate_module(module, args)
    shapes = list(module.entry.root_instruction.shape.leaves())
    leaves = flatten_literal(result)
    assert len(leaves) == len(shapes)
    for shape, leaf in zip(shapes, leaves):
        if shape.is_token:
            assert leaf is TOKEN
            continue
        assert isinstance(leaf, np.ndarray)
        assert leaf.dtype == shape.numpy_dtype, f"{shape}: {leaf.dtype}"
        assert leaf.shape == shape.dims, f"{shape}: {leaf.shape}"
    if _only_moves_data(module):
        for shape, leaf in zip(shapes, leaves):
            if shape.element_type.is_floating or shape.element_type.is_complex:
                wide = np.asarray(leaf.astype(np.complex128))
                assert np.all(np.isfinite(wide)), f"non-finite values in {shape}"
