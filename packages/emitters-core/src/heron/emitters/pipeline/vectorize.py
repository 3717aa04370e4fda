"""vectorize-loads-stores: contiguous aligned accesses in a vector loop -> one vector access.

The loop emitter writes each thread's V consecutive elements as an
``scf.for %v = 0 to V`` whose body reads ``%input[base + %v]`` and writes
``%iter[base + %v]``. Scalar loads and stores of 2-byte elements waste most of
the memory bandwidth; one 8- or 16-byte access per thread does not. So, as
XLA's ``vectorize_loads_stores.cc`` does:

- an extract from a function-argument tensor at ``base + %v`` becomes one
  ``vector.transfer_read`` at ``base`` before the loop and a
  ``vector.extract %vec[%v]`` in it;
- an insert into the loop's tensor iter_arg at ``base + %v`` becomes a
  ``vector.insert`` into a vector the loop now carries, written once after
  the loop with ``vector.transfer_write``.

- where the device adds several elements in one atomic
  (``PipelineOptions.vector_atomic_add_bytes``: sm_90's ``red.global.add.v4.f32``,
  XLA's vectorized ``atomic_rmw``), an atomic add into the loop's tensor
  iter_arg at ``base + %v`` (a scatter-add's window) becomes a carried vector
  of addends and one vector ``heron_gpu.atomic_rmw`` at ``base`` after the
  loop; f32, f16 and bf16 elements, adds without fastmath flags.

Only what is provably safe is rewritten: ``base`` must not depend on ``%v``
and must be a multiple of V on the whole domain of the index map (so the
access is aligned and, since all V elements are accessed when any one is,
in bounds); an access guarded by an ``scf.if`` is rewritten only when the
condition does not depend on ``%v`` (the hoisted access is then guarded by
the same condition). A read of a kernel parameter the kernel never writes
(``kernel_arguments.read_only_arguments``), made on every iteration, counts
as loop-invariant when its index is: a scatter's indices, which decide its
guard. Sub-byte, ``i1``, fp8/f4 and complex elements are left alone: their
memory representation differs from their tensor type.
"""

from __future__ import annotations

import math

import attrs
from mlir import ir
from mlir.dialects import arith, scf, vector

from heron.emitters import atomics, ir_utils, kernel_arguments
from heron.emitters.dialect import apply_indexing_op, atomic_rmw_op, op_indexing_map
from heron.emitters.pipeline import vectorize_adjacent
from heron.emitters.pipeline.manager import Pass, PipelineOptions
from heron.emitters.pipeline.vector_access import (
    erase_with_unused_index,
    transfer_read,
    transfer_write,
)
from heron.indexing import IndexingMap
from heron.indexing.affine import (
    AffineExpr,
    Binary,
    BinaryKind,
    Constant,
    Dim,
    Symbol,
    used_dims,
    used_symbols,
)
from heron.indexing.affine import mod as affine_mod
from heron.indexing.simplifier import linear_form, simplify_expr

VECTOR_SIZES = (2, 4, 8)
APPLY_INDEXING = "heron_gpu.apply_indexing"
ATOMIC_RMW = "heron_gpu.atomic_rmw"

# Ops with no side effects and no regions: an op of these kinds whose operands
# do not depend on the loop variable can be cloned before the loop.
_PURE_PREFIXES = ("arith.", "math.", "index.")
_PURE_OPS = frozenset(
    {
        APPLY_INDEXING,
        "gpu.thread_id",
        "gpu.block_id",
        "gpu.block_dim",
        "gpu.grid_dim",
        "gpu.lane_id",
        "affine.apply",
    }
)


def _is_pure(op: ir.Operation) -> bool:
    return len(op.regions) == 0 and (op.name in _PURE_OPS or op.name.startswith(_PURE_PREFIXES))


def constant_int(value: ir.Value) -> int | None:
    """The integer a value holds when it is an ``arith.constant`` (index or integer), else None."""
    if not isinstance(value, ir.OpResult):
        return None
    op = value.owner
    if op.name != "arith.constant":
        return None
    attr = op.attributes["value"]
    if not isinstance(attr, ir.IntegerAttr):
        return None
    return ir.IntegerAttr(attr).value


def _is_inside(op: ir.Operation, ancestor: ir.Operation) -> bool:
    """Whether ``op`` is ``ancestor`` or nested in one of its regions."""
    current = op
    while True:
        if current == ancestor:
            return True
        parent = current.parent
        if parent is None or parent.name in ("builtin.module", "gpu.module"):
            return False
        current = parent.operation


def _defining_op(value: ir.Value) -> ir.Operation:
    """The op that defines ``value``, or for a block argument the op owning its block."""
    if isinstance(value, ir.OpResult):
        return value.owner.operation
    return ir.BlockArgument(value).owner.owner.operation


def _supported_element(element: ir.Type) -> bool:
    """Elements whose tensor type is their memory type and at least a byte wide."""
    if isinstance(element, ir.IntegerType):
        return element.width >= 8
    if isinstance(element, ir.F16Type | ir.BF16Type | ir.F32Type | ir.F64Type):
        return True
    return False


class _Loop:
    """One candidate loop and what can be cloned before it.

    ``read_only`` are the function's tensor arguments whose elements never change
    while the kernel runs: a ``tensor.extract`` from one, made on every iteration
    (directly in the loop's body), is as pure as arithmetic and may be hoisted.
    """

    def __init__(
        self, loop: ir.Operation, size: int, read_only: frozenset[ir.Value] = frozenset()
    ) -> None:
        self.op = loop
        self.size = size
        self.read_only = read_only
        self.body = loop.regions[0].blocks[0]
        self.iv = self.body.arguments[0]
        self._variant: dict[ir.Value, bool] = {}
        self._hoisted: dict[ir.Value, ir.Value] = {}

    def defined_inside(self, value: ir.Value) -> bool:
        return _is_inside(_defining_op(value), self.op)

    def _hoistable(self, op: ir.Operation) -> bool:
        if _is_pure(op):
            return True
        return (
            op.name == "tensor.extract"
            and op.operands[0] in self.read_only
            and op.parent.operation == self.op
        )

    def depends_on_loop(self, value: ir.Value) -> bool:
        """Whether ``value`` may differ between iterations (conservatively)."""
        known = self._variant.get(value)
        if known is not None:
            return known
        if not self.defined_inside(value):
            result = False
        elif not isinstance(value, ir.OpResult) or not self._hoistable(value.owner.operation):
            result = True
        else:
            op = value.owner.operation
            operands = list(op.operands)
            if op.name == APPLY_INDEXING:
                used = _apply_result_operands(op, value.result_number)
                operands = [operands[i] for i in sorted(used)]
            result = any(self.depends_on_loop(o) for o in operands)
        self._variant[value] = result
        return result

    def hoist(self, value: ir.Value) -> ir.Value:
        """A copy of loop-invariant ``value`` computed before the loop.

        An ``apply_indexing`` result is hoisted alone: operands its expression
        does not use (possibly the loop variable) become the lower bound of
        their variable, which gives the same value.
        """
        if not self.defined_inside(value):
            return value
        done = self._hoisted.get(value)
        if done is not None:
            return done
        op = value.owner.operation
        if op.name == APPLY_INDEXING:
            indexing_map = op_indexing_map(op)
            used = _apply_result_operands(op, value.result_number)
            variables = [*indexing_map.dimensions, *indexing_map.symbols]
            operands = []
            for i, operand in enumerate(op.operands):
                if i in used or not self.depends_on_loop(operand):
                    operands.append(self.hoist(operand))
                else:
                    with ir.InsertionPoint(self.op):
                        operands.append(ir_utils.index_constant(variables[i].bounds.lower))
            clone = op.clone(ip=ir.InsertionPoint(self.op))
            for i, operand in enumerate(operands):
                clone.operands[i] = operand
            self._hoisted[value] = clone.results[value.result_number]
            return self._hoisted[value]
        operands = [self.hoist(o) for o in op.operands]
        clone = op.clone(ip=ir.InsertionPoint(self.op))
        for i, operand in enumerate(operands):
            clone.operands[i] = operand
        for old, new in zip(op.results, clone.results, strict=True):
            self._hoisted[old] = new
        return self._hoisted[value]


def _apply_result_operands(op: ir.Operation, result_number: int) -> set[int]:
    """Positions of the operands that result ``result_number`` of an apply_indexing uses.

    A value depends on the loop variable only through the variables its map
    result mentions: an operand bound to an unused symbol cannot change it.
    """
    indexing_map = op_indexing_map(op)
    expr = indexing_map.results[result_number]
    n_dims = indexing_map.num_dims
    return used_dims(expr) | {n_dims + i for i in used_symbols(expr)}


@attrs.frozen
class _Access:
    """An extract or insert at ``apply(..., %v, ...) = base + %v``, and its guards."""

    op: ir.Operation
    apply: ir.Operation
    iv_position: int
    guards: tuple[ir.Value, ...]


def known_multiple(expr: AffineExpr) -> int:
    """A positive integer that divides ``expr`` at every point (0 means ``expr`` is 0)."""
    if isinstance(expr, Constant):
        return abs(expr.value)
    if isinstance(expr, Dim | Symbol):
        return 1
    assert isinstance(expr, Binary)
    lhs, rhs = known_multiple(expr.lhs), known_multiple(expr.rhs)
    if expr.kind is BinaryKind.ADD:
        return math.gcd(lhs, rhs)
    if expr.kind is BinaryKind.MUL:
        return lhs * rhs
    if expr.kind is BinaryKind.MOD and isinstance(expr.rhs, Constant):
        return math.gcd(lhs, abs(expr.rhs.value))
    return 1


def contiguous_base(indexing_map: IndexingMap, variable: Dim | Symbol, size: int) -> bool:
    """Whether the map's one result is ``f(others) + variable`` with ``f`` a multiple of size."""
    if indexing_map.num_results != 1:
        return False
    expr = simplify_expr(indexing_map.results[0], indexing_map)
    terms, offset = linear_form(expr)
    if terms.get(variable) != 1:
        return False
    rest_terms = {t: c for t, c in terms.items() if t != variable}
    for term in rest_terms:
        uses = used_dims(term) if isinstance(variable, Dim) else used_symbols(term)
        if variable.index in uses:
            return False
    divisor = math.gcd(offset, *(c * known_multiple(t) for t, c in rest_terms.items()))
    if divisor % size == 0:
        return True
    rest = Constant(offset)
    for term, coefficient in rest_terms.items():
        rest = rest + term * coefficient
    return simplify_expr(affine_mod(rest, Constant(size)), indexing_map) == Constant(0)


def _index_access(loop: _Loop, op: ir.Operation, index: ir.Value) -> _Access | None:
    """The access if its index is ``base + %v`` with an aligned, invariant base, else None."""
    if not isinstance(index, ir.OpResult) or index.owner.operation.name != APPLY_INDEXING:
        return None
    apply = index.owner.operation
    operands = list(apply.operands)
    positions = [i for i, o in enumerate(operands) if o == loop.iv]
    if len(positions) != 1:
        return None
    if any(loop.depends_on_loop(o) for i, o in enumerate(operands) if i != positions[0]):
        return None
    indexing_map = op_indexing_map(apply)
    if len(indexing_map.results) != 1:
        return None
    position = positions[0]
    variable: Dim | Symbol = (
        Dim(position)
        if position < indexing_map.num_dims
        else Symbol(position - indexing_map.num_dims)
    )
    if not contiguous_base(indexing_map, variable, loop.size):
        return None
    guards = _guards(loop, op)
    if guards is None:
        return None
    return _Access(op, apply, position, tuple(guards))


def _guards(loop: _Loop, op: ir.Operation) -> list[ir.Value] | None:
    """The conditions of the scf.if ops between ``op`` and the loop (then-regions only).

    None when something else lies between them or a condition depends on the
    loop variable: then not every iteration performs the access.
    """
    guards: list[ir.Value] = []
    current = op
    while True:
        block = current.parent  # the op owning the region that holds ``current``
        if block is None:
            return None
        parent = block.operation
        if parent == loop.op:
            return guards
        if parent.name != "scf.if":
            return None
        then_block = parent.regions[0].blocks[0]
        if not any(o.operation == current for o in then_block.operations):
            return None
        condition = parent.operands[0]
        if loop.depends_on_loop(condition):
            return None
        guards.append(condition)
        current = parent


def _single_use(value: ir.Value) -> ir.Operation | None:
    uses = list(value.uses)
    return uses[0].owner.operation if len(uses) == 1 else None


def _loop_size(loop: ir.Operation) -> int | None:
    lower, upper, step = (constant_int(v) for v in list(loop.operands)[:3])
    if lower != 0 or step != 1 or upper not in VECTOR_SIZES:
        return None
    return upper


class _Rewriter:
    """Rewrites one loop: hoisted reads, carried vectors, writes after the loop."""

    def __init__(self, loop: _Loop, func_args: set[ir.Value]) -> None:
        self.loop = loop
        self.func_args = func_args
        self._bases: dict[tuple, ir.Value] = {}
        self._reads: dict[tuple, ir.Value] = {}

    # -- analysis ------------------------------------------------------------
    def loads(self) -> list[_Access]:
        found = []
        for op in ir_utils.walk_ops(self.loop.op, "tensor.extract"):
            operands = list(op.operands)
            if len(operands) != 2 or operands[0] not in self.func_args:
                continue
            if not _supported_element(ir.RankedTensorType(operands[0].type).element_type):
                continue
            access = _index_access(self.loop, op, operands[1])
            if access is not None:
                found.append(access)
        return found

    def stores(self, vector_atomic_add_bytes: int = 0) -> list[_Write]:
        """Each iter_arg tensor written once per iteration: by a ``tensor.insert``, or by
        an atomic add where one atomic adds ``vector_atomic_add_bytes`` at once."""
        found = []
        body = self.loop.body
        yielded = list(ir_utils.block_ops(body)[-1].operands)
        for number, arg in enumerate(list(body.arguments)[1:]):
            if not isinstance(arg.type, ir.RankedTensorType):
                continue
            element = ir.RankedTensorType(arg.type).element_type
            if not _supported_element(element):
                continue
            write = self._write_for(arg, yielded[number])
            if write is None:
                continue
            if write.name == "tensor.insert":
                index = write.operands[2]
            else:
                if not _vector_atomic_element(element) or _atomic_addend(write) is None:
                    continue
                if self.loop.size * ir.FloatType(element).width // 8 > vector_atomic_add_bytes:
                    continue
                index = write.operands[1]
            access = _index_access(self.loop, write, index)
            if access is not None and len(access.guards) <= 1:
                found.append(_Write(number, access))
        return found

    def _write_for(self, arg: ir.Value, result: ir.Value) -> ir.Operation | None:
        """The tensor.insert or one-index atomic_rmw producing ``result`` from ``arg``,
        directly or in an scf.if."""
        if not isinstance(result, ir.OpResult):
            return None
        owner = result.owner.operation
        arg_users = [(u.owner.operation, u.operand_number) for u in arg.uses]
        if _writes(owner, arg):
            ok = len(arg_users) == 1
            return owner if ok and owner.parent.operation == self.loop.op else None
        if owner.name != "scf.if" or len(owner.regions[1].blocks) == 0:
            return None
        if owner.parent.operation != self.loop.op:
            return None
        slot = result.result_number
        then_yield = ir_utils.block_ops(owner.regions[0].blocks[0])[-1]
        else_yield = ir_utils.block_ops(owner.regions[1].blocks[0])[-1]
        inner = then_yield.operands[slot]
        if else_yield.operands[slot] != arg or not isinstance(inner, ir.OpResult):
            return None
        write = inner.owner.operation
        if not _writes(write, arg):
            return None
        if write.parent.operation != owner or _single_use(inner) != then_yield:
            return None
        if len(arg_users) != 2:
            return None
        return write

    # -- rewriting -----------------------------------------------------------
    def base(self, access: _Access) -> ir.Value:
        """``apply_indexing`` of the access's map with ``%v := 0``, before the loop."""
        apply = access.apply
        operands = [
            self.loop.iv if i == access.iv_position else self.loop.hoist(o)
            for i, o in enumerate(apply.operands)
        ]
        key = (str(apply.attributes["indexing_map"]), access.iv_position, *operands)
        known = self._bases.get(key)
        if known is not None:
            return known
        with ir.InsertionPoint(self.loop.op):
            operands[access.iv_position] = ir_utils.index_constant(0)
            indexing_map = op_indexing_map(apply)
            n_dims = indexing_map.num_dims
            value = apply_indexing_op(indexing_map, operands[:n_dims], operands[n_dims:]).result
        self._bases[key] = value
        return value

    def _guard(self, guards: tuple[ir.Value, ...]) -> ir.Value | None:
        hoisted = [self.loop.hoist(g) for g in guards]
        if not hoisted:
            return None
        with ir.InsertionPoint(self.loop.op):
            condition = hoisted[0]
            for other in hoisted[1:]:
                condition = arith.andi(condition, other)
        return condition

    def vectorize_load(self, access: _Access) -> None:
        tensor = access.op.operands[0]
        element = ir.RankedTensorType(tensor.type).element_type
        vector_type = ir.VectorType.get([self.loop.size], element)
        base = self.base(access)
        condition = self._guard(access.guards)
        key = (tensor, base, condition)
        loaded = self._reads.get(key)
        if loaded is None:
            with ir.InsertionPoint(self.loop.op):
                if condition is None:
                    loaded = transfer_read(vector_type, tensor, base)
                else:
                    guarded = scf.IfOp(condition, [vector_type], has_else=True)
                    with ir.InsertionPoint(guarded.then_block):
                        scf.YieldOp([transfer_read(vector_type, tensor, base)])
                    with ir.InsertionPoint(guarded.else_block):
                        scf.YieldOp([_zero(vector_type)])
                    loaded = guarded.results[0]
            self._reads[key] = loaded
        with ir.InsertionPoint(access.op):
            scalar = _vector_extract(loaded, self.loop.iv)
        access.op.results[0].replace_all_uses_with(scalar)
        erase_with_unused_index(access.op)

    def vectorize_stores(self, stores: list[_Write]) -> ir.Operation:
        """Carry one vector per written tensor; write each after the loop. Returns the new loop."""
        old = self.loop.op
        bases = [self.base(store.access) for store in stores]
        conditions = [self._guard(store.access.guards) for store in stores]
        with ir.InsertionPoint(old):
            zeros = [_zero(ir.VectorType.get([self.loop.size], s.value.type)) for s in stores]
        n_old = len(old.results)
        new = _for_with_extra_iter_args(old, zeros)
        body = new.regions[0].blocks[0]
        iv = body.arguments[0]
        vector_args = list(body.arguments)[1 + n_old :]
        # (value, result position) per store: a guarded store's vector leaves its
        # scf.if as an extra result. Two stores in one scf.if rebuild it twice and
        # the first rebuild's op is erased, so results are looked up only at the end.
        pending: list[tuple[ir.Value, int | None]] = []
        for store, vector_arg in zip(stores, vector_args, strict=True):
            write, access = store.access.op, store.access
            tensor_arg = body.arguments[1 + store.number]
            with ir.InsertionPoint(write):
                inserted = _vector_insert(store.value, vector_arg, iv)
            write.results[0].replace_all_uses_with(tensor_arg)
            erase_with_unused_index(write)
            if access.guards:
                if_op = _if_with_extra_result(_enclosing_if(inserted), inserted, vector_arg)
                pending.append((inserted, len(if_op.results) - 1))
            else:
                pending.append((inserted, None))
        carried = [
            value if position is None else _enclosing_if(value).results[position]
            for value, position in pending
        ]
        terminator = ir_utils.block_ops(body)[-1]
        with ir.InsertionPoint(terminator):
            scf.YieldOp([*terminator.operands, *carried])
        terminator.erase()
        after = ir.InsertionPoint.after(new)
        for i, (store, base, condition) in enumerate(zip(stores, bases, conditions, strict=True)):
            tensor = new.results[store.number]
            vec = new.results[n_old + i]
            users = [u.owner.operation for u in tensor.uses]
            with after:
                if condition is None:
                    written = store.write_vector(vec, tensor, base)
                else:
                    guarded = scf.IfOp(condition, [tensor.type], has_else=True)
                    with ir.InsertionPoint(guarded.then_block):
                        scf.YieldOp([store.write_vector(vec, tensor, base)])
                    with ir.InsertionPoint(guarded.else_block):
                        scf.YieldOp([tensor])
                    written = guarded.results[0]
            for user in users:
                for j, operand in enumerate(list(user.operands)):
                    if operand == tensor:
                        user.operands[j] = written
            after = ir.InsertionPoint.after(written.owner.operation)
        return new


@attrs.frozen
class _Write:
    """A write of iter_arg ``number`` at ``base + %v`` each iteration: a ``tensor.insert``
    or an atomic add (``access.op``)."""

    number: int
    access: _Access
    #: Known before the op is rewritten away.
    atomic: bool = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "atomic", self.access.op.name == ATOMIC_RMW)

    @property
    def value(self) -> ir.Value:
        """What the write stores or adds (read when asked: vectorized loads replace values)."""
        op = self.access.op
        if not self.atomic:
            return op.operands[0]
        addend = _atomic_addend(op)
        assert addend is not None, "stores() takes only atomic adds"
        return addend

    def write_vector(self, vec: ir.Value, tensor: ir.Value, base: ir.Value) -> ir.Value:
        """The write of all lanes at once, after the loop: the tensor it gives."""
        if not self.atomic:
            return transfer_write(vec, tensor, base)
        lanes = ir.VectorType(vec.type).shape[0]
        return atomic_rmw_op(tensor, [base], lambda current: arith.addf(current, vec), lanes).result


def _writes(op: ir.Operation, tensor: ir.Value) -> bool:
    """Whether ``op`` is a ``tensor.insert`` into ``tensor`` or a one-index atomic on it."""
    if op.name == "tensor.insert":
        return op.operands[1] == tensor
    return op.name == ATOMIC_RMW and op.operands[0] == tensor and len(op.operands) == 2


def _atomic_addend(op: ir.Operation) -> ir.Value | None:
    """What atomic ``op`` adds to the current value (a float add), None for another body."""
    simple = atomics.simple_atomic(op.regions[0].blocks[0])
    if simple is None or simple[0] != "addf":
        return None
    return simple[1]


def _vector_atomic_element(element: ir.Type) -> bool:
    """Elements a vector atomic add takes (PTX's vector ``red``: f32, f16, bf16)."""
    return isinstance(element, ir.F32Type | ir.F16Type | ir.BF16Type)


def _enclosing_if(value: ir.Value) -> ir.Operation:
    return value.owner.operation.parent.operation


def _zero(vector_type: ir.VectorType) -> ir.Value:
    element = vector_type.element_type
    if isinstance(element, ir.IntegerType):
        zero = ir.IntegerAttr.get(element, 0)
    else:
        zero = ir.FloatAttr.get(element, 0.0)
    return arith.ConstantOp(vector_type, ir.DenseElementsAttr.get_splat(vector_type, zero)).result


def _dynamic() -> int:
    return ir.ShapedType.get_dynamic_size()


def _vector_extract(vec: ir.Value, position: ir.Value) -> ir.Value:
    return vector.ExtractOp(vec, [position], [_dynamic()]).result


def _vector_insert(value: ir.Value, vec: ir.Value, position: ir.Value) -> ir.Value:
    return vector.InsertOp(value, vec, [position], [_dynamic()]).result


def _move_ops(source: ir.Block, target: ir.Block) -> None:
    for op in ir_utils.block_ops(source):
        target.append(op)


def _for_with_extra_iter_args(old: ir.Operation, extra: list[ir.Value]) -> ir.Operation:
    """A copy of scf.for ``old`` (body moved, uses replaced) with more iter_args; erases ``old``."""
    operands = list(old.operands)
    with ir.InsertionPoint(old):
        new = scf.ForOp(operands[0], operands[1], operands[2], [*operands[3:], *extra]).operation
    old_body = old.regions[0].blocks[0]
    new_body = new.regions[0].blocks[0]
    for old_arg, new_arg in zip(old_body.arguments, new_body.arguments, strict=False):
        old_arg.replace_all_uses_with(new_arg)
    _move_ops(old_body, new_body)
    for old_result, new_result in zip(old.results, new.results, strict=False):
        old_result.replace_all_uses_with(new_result)
    old.erase()
    return new


def _if_with_extra_result(
    old: ir.Operation, then_value: ir.Value, else_value: ir.Value
) -> ir.Operation:
    """A copy of scf.if ``old`` yielding one more value; erases ``old``."""
    types = [r.type for r in old.results]
    with ir.InsertionPoint(old):
        new = scf.IfOp(old.operands[0], [*types, then_value.type], has_else=True).operation
    for region, value in ((0, then_value), (1, else_value)):
        source = old.regions[region].blocks[0]
        target = new.regions[region].blocks[0]
        _move_ops(source, target)
        terminator = ir_utils.block_ops(target)[-1]
        with ir.InsertionPoint(terminator):
            scf.YieldOp([*terminator.operands, value])
        terminator.erase()
    for old_result, new_result in zip(old.results, new.results, strict=False):
        old_result.replace_all_uses_with(new_result)
    old.erase()
    return new


def vectorize_loop(
    loop_op: ir.Operation,
    func_args: set[ir.Value],
    read_only: frozenset[ir.Value] = frozenset(),
    vector_atomic_add_bytes: int = 0,
) -> bool:
    """Vectorize the loads, stores and atomic adds of one ``scf.for``; whether anything
    changed. ``read_only``: the function arguments no write reaches (see ``_Loop``)."""
    size = _loop_size(loop_op)
    if size is None:
        return False
    rewriter = _Rewriter(_Loop(loop_op, size, read_only), func_args)
    loads = rewriter.loads()
    stores = rewriter.stores(vector_atomic_add_bytes)
    for access in loads:
        rewriter.vectorize_load(access)
    if stores:
        rewriter.vectorize_stores(stores)
    return bool(loads or stores)


def run(module: ir.Module, options: PipelineOptions) -> None:
    """Vectorize every eligible loop of every function (innermost loops are the candidates)."""
    for func_op in ir_utils.block_ops(module.body):
        if func_op.name != "func.func" or len(func_op.regions[0].blocks) == 0:
            continue
        arguments = list(func_op.regions[0].blocks[0].arguments)
        func_args = set(arguments)
        read_only = frozenset()
        if kernel_arguments.KERNEL_ATTR in func_op.attributes:
            read_only = frozenset(
                arguments[k] for k in kernel_arguments.read_only_arguments(func_op)
            )
        loops = ir_utils.walk_ops(func_op, "scf.for")
        for loop_op in reversed(loops):  # innermost first: a rewrite replaces only its own loop
            vectorize_loop(loop_op, func_args, read_only, options.vector_atomic_add_bytes)
        vectorize_adjacent.run_function(func_op)


PASS = Pass(
    name="vectorize-loads-stores",
    run=run,
    description=(
        "contiguous aligned extract/insert in a vector loop -> vector.transfer_read/write,"
        " atomic adds -> one vector atomic where the device has them;"
        " aligned adjacent extracts in one block -> one vector.transfer_read"
    ),
)
