"""A library call's epilogue written out as HLO: scales, a side input, a bias, an activation.

cuBLAS and cuDNN finish a GEMM or a convolution with an epilogue computed in
their compute type (f32 for 16-bit floats) and round once at the end:
``activation(alpha * product + beta * c + bias)``. XLA folds such work into
its library calls (an SGD update ``w - lr * dw`` becomes a weight gradient's
scale and side input; a complex ``2 * (a @ b) + c`` a GEMM's alpha and beta).
Where heron's own call has no place for it, the ``xla-library-calls`` pass
states the call as the plain product and this epilogue after it.
"""

from __future__ import annotations

import math

import attrs
import numpy as np

from heron.hlo.element_types import ElementType
from heron.hlo.ir import Instruction
from heron.hlo.passes.rewrite import Inserter
from heron.hlo.shapes import ArrayShape

__all__ = ["ACTIVATIONS", "Epilogue", "compute_type"]

#: The activations an epilogue applies: ReLU, and GELU in its tanh form (cuBLASLt's
#: ``CUBLASLT_EPILOGUE_GELU``, which XLA's GEMM rewriter matches from that form only).
ACTIVATIONS = ("", "relu", "gelu")

_GELU_CUBE = 0.044715
_GELU_SCALE = math.sqrt(2 / math.pi)


def compute_type(element: ElementType) -> ElementType:
    """The type a library computes an epilogue in: f32 for floats narrower than it, the
    result's own type otherwise (f32, f64, complex, integer)."""
    if element.is_floating and element.bit_width < 32:
        return ElementType.F32
    return element


@attrs.define
class Epilogue:
    """Adds the epilogue's ops beside ``call`` (each named after it), in :attr:`compute`,
    over arrays of the call's ``result`` dimensions."""

    inserter: Inserter
    call: Instruction
    result: ArrayShape
    compute: ElementType = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.compute = compute_type(self.result.element_type)

    @property
    def wide(self) -> ArrayShape:
        """The result's shape in the compute type."""
        return attrs.evolve(self.result, element_type=self.compute)

    def _add(
        self,
        opcode: str,
        shape: ArrayShape,
        operands: list[Instruction],
        suffix: str,
        attributes: dict | None = None,
    ) -> Instruction:
        return self.inserter.add(opcode, shape, operands, attributes, like=self.call, suffix=suffix)

    def widened(self, value: Instruction, suffix: str) -> Instruction:
        """``value`` in the compute type."""
        if value.array_shape.element_type == self.compute:
            return value
        shape = attrs.evolve(value.array_shape, element_type=self.compute)
        return self._add("convert", shape, [value], suffix)

    def constant(self, value: complex, suffix: str) -> Instruction:
        """``value`` broadcast to the result's dimensions, in the compute type."""
        scalar = value if self.compute.is_complex else value.real
        literal = np.asarray(scalar, self.compute.numpy_dtype)
        constant = self.inserter.add(
            "constant", ArrayShape(self.compute, ()), like=self.call, suffix=suffix, literal=literal
        )
        return self._add("broadcast", self.wide, [constant], f"{suffix}s", {"dimensions": ()})

    def scaled(self, value: Instruction, scale: complex, suffix: str) -> Instruction:
        """``scale * value`` (``value`` itself for a scale of 1)."""
        if scale == 1:
            return value
        factor = self.constant(scale, f"{suffix}_scale")
        return self._add("multiply", self.wide, [value, factor], suffix)

    def plus(self, total: Instruction, value: Instruction, suffix: str) -> Instruction:
        return self._add("add", self.wide, [total, value], suffix)

    def plus_vector(self, total: Instruction, vector: Instruction, dimension: int) -> Instruction:
        """``total`` plus ``vector`` broadcast along the result's ``dimension`` (a bias)."""
        broadcast = self._add(
            "broadcast",
            self.wide,
            [self.widened(vector, "bias_wide")],
            "bias",
            {"dimensions": (dimension,)},
        )
        return self.plus(total, broadcast, "with_bias")

    def activated(self, total: Instruction, activation: str) -> Instruction:
        """``activation`` (one of :data:`ACTIVATIONS`) of ``total``."""
        if activation == "relu":
            return self._add("maximum", self.wide, [total, self.constant(0, "zero")], "relu")
        if activation == "gelu":
            # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
            square = self._add("multiply", self.wide, [total, total], "gelu_square")
            cube = self._add("multiply", self.wide, [square, total], "gelu_cube")
            inner = self.plus(total, self.scaled(cube, _GELU_CUBE, "gelu_cubic"), "gelu_inner")
            argument = self.scaled(inner, _GELU_SCALE, "gelu_argument")
            tanh = self._add("tanh", self.wide, [argument], "gelu_tanh")
            one_plus = self.plus(tanh, self.constant(1, "one"), "gelu_one_plus")
            half = self.scaled(total, 0.5, "gelu_half")
            return self._add("multiply", self.wide, [half, one_plus], "gelu")
        assert activation in ACTIVATIONS, f"no epilogue activation {activation!r}"
        return total

    def narrowed(self, total: Instruction) -> Instruction:
        """``total`` rounded once to the result's type."""
        if self.compute == self.result.element_type:
            return total
        return self._add("convert", self.result, [total], "narrowed")
