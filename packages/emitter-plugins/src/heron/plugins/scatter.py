"""The scatter emitter: one thread per update element, the operand updated in place.

XLA's scatter emitter (the RFC's "Scatter" section) maps every element of the
updates to a thread (a vector of a few consecutive elements of one window when
XLA's loop unroll factor allows, e.g. two s4 elements; blocks are whole warps,
the extra threads idle). The thread computes each element's scatter index (the
indices operand read at the element's scatter dimensions, mapped onto the
operand by ``scatter_dims_to_operand_dims``, plus batching dimensions), skips
the update when its whole window does not fit in the operand (XLA's rule is
per window, not per element), and combines the update with the output
element:

- ``unique_indices=true``: no two updates meet, so the combiner's result is
  a plain ``tensor.insert`` (the current value is read from the operand);
- otherwise a ``heron_gpu.atomic_rmw`` whose body is the combiner; the
  lowering turns it into a native atomic or a compare-and-swap loop;
- a sub-byte element (s2, s4, u2, u4, f4e2m1fn) is an ``atomic_rmw`` too,
  lowered to a compare-and-swap loop on the byte that holds it;
- several operands (variadic scatter) with non-unique indices, element
  types no atomic can update (fp8, pred, complex), and a scatter that asks
  for it (``--deterministic``, for what the scatter-determinism-expander
  cannot rewrite: :data:`heron.hlo.determinism.SERIAL_UPDATES`): one thread
  applies every update in update order. An atomic covers one value, and a
  variadic combiner must see all of an element's values at once; doing the
  updates serially is correct and keeps XLA's update order.

The output is the operand updated in place: ``output_aliases`` makes each
output alias its operand (a fusion parameter), so the kernel writes only
what it updates. An operand that is not a plain fusion parameter is refused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs
from mlir import ir
from mlir.dialects import arith, scf, tensor

from heron.emitters import mlir_types
from heron.emitters.dialect import atomic_rmw_op, loop_op
from heron.emitters.emitter_base import EntryFunction, FusionEmitter
from heron.emitters.fusion_analysis import FusionAnalysis, claims_kind
from heron.emitters.hookspecs import EmitterSpec, hookimpl
from heron.hlo.determinism import order_dependence, serial_updates_requested
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction
from heron.hlo.shapes import ArrayShape
from heron.indexing import IndexingError, IndexingMap, Interval, Variable
from heron.indexing.affine import Symbol
from heron.indexing.thread_maps import (
    LaunchDimensions,
    fusion_vectorization_limits,
    loop_thread_to_output_map,
)
from heron.partitioner.subgraph import leaf_shapes
from heron.plugins.iteration import loop_launch, loop_unroll_factor

__all__ = ["ScatterDescription", "ScatterEmitter", "heron_emitter_specs"]


@attrs.frozen
class ScatterDescription:
    """A scatter instruction's operands and dimension numbers, read once."""

    scatter: Instruction
    operands: tuple[Instruction, ...]
    indices: Instruction
    updates: tuple[Instruction, ...]
    update_window_dims: tuple[int, ...]
    inserted_window_dims: tuple[int, ...]
    index_map: tuple[int, ...]
    operand_batching_dims: tuple[int, ...]
    indices_batching_dims: tuple[int, ...]
    index_vector_dim: int
    unique_indices: bool
    indices_are_sorted: bool

    @classmethod
    def of(cls, scatter: Instruction) -> ScatterDescription:
        count = (len(scatter.operands) - 1) // 2
        attr = scatter.attributes.get
        return cls(
            scatter=scatter,
            operands=tuple(scatter.operands[:count]),
            indices=scatter.operands[count],
            updates=tuple(scatter.operands[count + 1 :]),
            update_window_dims=tuple(attr("update_window_dims", ())),
            inserted_window_dims=tuple(attr("inserted_window_dims", ())),
            index_map=tuple(attr("scatter_dims_to_operand_dims", ())),
            operand_batching_dims=tuple(attr("input_batching_dims", ())),
            indices_batching_dims=tuple(attr("scatter_indices_batching_dims", ())),
            index_vector_dim=int(attr("index_vector_dim")),
            unique_indices=bool(attr("unique_indices", False)),
            indices_are_sorted=bool(attr("indices_are_sorted", False)),
        )

    @property
    def operand_shape(self) -> ArrayShape:
        return self.operands[0].array_shape

    @property
    def update_shape(self) -> ArrayShape:
        return self.updates[0].array_shape

    @property
    def update_scatter_dims(self) -> tuple[int, ...]:
        """Update dimensions that enumerate scatter indices (not window dimensions)."""
        rank = self.update_shape.rank
        return tuple(d for d in range(rank) if d not in self.update_window_dims)

    @property
    def window_dims(self) -> tuple[int, ...]:
        """Operand dimensions the window spans, in the order of ``update_window_dims``."""
        skipped = set(self.inserted_window_dims) | set(self.operand_batching_dims)
        return tuple(d for d in range(self.operand_shape.rank) if d not in skipped)

    def window_extent(self, operand_dim: int) -> int:
        """The window's size along an operand dimension (1 for inserted/batching ones)."""
        if operand_dim in self.window_dims:
            position = self.window_dims.index(operand_dim)
            return self.update_shape.dims[self.update_window_dims[position]]
        return 1

    @property
    def index_vector_length(self) -> int:
        return len(self.index_map)


def _atomic_capable(shape: ArrayShape) -> bool:
    """Element types an atomic update can handle (native atomics or a CAS loop).

    Sub-byte types (s2, s4, u2, u4, f4e2m1fn) can: ``lower-tensors`` updates a
    packed element with a compare-and-swap loop on its whole byte, which keeps
    the byte's other elements (updated concurrently by other threads) intact.
    """
    element = shape.element_type
    if element.is_sub_byte:
        return True
    if element.name == "PRED" or element.is_complex:
        return False
    return not (element.is_floating and element.bit_width <= 8)


class ScatterEmitter(FusionEmitter):
    """Scatter: one thread per update element (or one thread for serialised scatters)."""

    name = "scatter"
    #: Updates with the same scatter index combine into one element.
    writes_each_element_once = False

    def __init__(self, analysis: FusionAnalysis) -> None:
        super().__init__(analysis)
        root = analysis.roots[0]
        if root.opcode != "scatter":
            raise self._error(
                f"the scatter emitter needs the scatter as the fusion root, not {root.opcode}"
                f" '{root.name}'"
            )
        self.description = ScatterDescription.of(root)
        for operand in self.description.operands:
            if operand.opcode != "parameter":
                raise self._error(
                    f"scatter '{root.name}' updates {operand.opcode} '{operand.name}' in place;"
                    " its operands must be fusion parameters"
                )
        # No updates: the output is the operand (in place), and the kernel writes nothing.
        self.empty = self.description.update_shape.num_elements == 0
        self.serial = not self.description.unique_indices and (
            len(self.description.operands) > 1
            or not _atomic_capable(self.description.operand_shape)
            or serial_updates_requested(root)
        )
        self._launch, self.vector_size = self._choose_launch()

    def _error(self, why: str) -> UnsupportedError:
        return UnsupportedError(f"fusion '{self.fusion.name}': {why}", self.fusion.location)

    # -- launch and iteration ---------------------------------------------------------

    def _choose_launch(self) -> tuple[LaunchDimensions, int]:
        """XLA's launch for a scatter with distributed updates.

        The vector size is ``gcd(elements of one update window, the loop unroll
        factor of the updates)`` (so a vector never spans two windows); blocks
        are the loop emitter's over the updates, with the threads of a block
        rounded up to whole warps of the target (``ScatterWithDistributedUpdates``
        in XLA's scatter emitter launches ``num_warps x warp_size`` threads). The
        extra threads fail the thread map's bounds check and do nothing.
        """
        if self.serial or self.empty:
            return LaunchDimensions(block_x=1, thread_x=1), 1
        shape = self.description.update_shape
        _, narrowest, may_vectorize = fusion_vectorization_limits(self.computation)
        window = math.prod(shape.dims[d] for d in self.description.update_window_dims)
        vector_size = math.gcd(
            window,
            loop_unroll_factor(
                shape.num_elements,
                self.target,
                may_vectorize=may_vectorize,
                smallest_output_bits=narrowest,
            ),
        )
        try:
            launch = loop_launch(shape.num_elements, vector_size, self.target)
        except IndexingError as exc:
            raise self._error(str(exc)) from exc
        warp = self.target.warp_size
        threads = math.ceil(launch.thread_x / warp) * warp
        return attrs.evolve(launch, thread_x=threads), vector_size

    def launch_dimensions(self) -> LaunchDimensions:
        return self._launch

    def order_dependence(self) -> str | None:
        """Atomic updates that meet combine in arrival order (serial updates keep update order)."""
        if self.serial or self.empty:
            return None
        return order_dependence(self.description.scatter)

    def thread_map(self) -> IndexingMap:
        """Thread -> update index: one element per thread, or every update for one thread."""
        shape = self.description.update_shape
        if not self.serial:
            return loop_thread_to_output_map(
                shape.dims, self._launch, self.vector_size, minor_to_major=shape.minor_to_major
            )
        # Scatter dimensions outermost, then window dimensions: XLA's update order.
        order = (*self.description.update_scatter_dims, *self.description.update_window_dims)
        symbols = tuple(Variable(f"u{d}", Interval(0, shape.dims[d] - 1)) for d in order)
        results = [Symbol(order.index(d)) for d in range(shape.rank)]
        dims = (Variable("th_x", Interval(0, 0)), Variable("bl_x", Interval(0, 0)))
        return IndexingMap(dims, tuple(results), symbols)

    def heroes(self) -> tuple[Instruction, ...]:
        return (self.description.scatter,)

    def output_aliases(self) -> dict[int, int]:
        leaves: dict[int, int] = {}
        position = 0
        for param in self.computation.parameters:
            leaves[id(param)] = position
            position += len(leaf_shapes(param.shape))
        return {k: leaves[id(op)] for k, op in enumerate(self.description.operands)}

    # -- the emission -----------------------------------------------------------------

    def unemitted_heroes(self) -> tuple[Instruction, ...]:
        """The scatter has no elemental lowering: the entry function implements it."""
        return (self.description.scatter,)

    def emit_entry(self, entry: EntryFunction) -> list[ir.Value]:
        if self.empty:
            return list(entry.outputs)  # aliased: the operand's values are the result
        dims = [entry.thread_ids[0], *entry.block_ids]

        def body(symbols, update_index, outputs):
            del symbols
            return self._update(entry, list(update_index), list(outputs))

        loop = loop_op(self.thread_map(), dims, list(entry.outputs), body)
        return list(loop.results)

    def _update(
        self, entry: EntryFunction, update_index: list[ir.Value], outputs: list[ir.Value]
    ) -> list[ir.Value]:
        """The body for one update element: bounds check, then the combination."""
        # Every update element is read, skipped or not: each is read exactly once.
        updates = [entry.value_of(u, update_index)[0] for u in self.description.updates]
        starts = self._starts(entry, update_index)
        in_bounds = self._in_bounds(starts)
        target = self._target(starts, update_index)
        if in_bounds is None:
            return self._combine(entry, updates, target, outputs)
        guarded = scf.IfOp(in_bounds, [o.type for o in outputs], has_else=True)
        with ir.InsertionPoint(guarded.then_block):
            scf.YieldOp(self._combine(entry, updates, target, outputs))
        with ir.InsertionPoint(guarded.else_block):
            scf.YieldOp(outputs)
        return list(guarded.results)

    def _starts(self, entry: EntryFunction, update_index: list[ir.Value]) -> list[ir.Value | None]:
        """The window's start in the operand per dimension (None: always 0)."""
        d = self.description
        scatter_index = [update_index[k] for k in d.update_scatter_dims]
        indices_shape = d.indices.array_shape
        unsigned = d.indices.array_shape.element_type.is_unsigned_integral
        index = ir.IndexType.get()
        starts: list[ir.Value | None] = [None] * d.operand_shape.rank
        for k, operand_dim in enumerate(d.index_map):
            position = list(scatter_index)
            if d.index_vector_dim < indices_shape.rank:
                position.insert(d.index_vector_dim, arith.ConstantOp(index, k).result)
            (value,) = entry.value_of(d.indices, position)
            cast = arith.IndexCastUIOp if unsigned else arith.IndexCastOp
            starts[operand_dim] = cast(index, value).result
        for operand_dim, indices_dim in zip(
            d.operand_batching_dims, d.indices_batching_dims, strict=True
        ):
            axis = indices_dim if indices_dim < d.index_vector_dim else indices_dim - 1
            starts[operand_dim] = scatter_index[axis]
        return starts

    def _in_bounds(self, starts: Sequence[ir.Value | None]) -> ir.Value | None:
        """Whether the whole window fits: ``start <= dim - extent`` unsigned, per dimension.

        An unsigned comparison also rejects negative starts (they wrap to
        huge values), so one comparison per dimension suffices.
        """
        d = self.description
        condition = None
        index = ir.IndexType.get()
        for dim, start in enumerate(starts):
            if start is None or dim in d.operand_batching_dims:
                continue
            limit = d.operand_shape.dims[dim] - d.window_extent(dim)
            bound = arith.ConstantOp(index, limit).result
            fits = arith.cmpi(arith.CmpIPredicate.ule, start, bound)
            condition = fits if condition is None else arith.andi(condition, fits)
        return condition

    def _target(self, starts: Sequence[ir.Value | None], update_index: list[ir.Value]):
        """The operand index the update element goes to."""
        d = self.description
        target = []
        for dim, start in enumerate(starts):
            offset = None
            if dim in d.window_dims:
                offset = update_index[d.update_window_dims[d.window_dims.index(dim)]]
            if start is None:
                target.append(offset if offset is not None else _index_constant(0))
            elif offset is None:
                target.append(start)
            else:
                target.append(arith.addi(start, offset))
        return target

    def _combine(
        self,
        entry: EntryFunction,
        updates: list[ir.Value],
        target: list[ir.Value],
        outputs: list[ir.Value],
    ) -> list[ir.Value]:
        """``combiner(current, update)`` written to the target: inserts or an atomic."""
        d = self.description
        combiner = d.scatter.called("to_apply")
        shapes = [o.array_shape for o in d.operands]
        if d.unique_indices or self.serial:
            if d.unique_indices:  # nothing else writes the element: the operand holds it
                currents = [entry.value_of(op, target)[0] for op in d.operands]
            else:  # serial: the output holds every earlier update
                currents = [
                    mlir_types.to_scalar(tensor.extract(out, target), s.element_type)
                    for out, s in zip(outputs, shapes, strict=True)
                ]
            new = entry.call_computation(combiner, [*currents, *updates])
            return [
                tensor.insert(mlir_types.to_element(v, s.element_type), out, target)
                for v, s, out in zip(new, shapes, outputs, strict=True)
            ]
        (update,) = updates
        (element,) = (s.element_type for s in shapes)

        def body(current: ir.Value) -> ir.Value:
            scalar = mlir_types.to_scalar(current, element)
            (result,) = entry.call_computation(combiner, [scalar, update])
            return mlir_types.to_element(result, element)

        return [atomic_rmw_op(outputs[0], target, body).result]


def _index_constant(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IndexType.get(), value).result


@hookimpl
def heron_emitter_specs() -> list[EmitterSpec]:
    return [
        EmitterSpec(
            name="scatter",
            priority=10,
            claims=claims_kind("scatter"),
            factory=ScatterEmitter,
            description="scatter: one thread per update element, atomics or plain writes",
            # its limits (the root, operands that are parameters, the launch) are all the
            # constructor's: over the program and model corpora, 160 of 311 fusions the
            # passes were about to make were refused there, none while emitting
            refuses_when_built=True,
        )
    ]
