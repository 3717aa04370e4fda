"""heron.hlo: the HLO IR, its text form, its verifier and its reference evaluator.

The names below are the package's public surface; everything else is an
implementation module that later packages may import but should not need to.
"""

from heron.hlo.element_types import ElementType
from heron.hlo.errors import (
    HloError,
    HloEvaluationError,
    HloInputError,
    HloParseError,
    HloVerifyError,
    SourceLocation,
    UnsupportedError,
)
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.shapes import ArrayShape, Layout, Shape, TupleShape

__all__ = [
    "ArrayShape",
    "Computation",
    "ElementType",
    "HloError",
    "HloEvaluationError",
    "HloInputError",
    "HloParseError",
    "HloVerifyError",
    "Instruction",
    "Layout",
    "Module",
    "Shape",
    "SourceLocation",
    "TupleShape",
    "UnsupportedError",
]
