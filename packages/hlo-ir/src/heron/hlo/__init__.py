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
from heron.hlo.evaluator import evaluate_module, flatten_literal, random_arguments
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.parser import parse_module, parse_module_file, parse_shape
from heron.hlo.printer import print_module
from heron.hlo.shapes import ArrayShape, Layout, Shape, TupleShape
from heron.hlo.verifier import verify_module

__version__ = "0.1.0"

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
    "evaluate_module",
    "flatten_literal",
    "parse_module",
    "parse_module_file",
    "parse_shape",
    "print_module",
    "random_arguments",
    "verify_module",
]
