"""The ``narrow-index-types`` pass: index arithmetic in ``i32`` wherever its ranges allow.

GPU index math is 64-bit by default (``index`` lowers to i64), and 64-bit
integer multiplies cost several instructions on NVIDIA and AMD hardware. Most
kernels never address more than 2^31 elements, and the ranges are known:
``gpu.thread_id``/``block_id`` carry ``upper_bound``, ``scf.for`` loops have
constant bounds, and simplify-indexing left plain ``arith`` on ``index``.
Upstream ``arith-int-range-narrowing`` runs integer range analysis over
exactly that and rewrites every op whose operands and result fit in 32 bits
into i32 (with ``index_castui`` at the edges); a tensor with more than 2^31
elements keeps its 64-bit math because its ranges do not fit. ``canonicalize``
and ``cse`` then fold the casts it introduced and share duplicates.

Shifts: upstream narrows a shift whose operands and result fit, even when its
amount does not fit the *narrow* width (llvm/llvm-project#218191, fixed
upstream by #218495 but not in the MLIR heron builds with). JAX's threefry
takes the high half of a 64-bit iota as ``convert(iota >> 32)``; narrowed, that
is an i32 shift by 32, which LLVM reads as poison: the optimiser then dropped
the store of the whole output (dropout_threefry and flax's ``nn.Dropout`` gave
other bits on every GPU run, issue 26; the interpreter, which shifts as PTX
does, gave the right ones). So every 64-bit shift is marked before narrowing,
and a marked shift that became i32 keeps its 64-bit meaning: a constant amount
of 32 or more gives 0 (``shli``, ``shrui``) or the sign (``shrsi`` by 31); an
amount not known gets the same answer through a compare and a select.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith

from heron.emitters.ir_utils import walk_ops
from heron.emitters.pipeline.manager import Pass, PipelineOptions, run_upstream

NARROWING = "builtin.module(arith-int-range-narrowing{int-bitwidths-supported=32},canonicalize,cse)"
#: Marks a shift that was 64-bit before narrowing (removed by this pass).
WIDE_SHIFT = "heron.wide_shift"
SHIFTS = ("arith.shli", "arith.shrui", "arith.shrsi")
#: The width upstream narrows to.
NARROW_WIDTH = 32


def run(module: ir.Module, options: PipelineOptions) -> None:
    """Narrow the module's index arithmetic (upstream pass; see the module docstring)."""
    marked = _mark_wide_shifts(module)
    run_upstream(module, NARROWING)
    if marked:
        _define_narrowed_shifts(module)


def _is_wide(value_type: ir.Type) -> bool:
    if isinstance(value_type, ir.IndexType):
        return True
    return isinstance(value_type, ir.IntegerType) and ir.IntegerType(value_type).width == 64


def _mark_wide_shifts(module: ir.Module) -> int:
    """Mark every scalar 64-bit (or ``index``) shift; how many there are."""
    marked = 0
    for op in walk_ops(module.operation):  # one walk for the three names
        if op.name in SHIFTS and _is_wide(op.results[0].type):
            op.attributes[WIDE_SHIFT] = ir.UnitAttr.get()
            marked += 1
    return marked


def _constant_amount(value: ir.Value) -> int | None:
    owner = value.owner
    if not isinstance(owner, ir.OpView | ir.Operation) or owner.operation.name != "arith.constant":
        return None
    attribute = owner.operation.attributes["value"]
    return ir.IntegerAttr(attribute).value if isinstance(attribute, ir.IntegerAttr) else None


def _define_narrowed_shifts(module: ir.Module) -> None:
    """Give each marked shift that narrowing made i32 its 64-bit result (module docstring)."""
    for op in walk_ops(module.operation):
        if op.name not in SHIFTS or WIDE_SHIFT not in op.attributes:
            continue
        del op.attributes[WIDE_SHIFT]
        result_type = op.results[0].type
        if isinstance(result_type, ir.IntegerType):
            if ir.IntegerType(result_type).width == NARROW_WIDTH:
                _define(op, op.name, result_type)


def _define(op: ir.Operation, name: str, narrow: ir.Type) -> None:
    """``op`` (an i32 shift) as its 64-bit original computed it, for amounts of 32 to 63."""
    value, amount = op.operands
    known = _constant_amount(amount)
    if known is not None and 0 <= known < NARROW_WIDTH:
        return
    with ir.InsertionPoint(op), op.location:
        if name == "arith.shrsi":  # the sign, as a shift by 31 gives it
            last = arith.constant(narrow, NARROW_WIDTH - 1)
            op.operands[1] = last if known is not None else arith.minui(amount, last)
            return
        zero = arith.constant(narrow, 0)
        if known is not None:  # every bit shifted out
            op.results[0].replace_all_uses_with(zero)
            op.erase()
            return
        inside = arith.cmpi(arith.CmpIPredicate.ult, amount, arith.constant(narrow, NARROW_WIDTH))
        safe = arith.select(inside, amount, zero)
        shifted = arith.shli(value, safe) if name == "arith.shli" else arith.shrui(value, safe)
        op.results[0].replace_all_uses_with(arith.select(inside, shifted, zero))
        op.erase()


PASS = Pass(
    name="narrow-index-types",
    run=run,
    description="index arithmetic in i32 where ranges fit (upstream arith-int-range-narrowing)",
)
