"""The ``topk-library`` pass: a program's top-k launches heron's top-k library kernel.

XLA:GPU's ``TopkSpecializer`` makes jax's top-k a call of ``__gpu$TopK``, a kernel
compiled when XLA was built. This pass does the same with heron's library kernel
(:class:`heron.emitters.library_kernels.TopkRowsKernel`): a fusion that is one ``topk``
of its parameter, row-major, gets its row length as a constant operand (``s32[1]``, a
new last parameter its body does not read) and XLA's form of a custom fusion's
``backend_config`` naming the kernel::

    backend_config={"fusion_backend_config":{"kind":"__custom_fusion",
                    "custom_fusion_config":{"name":"heron$topk_rows"}}}

The body stays the ``topk``, so the fusion still means what it did: the evaluator,
``heron check`` and a compile of the fusion alone read it as before. A program's compile
launches the library kernel for it (:mod:`heron.compiler.library_kernels`), built once
per Target and backend, and compiles the fusion itself only where that kernel cannot be
built. It runs on every computation after the fusion passes (a loop body's top-k too),
before buffer assignment gives the length its constant buffer.
"""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np

from heron.emitters.library_kernels import (
    MAX_ROWS,
    ROWS_BOUND,
    TOPK_ROWS_TARGET,
    TopkRowsKernel,
    topk_row_threads,
)
from heron.hlo.attributes import RawAttribute
from heron.hlo.element_types import ElementType
from heron.hlo.ir import Instruction, Module
from heron.hlo.passes.manager import HloPass
from heron.hlo.passes.rewrite import module_names
from heron.hlo.shapes import ArrayShape, TupleShape
from heron.target import Target

__all__ = ["CUSTOM_FUSION_CONFIG", "library_topk_of", "topk_library", "use_topk_library"]

#: The backend_config of a fusion that launches the top-k library kernel (XLA's custom
#: fusion form).
CUSTOM_FUSION_CONFIG = json.dumps(
    {
        "fusion_backend_config": {
            "kind": "__custom_fusion",
            "custom_fusion_config": {"name": TOPK_ROWS_TARGET},
        }
    },
    separators=(",", ":"),
)
_LENGTH = ArrayShape.row_major(ElementType("s32"), (1,))


def _lone_topk(fusion: Instruction) -> Instruction | None:
    """The fusion's ``topk`` where its body is that one ``topk`` of a parameter."""
    body = fusion.called("calls")
    root = body.root_instruction
    if root.opcode != "topk" or root.operands[0].opcode != "parameter":
        return None
    if any(inst is not root and inst.opcode != "parameter" for inst in body.instructions):
        return None
    return root


def _row_major(shape: object) -> bool:
    return isinstance(shape, ArrayShape) and shape.is_row_major


def _eligible(fusion: Instruction) -> Instruction | None:
    """The ``topk`` of a fusion the library kernel computes, else None."""
    if fusion.opcode != "fusion" or "backend_config" in fusion.attributes:
        return None
    topk = _lone_topk(fusion)
    if topk is None:
        return None
    shape = topk.operands[0].shape
    results = topk.shape
    if not _row_major(shape) or not isinstance(results, TupleShape):
        return None
    if not all(_row_major(leaf) for leaf in results.leaves()):
        return None
    element = shape.element_type
    if not (element.is_floating or element.is_integral) or element.is_complex:
        return None
    if shape.rank < 1 or not 1 <= shape.dims[-1] < 2**31:
        return None
    rows = math.prod(shape.dims[:-1])
    k = int(topk.attr("k"))
    if not 1 <= rows <= MAX_ROWS or rows * shape.dims[-1] > ROWS_BOUND or not 1 <= k:
        return None
    return topk


def library_topk_of(fusion: Instruction, target: Target) -> TopkRowsKernel | None:
    """The library kernel a fusion marked by this pass launches on ``target``, else None
    (the one reading of the mark)."""
    if fusion.opcode != "fusion":
        return None
    config = fusion.attributes.get("backend_config")
    if not isinstance(config, RawAttribute) or config.text != CUSTOM_FUSION_CONFIG:
        return None
    topk = _lone_topk(fusion)
    if topk is None:
        return None
    shape = topk.operands[0].array_shape
    k = int(topk.attr("k"))
    threads = topk_row_threads(shape.dims[-1], k, target)
    return TopkRowsKernel(shape.element_type, k, bool(topk.attr("largest", True)), threads)


def use_topk_library(module: Module, target: Target) -> bool:
    """Mark every top-k fusion of ``module`` the library kernel computes (see the module
    docstring); whether any was."""
    names = module_names(module)
    callers = Counter(f.called("calls") for f in module.instructions() if f.opcode == "fusion")
    changed = False
    for computation in list(module.computations):
        for fusion in list(computation.instructions):
            topk = _eligible(fusion)
            if topk is None:
                continue
            body = fusion.called("calls")
            if callers[body] > 1:
                continue  # a body several fusions call: left as it is
            length = Instruction(
                names.unique(f"{fusion.name}.row_length"),
                "constant",
                _LENGTH,
                literal=np.array([topk.operands[0].array_shape.dims[-1]], np.int32),
                location=fusion.location,
            )
            length.parent = computation
            computation.instructions.insert(computation.instructions.index(fusion), length)
            parameter = Instruction(
                names.unique("row_length"),
                "parameter",
                _LENGTH,
                parameter_number=len(body.parameters),
                location=fusion.location,
            )
            body.add(parameter)
            fusion.operands.append(length)
            fusion.attributes["backend_config"] = RawAttribute(CUSTOM_FUSION_CONFIG)
            changed = True
    return changed


def topk_library(target: Target) -> HloPass:
    """The ``topk-library`` pass for ``target``."""
    return HloPass(
        "topk-library",
        lambda module: use_topk_library(module, target),
        "a fusion of one top-k launches heron's top-k library kernel (XLA's TopkSpecializer)",
    )
