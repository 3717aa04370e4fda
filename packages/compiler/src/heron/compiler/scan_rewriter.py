"""Scans in log depth: a cumulative reduce-window becomes blocks and a scan of their totals.

jax lowers ``cumsum``, ``cumprod``, ``cummax`` and ``cummin`` (and their
``reverse=True`` forms) on GPU to a ``reduce-window`` whose window spans the
whole dimension (``size=n``, ``pad=(n-1)_0``; reversed: ``pad=0_(n-1)``).
Computed as written, each output element reduces its own window: ``O(n^2)``
work, 21 ms for a 4096 x 4096 cumsum on an H100 against XLA's 0.25 ms
(issue 29). XLA:GPU's ``ReduceWindowRewriter`` rewrites such a scan, and so
does this pass, the same way (base length 16, XLA:GPU's):

1. the dimension is padded with the init value to ``m * 16`` (at its end, or
   at its start for a reversed scan) and viewed as ``[m, 16]``;
2. each block of 16 is scanned (a reduce-window of 16: ``O(16 n)`` work);
3. each block's total (its last element; a reversed scan's first) forms an
   ``[m]`` array, whose own scan (rewritten again while ``m > 16``: log depth)
   shifted by one block is what precedes each block;
4. the reducer combines that with the block's scan; the padding is sliced off.

Only for a reducer that is one binary, associative and commutative op of its
two parameters (add, multiply, maximum, minimum, and, or, xor) and a
reduce-window of one operand with stride 1 and no dilation. Integer, min and
max scans keep every bit; a float sum or product changes order (the check's
reassociation bounds allow it, :func:`heron.harness.tolerance.output_tolerance`:
the ops it makes carry :data:`heron.hlo.determinism.REGROUPED`).
It runs after layout assignment (every shape it makes is row-major), before
fusion.
"""

from __future__ import annotations

from heron.hlo.attributes import PadDim, PaddingConfig, SliceRange, Window, WindowDim
from heron.hlo.determinism import mark_regrouped
from heron.hlo.ir import Instruction, Module
from heron.hlo.passes.manager import HloPass
from heron.hlo.passes.rewrite import Inserter, rewrite_each
from heron.hlo.shapes import ArrayShape
from heron.target import Target

__all__ = ["SCAN_BASE_LENGTH", "SCAN_REDUCERS", "rewrite_scans", "scan_rewriter", "scan_of"]

#: The block a scan is cut into (XLA:GPU's ``ReduceWindowRewriter`` base length).
SCAN_BASE_LENGTH = 16
#: Reducer roots whose scan may be regrouped (associative and commutative).
SCAN_REDUCERS = frozenset({"add", "multiply", "maximum", "minimum", "and", "or", "xor"})


def _row_major(shape: object) -> bool:
    return isinstance(shape, ArrayShape) and shape.is_row_major


def _array(like: ArrayShape, dims: list[int]) -> ArrayShape:
    return ArrayShape.row_major(like.element_type, tuple(dims))


def scan_of(inst: Instruction) -> tuple[int, bool, str] | None:
    """(dimension, reversed, reducer op) where ``inst`` is a cumulative reduce-window
    this pass rewrites (its length over :data:`SCAN_BASE_LENGTH`); else None."""
    if inst.opcode != "reduce-window" or len(inst.operands) != 2:
        return None
    operand = inst.operands[0]
    if not _row_major(operand.shape) or not _row_major(inst.shape):
        return None
    reducer = inst.called("to_apply")
    root = reducer.root
    parameters = [i for i in reducer.instructions if i.opcode == "parameter"]
    if (
        root.opcode not in SCAN_REDUCERS
        or len(reducer.instructions) != 3
        or sorted(id(o) for o in root.operands) != sorted(id(p) for p in parameters)
    ):
        return None
    window: Window | None = inst.attributes.get("window")
    if window is None or len(window.dims) != operand.array_shape.rank:
        return None
    found = None
    for d, (dim, size) in enumerate(zip(window.dims, operand.array_shape.dims, strict=True)):
        if dim.stride != 1 or dim.window_dilation != 1 or dim.base_dilation != 1:
            return None
        if dim.window_reversal:
            return None
        if dim.size == 1 and dim.pad_low == dim.pad_high == 0:
            continue
        if found is not None or dim.size != size or size <= SCAN_BASE_LENGTH:
            return None
        if (dim.pad_low, dim.pad_high) == (size - 1, 0):
            found = (d, False, root.opcode)
        elif (dim.pad_low, dim.pad_high) == (0, size - 1):
            found = (d, True, root.opcode)
        else:
            return None
    return found


class _Scan:
    """The rewrite of one scan (see the module docstring)."""

    def __init__(self, inserter: Inserter, scan: Instruction) -> None:
        self.inserter = inserter
        self.scan = scan
        self.x, self.init = scan.operands
        self.dims = list(self.x.array_shape.dims)
        self.element = self.x.array_shape

    def add(self, opcode: str, dims: list[int], operands, attributes=None, suffix=None):
        return self.inserter.add(
            opcode,
            _array(self.element, dims),
            operands,
            attributes,
            like=self.scan,
            suffix=suffix or opcode,
        )

    def scan_along(self, value: Instruction, dims: list[int], d: int, reverse: bool):
        """A cumulative reduce-window along ``d`` of ``value`` (an array of ``dims``)."""
        n = dims[d]
        low, high = (0, n - 1) if reverse else (n - 1, 0)
        window = Window(
            tuple(
                WindowDim(n, 1, low, high) if axis == d else WindowDim(1)
                for axis in range(len(dims))
            )
        )
        attributes = {"window": window, "to_apply": self.scan.attributes["to_apply"]}
        scan = self.add("reduce-window", dims, [value, self.init], attributes, "block_scan")
        mark_regrouped(scan)
        return scan

    def pad(self, value: Instruction, dims: list[int], d: int, low: int, high: int):
        if not low and not high:
            return value
        config = [PadDim(0, 0)] * len(dims)
        config[d] = PadDim(low, high)
        wide = list(dims)
        wide[d] += low + high
        return self.add("pad", wide, [value, self.init], {"padding": PaddingConfig(tuple(config))})

    def slice(self, value: Instruction, dims: list[int], d: int, start: int, limit: int):
        ranges = tuple(
            SliceRange(start, limit, 1) if axis == d else SliceRange(0, size, 1)
            for axis, size in enumerate(dims)
        )
        out = list(dims)
        out[d] = limit - start
        return self.add("slice", out, [value], {"slice": ranges})

    def bitcast(self, value: Instruction, dims: list[int]):
        if list(value.array_shape.dims) == dims:
            return value
        return self.add("bitcast", dims, [value])

    def rewrite(self, d: int, reverse: bool, op: str) -> Instruction:
        n = self.dims[d]
        b = SCAN_BASE_LENGTH
        m = -(-n // b)
        padding = m * b - n
        low, high = (padding, 0) if reverse else (0, padding)
        padded = self.pad(self.x, self.dims, d, low, high)
        blocks = [*self.dims[:d], m, b, *self.dims[d + 1 :]]
        viewed = self.bitcast(padded, blocks)
        # 2. each block scanned
        inner = self.scan_along(viewed, blocks, d + 1, reverse)
        # 3. each block's total, the scan of the totals, shifted by one block
        edge = 0 if reverse else b - 1
        totals_dims = [*self.dims[:d], m, *self.dims[d + 1 :]]
        totals = self.bitcast(self.slice(inner, blocks, d + 1, edge, edge + 1), totals_dims)
        outer = self.scan_along(totals, totals_dims, d, reverse)
        fewer = [*self.dims[:d], m - 1, *self.dims[d + 1 :]]
        if reverse:  # what follows block i: the scan from block i + 1 on
            shifted = self.pad(self.slice(outer, totals_dims, d, 1, m), fewer, d, 0, 1)
        else:  # what precedes block i: the scan up to block i - 1
            shifted = self.pad(self.slice(outer, totals_dims, d, 0, m - 1), fewer, d, 1, 0)
        spread = self.add(
            "broadcast",
            blocks,
            [shifted],
            {"dimensions": tuple(axis for axis in range(len(blocks)) if axis != d + 1)},
        )
        # 4. combined, and the padding sliced off
        combined = self.add(op, blocks, [spread, inner], suffix="combine")
        mark_regrouped(combined)
        flat = self.bitcast(combined, [*self.dims[:d], m * b, *self.dims[d + 1 :]])
        start = padding if reverse else 0
        return self.slice(flat, [*self.dims[:d], m * b, *self.dims[d + 1 :]], d, start, start + n)


def rewrite_scans(module: Module) -> bool:
    """Rewrite every long cumulative reduce-window of ``module`` (module docstring),
    the scans of block totals it makes included, until none is left."""

    def rewrite(inserter: Inserter, scan: Instruction) -> Instruction | None:
        found = scan_of(scan)
        return None if found is None else _Scan(inserter, scan).rewrite(*found)

    return rewrite_each(module, "reduce-window", rewrite)


def scan_rewriter(target: Target) -> HloPass:
    """The ``scan-rewriter`` pass (``target``: for the GPU pass registry's signature)."""
    return HloPass(
        "scan-rewriter",
        rewrite_scans,
        "cumulative reduce-windows in log depth (XLA's ReduceWindowRewriter)",
    )
