"""Subgraphs and their function signatures: the data the partitioner hands to the emitters.

A subgraph becomes one function. Its signature follows the seeds: every fusion
parameter as a tensor (whether or not the subgraph reads it, so every function
of a fusion can call every other one with the same tensors), one index per
dimension of the subgraph's (first) root, then the injected hero values of an
epilogue, and one scalar result per root (per tuple element for tuple roots).
The data is plain attrs so emitters and tests can read it without the
partitioner's machinery.
"""

from __future__ import annotations

import re

import attrs

from heron.hlo.ir import Computation, Instruction
from heron.hlo.shapes import ArrayShape, Shape, TupleShape

__all__ = ["Signature", "Subgraph", "function_name", "leaf_shapes"]


def function_name(*parts: str) -> str:
    """A readable symbol name: the parts joined by '_', every non-identifier character as '_'.

    XLA names its subgraph functions ``<fusion>_<root>`` the same way; the
    names must survive MLIR symbol syntax and PTX, so dots and dashes go.
    """
    return re.sub(r"[^A-Za-z0-9_]", "_", "_".join(parts))


def leaf_shapes(shape: Shape) -> tuple[ArrayShape, ...]:
    """The array leaves of a shape (a tuple-shaped value is several scalars per index)."""
    if isinstance(shape, TupleShape):
        return tuple(shape.leaves())
    return (shape,)


@attrs.frozen
class Signature:
    """What the subgraph's function takes and returns.

    ``tensor_params`` has one (name, shape) per fusion parameter in parameter
    order; ``index_ranges`` one size per output dimension (the index argument
    ranges over ``[0, size - 1]``); ``injected`` one (hero name, element shape)
    per injected scalar; ``results`` one (root name, element shape) per
    returned scalar.
    """

    tensor_params: tuple[tuple[str, ArrayShape], ...]
    index_ranges: tuple[int, ...]
    injected: tuple[tuple[str, ArrayShape], ...]
    results: tuple[tuple[str, ArrayShape], ...]

    @property
    def num_arguments(self) -> int:
        return len(self.tensor_params) + len(self.index_ranges) + len(self.injected)

    def format(self) -> str:
        """``(p0: f32[4,8], d0: [0, 3], ..., injected: f32) -> (f32, ...)`` on one line."""
        args = [f"%{name}: {shape}" for name, shape in self.tensor_params]
        args += [f"%d{i}: index in [0, {n - 1}]" for i, n in enumerate(self.index_ranges)]
        args += [f"%{name}: {shape.element_type.value}" for name, shape in self.injected]
        results = [shape.element_type.value for _, shape in self.results]
        return f"({', '.join(args)}) -> ({', '.join(results)})"


@attrs.frozen(eq=False)
class Subgraph:
    """One function's worth of instructions.

    ``instructions`` are in def-before-use order, ``roots`` the instructions
    whose values leave the function (in that order: the results),
    ``injected`` the heroes whose values an epilogue receives as arguments
    instead of computing them. Subgraphs compare by identity: two subgraphs
    with the same instructions (a prologue copy and an epilogue copy) are
    still two functions.
    """

    name: str
    instructions: tuple[Instruction, ...]
    roots: tuple[Instruction, ...]
    signature: Signature
    injected: tuple[Instruction, ...] = ()
    is_epilogue: bool = False

    def __repr__(self) -> str:
        return f"<Subgraph {self.name} ({len(self.instructions)} instructions)>"

    def __contains__(self, instruction: object) -> bool:
        return any(instruction is inst for inst in self.instructions)

    def format(self, indent: int = 0) -> str:
        """The subgraph as text: name, signature, then its instructions (roots marked)."""
        pad = " " * indent
        kind = "EPILOGUE" if self.is_epilogue else "SUBGRAPH"
        lines = [f"{pad}{kind} {self.name} {self.signature.format()} {{"]
        for inst in self.instructions:
            marker = "ROOT " if any(inst is r for r in self.roots) else ""
            operands = ", ".join(o.name for o in inst.operands)
            lines.append(f"{pad}  {marker}{inst.name} = {inst.shape} {inst.opcode}({operands})")
        if self.injected:
            lines.append(f"{pad}  injected: {', '.join(h.name for h in self.injected)}")
        lines.append(f"{pad}}}")
        return "\n".join(lines)


def make_signature(
    computation: Computation,
    roots: tuple[Instruction, ...],
    injected: tuple[Instruction, ...] = (),
) -> Signature:
    """The signature of a function computing ``roots`` with ``injected`` heroes as arguments."""
    tensors = []
    for param in computation.parameters:
        for k, leaf in enumerate(leaf_shapes(param.shape)):
            suffix = f"_{k}" if isinstance(param.shape, TupleShape) else ""
            tensors.append((f"{param.name}{suffix}", leaf))
    first = leaf_shapes(roots[0].shape)[0]
    results = tuple((root.name, leaf) for root in roots for leaf in leaf_shapes(root.shape))
    injected_values = tuple(
        (hero.name, leaf) for hero in injected for leaf in leaf_shapes(hero.shape)
    )
    return Signature(tuple(tensors), tuple(first.dims), injected_values, results)
