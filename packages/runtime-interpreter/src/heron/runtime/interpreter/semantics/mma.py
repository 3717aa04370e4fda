"""Warp-level matrix multiply-accumulate: ``nvgpu.mma.sync`` (PTX ``mma.sync.aligned``).

The op is collective over a warp of 32 lanes: each lane holds a fragment of A,
B and C in registers, and the hardware multiplies the matrices the fragments
make up. Where each fragment element sits is the PTX ISA's layout ("Matrix
Fragments for mma.m16n8k16 with floating point type", "... for
mma.m16n8k32"): with ``g = lane / 4``, ``t = lane % 4`` and ``p = K / 8``
elements a 32-bit register (2 for f16/bf16 at K = 16, 4 for s8 at K = 32),
element ``[r, e]`` of

- A (``vector<4xp>``, 16 x K) is ``A[g + 8 (r % 2), p t + e + (K/2) (r / 2)]``;
- B (``vector<2xp>``, K x 8) is ``B[p t + e + (K/2) r, g]``;
- C and D (``vector<2x2>``, 16 x 8) are ``C[g + 8 r, 2 t + e]``.

s8 operands with s32 accumulators (m16n8k32): exact products and sums,
clamped to the s32 range (``nvgpu.mma.sync`` lowers to ``mma.sync ...
.satfinite``, which saturates; the GEMM emitter takes this path only where no
sum can leave s32, so the clamp never changes a result there).

Arithmetic (f16 or bf16 in, f32 accumulators): the PTX ISA does not fix the
order or the rounding of the additions inside one instruction. The
interpreter computes every product exactly and ``D = C + sum_k A_ik B_kj`` in
f64, rounded once to f32 (a fused dot product: the products of f16/bf16
operands are exact in f64, and the sum of 16 of them with ``C`` is within
f64's rounding of exact, so the result is the exact value rounded to f32 up
to a double-rounding tie). Each element of ``D`` is then within half an f32
ulp of the exact ``C + A B``, within the GEMM harness's bound for any order
of f32 additions, which the hardware's (truncating, per-group aligned)
accumulation also meets.

Like a shuffle, every lane of a warp that executes the op must take part
(``divergent-shuffle`` names one that does not): on the hardware the
``.aligned`` instruction requires all 32 threads of the warp to execute it.
"""

from __future__ import annotations

import numpy as np

from heron.runtime.interpreter.engine import Frame, semantics
from heron.runtime.interpreter.program import Op
from heron.runtime.interpreter.semantics.gpu import _fail_at
from heron.runtime.interpreter.types import VectorType, parse_type

__all__ = ["check_warps", "fragment_positions"]

WARP = 32
#: (m, n, k) -> the operand vector shapes, the operand types and the accumulator type.
SHAPES = {
    (16, 8, 16): (((4, 2), (2, 2), (2, 2)), ("f16", "bf16"), "f32"),
    (16, 8, 32): (((4, 4), (2, 4), (2, 2)), ("i8",), "i32"),
}


def fragment_positions(operand: str, shape: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Row and column arrays, ``(32,) + fragment shape``, of each lane's elements."""
    if shape not in SHAPES:
        raise ValueError(f"no fragment layout for mma shape {shape}")
    p, half = shape[2] // 8, shape[2] // 2
    lane = np.arange(WARP).reshape(WARP, 1, 1)
    g, t = lane // 4, lane % 4
    if operand == "a":
        r, e = np.arange(4).reshape(1, 4, 1), np.arange(p).reshape(1, 1, p)
        return np.broadcast_arrays(g + 8 * (r % 2), p * t + e + half * (r // 2))
    if operand == "b":
        r, e = np.arange(2).reshape(1, 2, 1), np.arange(p).reshape(1, 1, p)
        return np.broadcast_arrays(p * t + e + half * r, g + 0 * e)
    r, e = np.arange(2).reshape(1, 2, 1), np.arange(2).reshape(1, 1, 2)
    if operand == "c":
        return np.broadcast_arrays(g + 8 * r, 2 * t + e)
    raise ValueError(f"unknown mma operand {operand!r}")


def _shape(frame: Frame, op: Op) -> tuple[int, int, int]:
    shape = tuple(int(v) for v in op.attributes.get("mmaShape", ()))
    types = tuple(parse_type(t) for t in op.operand_types)
    vectors = tuple(t.shape if isinstance(t, VectorType) else () for t in types)
    expected = SHAPES.get(shape)
    elements = [str(t.element) if isinstance(t, VectorType) else "" for t in types]
    if (
        expected is None
        or expected[0] != vectors
        or elements[0] != elements[1]
        or elements[0] not in expected[1]
        or elements[2] != expected[2]
    ):
        raise frame.unsupported(
            op,
            f"mma shape {list(shape)} with operands {', '.join(op.operand_types)}: the"
            " interpreter runs m16n8k16 (f16 or bf16 vector<4x2>, vector<2x2>; f32"
            " vector<2x2>) and m16n8k32 (i8 vector<4x4>, vector<2x4>; i32 vector<2x2>)",
        )
    if op.attributes.get("tf32Enabled") is not None:
        raise frame.unsupported(op, "tf32 MMAs are not run by the interpreter")
    return shape


def check_warps(frame: Frame, op: Op, name: str = "mma.sync") -> None:
    """Whole warps of 32 lanes, every one of them active where any is (``name``: the
    collective op, for the messages)."""
    lanes = frame.lanes
    if lanes.warp_size != WARP or lanes.threads_per_block % WARP:
        raise frame.unsupported(
            op,
            f"{name} needs warps of {WARP} lanes filling the block (the launch has warps"
            f" of {lanes.warp_size} and {lanes.threads_per_block} threads a block)",
        )
    if frame.mask is None:
        return
    warp = lanes.warp_in_batch
    taking_part = np.bincount(warp[frame.mask], minlength=int(warp.max()) + 1)
    missing = ~frame.mask & (taking_part[warp] > 0)
    if missing.any():
        _fail_at(
            frame,
            "divergent-shuffle",
            op,
            missing,
            lambda lane: (
                f"this thread (lane {int(lanes.lane_in_warp[lane])} of its warp) does not"
                f" take part in the {name} that {int(taking_part[warp[lane]])} threads of"
                " its warp execute (all 32 must)"
            ),
        )


def _gather(
    fragments: np.ndarray, rows: np.ndarray, cols: np.ndarray, size, kind: type
) -> np.ndarray:
    """The warps' matrices ``(warps,) + size`` (``kind``: f64 or int64) from their lanes'
    fragments."""
    warps = fragments.shape[0] // WARP
    per_warp = fragments.reshape(warps, WARP, *fragments.shape[1:]).astype(kind)
    matrix = np.zeros((warps, *size), kind)
    matrix[:, rows, cols] = per_warp
    return matrix


@semantics("nvgpu.mma.sync")
def mma_sync(frame: Frame, op: Op) -> None:
    shape = _shape(frame, op)
    check_warps(frame, op)
    m, n, k = shape
    a, b, c = (frame.per_lane(v, t) for v, t in zip(frame.operands(op), op.operand_types))
    ra, ca = fragment_positions("a", shape)
    rb, cb = fragment_positions("b", shape)
    rc, cc = fragment_positions("c", shape)
    integers = SHAPES[shape][2] == "i32"
    kind = np.int64 if integers else np.float64
    a_matrix = _gather(a, ra, ca, (m, k), kind)
    b_matrix = _gather(b, rb, cb, (k, n), kind)
    c_matrix = _gather(c, rc, cc, (m, n), kind)
    exact = c_matrix + a_matrix @ b_matrix  # int64: |C| < 2**31 and 32 products < 2**20
    if integers:
        info = np.iinfo(np.int32)
        d_matrix = np.clip(exact, info.min, info.max).astype(np.int32)
    else:
        d_matrix = exact.astype(np.float32)
    d = d_matrix[:, rc, cc]
    frame.set_result(op, d.reshape(c.shape))
