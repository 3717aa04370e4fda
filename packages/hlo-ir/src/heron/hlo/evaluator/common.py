"""What the evaluator's op families share with its interpreter: errors, tokens, leaves.

The interpreter (:mod:`.interpreter`) dispatches to the families
(:mod:`.data_movement`, :mod:`.indexing_ops`, :mod:`.reductions`,
:mod:`.linalg`, :mod:`.control`); they need these few helpers back, which live
here so that no module of the evaluator imports one that imports it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from heron.hlo.errors import HloError, HloEvaluationError, UnsupportedError
from heron.hlo.ir import Instruction, Literal

__all__ = [
    "MAX_WHILE_ITERATIONS_ENV",
    "TOKEN",
    "convert_array",
    "describe",
    "elementwise_module",
    "flatten_literal",
    "instruction_error",
    "unsupported",
]

MAX_WHILE_ITERATIONS_ENV = "HERON_EVALUATOR_MAX_WHILE_ITERATIONS"


class _Token:
    """The value of a token-shaped instruction (after-all, a token parameter)."""

    _instance: _Token | None = None

    def __new__(cls) -> _Token:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "TOKEN"

    def __reduce__(self) -> str:
        return "TOKEN"


TOKEN = _Token()


def describe(inst: Instruction) -> str:
    where = f" in computation '{inst.parent.name}'" if inst.parent is not None else ""
    return f"{inst.opcode} '{inst.name}'{where}"


def instruction_error(
    inst: Instruction, message: str, cls: type[HloError] = HloEvaluationError
) -> HloError:
    """An error about ``inst``: names it, its opcode and computation; carries its location."""
    error = cls(f"{describe(inst)}: {message}", inst.location)
    error.names_instruction = True  # type: ignore[attr-defined]
    return error


def unsupported(inst: Instruction, why: str = "") -> HloError:
    reason = why or "the reference evaluator does not implement this operation"
    return instruction_error(inst, f"'{inst.opcode}' is not supported: {reason}", UnsupportedError)


def flatten_literal(literal: Literal) -> list[Any]:
    """The leaves of a value, depth first (the order of ``Shape.leaves()``).

    Array leaves are numpy arrays; a token leaf is ``TOKEN`` (kept so the list
    lines up with the shape's leaves).
    """
    if isinstance(literal, tuple):
        leaves: list[Any] = []
        for element in literal:
            leaves.extend(flatten_literal(element))
        return leaves
    return [literal]


_ELEMENTWISE: Any = None


def elementwise_module() -> Any:
    """``heron.hlo.evaluator.elementwise``, imported on first use."""
    global _ELEMENTWISE
    if _ELEMENTWISE is None:
        from heron.hlo.evaluator import elementwise

        _ELEMENTWISE = elementwise
    return _ELEMENTWISE


def convert_array(x: np.ndarray, to: Any) -> np.ndarray:
    """XLA ``convert`` of an array (delegates to the elementwise module)."""
    if x.dtype == to.numpy_dtype:
        return x
    return elementwise_module().convert_array(x, to)
