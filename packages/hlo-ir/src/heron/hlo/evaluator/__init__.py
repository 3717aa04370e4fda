"""The reference evaluator: HLO semantics computed with numpy.

``evaluate_module(module, args)`` runs the entry computation on numpy
arguments and returns the root's value: an array (numpy, logical row-major
index order whatever the layout), a tuple of values, or ``TOKEN``. It is the
oracle heron's compiled kernels are checked against, so it favours being
right and readable over being fast, while staying one numpy operation per
HLO instruction so that test programs of millions of elements run in
milliseconds. ``random_arguments`` makes inputs every corpus program accepts.
"""

from heron.hlo.evaluator.interpreter import (
    TOKEN,
    EvaluatorOptions,
    evaluate_computation,
    evaluate_module,
    flatten_literal,
)
from heron.hlo.evaluator.random_inputs import random_arguments

__all__ = [
    "TOKEN",
    "EvaluatorOptions",
    "evaluate_computation",
    "evaluate_module",
    "flatten_literal",
    "random_arguments",
]
