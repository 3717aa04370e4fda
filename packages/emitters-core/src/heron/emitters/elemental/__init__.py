"""Elemental HLO-to-MLIR emission (see :mod:`.core` for the contract).

Importing this package registers every lowering: each module below holds the
lowerings of one family of ops.
"""

from heron.emitters.elemental import (  # noqa: F401 - imported to register lowerings
    complex_ops,
    conversions,
    data_ops,
    float_ops,
    index_ops,
    int_ops,
    reductions,
)
from heron.emitters.elemental.core import (
    Caller,
    ElementalContext,
    Lowering,
    Resolver,
    Values,
    emit_instruction,
    lowering,
    supported_opcodes,
    unsupported,
)

__all__ = [
    "Caller",
    "ElementalContext",
    "Lowering",
    "Resolver",
    "Values",
    "emit_instruction",
    "lowering",
    "supported_opcodes",
    "unsupported",
]
