"""heron.hlo: the HLO IR, its text form, its verifier, its reference evaluator and HLO passes.

At the bottom of heron's dependency graph with heron.target (docs/architecture.md):
it imports no other heron package and no MLIR, so the HLO tools run with numpy and
ml_dtypes alone. Besides the names below (the public surface) it holds:

- ``heron.hlo.passes``: target-independent HLO passes, one module each
  (``outline``: each computing instruction of an unfused entry computation
  becomes a fusion of its own);
- ``heron.hlo.memory_layout``, ``heron.hlo.npz_io``: arrays in an HLO
  layout's memory order, and .npz inputs and outputs;
- ``heron.hlo.plugin_loading``: the entry-point loader that both plugin
  groups (``heron.emitters``, ``heron.backends``) share.
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
