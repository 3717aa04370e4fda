"""Library kernels: kernels heron compiles once and launches for any shape.

XLA:GPU does not compile every kernel it launches: ``jax.lax.top_k`` becomes a call of
``__gpu$TopK``, a kernel compiled when XLA was built whose sizes are arguments, so a
program that needs only it compiles in a hundredth of a second. A heron library kernel
is the same idea built from heron's own emitters: a fusion of a fixed, canonical form
whose shapes are upper bounds and whose sizes arrive as an argument, compiled once per
Target and backend (:mod:`heron.compiler.library_kernels` keeps it) and launched by
every program fusion it stands for.

This module is the contract between the two sides, the compiler (which marks a
program's fusions and launches the kernel) and the emitter plugin that emits it
(:mod:`heron.plugins.topk_rows`): what a kernel is compiled for, its canonical fusion,
and the choices both must make alike. One library kernel exists today:

- **top-k rows** (:class:`TopkRowsKernel`): the top-k emitter's kernel with the row
  length read from an ``s32[1]`` argument and a block per row of whatever grid it is
  launched on; one kernel per element type, ``k``, order and threads per row.
"""

from __future__ import annotations

import math

import attrs

from heron.hlo.element_types import ElementType
from heron.target import Target

__all__ = [
    "MAX_ROWS",
    "ROWS_BOUND",
    "ROW_THREADS",
    "TOPK_ROWS_TARGET",
    "TopkRowsKernel",
    "topk_key_width",
    "topk_row_threads",
]

#: The custom call at the root of the top-k rows kernel's canonical fusion.
TOPK_ROWS_TARGET = "heron$topk_rows"
#: The elements a library kernel's arguments are declared with: a bound on any buffer it
#: is given (2^40: 4 TiB of f32), so that index arithmetic stays 64-bit where it must.
ROWS_BOUND = 2**40
#: The most blocks (rows) a launch has: CUDA's and HIP's grid limit in x.
MAX_ROWS = 2**31 - 1
#: The most threads a top-k row gets: enough to read a long row in parallel, few enough
#: that the merge rounds (log2 of it, k^2 compare-and-swaps each) stay short.
ROW_THREADS = 128


def topk_row_threads(length: int, k: int, target: Target) -> int:
    """The threads of a top-k row of ``length`` elements: the power of two nearest
    ``length / k``, at most ``ROW_THREADS`` and the Target's block limit (the top-k
    emitter's choice, and the library kernel's key)."""
    wanted = 1 << max(0, math.ceil(length / max(k, 1)) - 1).bit_length()
    return max(1, min(wanted, ROW_THREADS, target.threads_per_block_limit))


def topk_key_width(element: ElementType) -> int:
    """The width of the integer keys a top-k of ``element`` values orders: 32 or 64."""
    return 64 if element.bit_width > 32 else 32


@attrs.frozen
class TopkRowsKernel:
    """What one top-k rows kernel is compiled for: everything but the sizes."""

    element: ElementType
    k: int
    largest: bool
    threads: int  #: a power of two: the threads of a row (:func:`topk_row_threads`)

    @property
    def key_width(self) -> int:
        return topk_key_width(self.element)

    @property
    def name(self) -> str:
        """A name unique to the kernel: ``topk_rows_f32_k4_largest_t8``."""
        order = "largest" if self.largest else "smallest"
        return f"topk_rows_{self.element.value}_k{self.k}_{order}_t{self.threads}"

    def fusion_text(self) -> str:
        """The HLO module whose one fusion is this kernel: a ``heron$topk_rows`` call of
        ``data`` (the rows one after the other) and ``length`` (s32[1]: a row's length),
        giving values and s32 indices, ``k`` per row, one row after the other; its
        ``k`` and ``largest`` as a ``topk``'s, its threads in ``opaque``."""
        element = self.element.value
        result = f"({element}[{ROWS_BOUND}], s32[{ROWS_BOUND}])"
        largest = "true" if self.largest else "false"
        return (
            f"HloModule {self.name}\n\n"
            f"{self.name}_body {{\n"
            f"  data = {element}[{ROWS_BOUND}] parameter(0)\n"
            "  length = s32[1] parameter(1)\n"
            f"  ROOT top = {result} custom-call(data, length),"
            f' custom_call_target="{TOPK_ROWS_TARGET}", k={self.k}, largest={largest},'
            f' opaque="threads={self.threads}"\n'
            "}\n\n"
            "ENTRY main {\n"
            f"  data = {element}[{ROWS_BOUND}] parameter(0)\n"
            "  length = s32[1] parameter(1)\n"
            f"  ROOT {self.name} = {result} fusion(data, length), kind=kCustom,"
            f" calls={self.name}_body\n"
            "}\n"
        )
