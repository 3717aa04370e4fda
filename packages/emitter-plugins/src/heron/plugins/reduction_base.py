"""What the four reduction emitters share: heroes, groups, collapsed shapes and the phases.

A reduction fusion has one or more ``reduce`` heroes (one per root that
reaches a reduce through trivial ops), side outputs (roots with the same
element count as the reduce input, written while the input is walked) and
epilogues (instructions after a reduce, computed from the injected reduced
value). As in XLA (``ReductionFusion``), the emitter:

1. collapses the hero operand to three physical dimensions: a row reduction
   is ``[reduced major, kept, reduced minor]``, a column reduction
   ``[kept major, reduced, kept minor]`` (size-1 dimensions dropped, runs of
   kept or reduced dimensions merged);
2. splits the roots into *groups* that share no instruction except fusion
   parameters and constants; group ``k`` runs on ``blockIdx.y == k``;
3. per group, every thread reduces a subshape of the input in one
   ``heron_gpu.loop`` (accumulators as iter_args, side outputs inserted in
   the same loop), the variant combines the per-thread values (warp shuffles,
   shared memory), and the owner of each output element evaluates the
   epilogue and writes (``predicated_insert``).

Every variant gives each output element to exactly one block, so no atomics
are needed and the outputs need no initialisation: XLA makes the same choice
(its reduction emitters require race-free reductions and leave bigger ones
to the tree-reduction rewrite); here a very long row or column is instead
walked by more iterations per thread.

The reduce heroes, their collapsed dimensions and the variant (with its
parameters) come from the fusion's analysis
(``heron.emitters.fusion_analysis.FusionAnalysis.reduction``); the variant
built is the one the analysis chose, so no emitter here second-guesses it.

Warps are logical warps of ``LOGICAL_WARP_SIZE`` lanes (see there), whatever
the target's warp size.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence

import attrs
from mlir import ir
from mlir.dialects import arith, func, scf, tensor

from heron.emitters import mlir_types
from heron.emitters.dialect import (
    allocate_shared_op,
    apply_indexing_op,
    loop_op,
    predicated_extract_op,
    predicated_insert_op,
    pure_call_op,
    shuffle_reduce_op,
    sync_threads,
)
from heron.emitters.dialect.irdl_source import MAX_ITER_ARGS
from heron.emitters.emitter_base import EntryFunction, FusionEmitter, fusion_output_shapes
from heron.emitters.fusion_analysis import FusionAnalysis
from heron.emitters.reductions import ReductionDescription, ReductionDimensions
from heron.hlo.element_types import ElementType
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Computation, Instruction
from heron.hlo.shapes import ArrayShape
from heron.indexing import AffineExpr, Constant, Dim, IndexingMap, Interval, Symbol, Variable
from heron.indexing.affine import replace
from heron.indexing.thread_maps import LaunchDimensions
from heron.partitioner.subgraph import leaf_shapes
from heron.plugins.iteration import epilogue_map

__all__ = [
    "LOGICAL_WARP_SIZE",
    "Expr",
    "Group",
    "ReductionDimensions",
    "ReductionEmitterBase",
    "ThreadMap",
    "vector_size_for",
]

#: The warp the emitted reductions are written for: 32 lanes, shuffles of distance
#: at most 16, shared-memory tiles of 32 partials. A design constant of these
#: emitters, not the device's warp (``target.warp_size``, which hero selection
#: reads as XLA does): a 32-lane logical warp is correct on NVIDIA's 32-lane warps
#: and on AMD's 64-lane wavefronts alike (a wavefront holds two logical warps,
#: and the lowering shuffles with the hardware width), so one kernel shape
#: serves both vendors. Multi-row segments are the exception: their width is
#: the analysis's (up to the target's warp), see ``reduction_row``.
LOGICAL_WARP_SIZE = 32
#: XLA's preferred block size for row reductions (threads per block target).
THREADS_PER_BLOCK_TARGET = 256
#: Most threads the row emitter puts along one row (a design choice of this
#: emitter; hero selection's race-free bound uses XLA's MinThreadsXRowReduction,
#: 1024, and a longer row is walked with more iterations per thread).
MAX_ROW_THREADS = 512

Expr = AffineExpr


def carries_flag(hero: Instruction) -> bool:
    """Whether the reduction carries a flag beside its values (an init that is not a
    constant: the flag-aware reducer, and a tile for the flag in shared memory)."""
    arity = len(hero.operands) // 2
    return not all(_is_constant_like(init) for init in hero.operands[arity:])


def _is_constant_like(inst: Instruction) -> bool:
    if inst.opcode in ("constant", "iota"):
        return True
    return inst.opcode == "broadcast" and all(_is_constant_like(o) for o in inst.operands)


def vector_size_for(
    computation: Computation,
    heroes: Sequence[Instruction],
    minor: int,
    threads: int,
    *,
    variadic: bool = False,
) -> int:
    """Elements per thread read together along the minor dimension (XLA's rule for reductions).

    Nothing odd-sized, nothing that would leave threads idle, no complex heroes
    and no variadic ones unless ``variadic`` (the column emitter reads a variadic
    reduce's inputs two at a time, as XLA's: a column argmax of f32[4096, 32768]
    in 512 blocks, XLA:GPU 0.12's launch); 64-bit inputs read one at a time, 32-bit
    two, narrower four when the row is long enough.
    """
    if minor % 2 != 0 or threads * 2 > minor:
        return 1
    for hero in heroes:
        if hero.shape.is_tuple and not variadic:
            return 1
        for operand in hero.operands:
            if any(leaf.element_type.is_complex for leaf in leaf_shapes(operand.shape)):
                return 1
    bits = [
        max(leaf.element_type.bit_width, 8)
        for param in computation.parameters
        for leaf in leaf_shapes(param.shape)
    ]
    smallest = min(bits, default=32)
    if smallest >= 64:
        return 1
    if smallest >= 32 or threads * 4 > minor:
        return 2
    return 4 if minor % 4 == 0 else 2


def delinearise(linear: Expr, sizes: Sequence[int]) -> list[Expr]:
    """``linear`` split into coordinates of ``sizes`` (row major); size-1 entries are 0."""
    result: list[Expr] = []
    for i, size in enumerate(sizes):
        if size == 1:
            result.append(Constant(0))
            continue
        stride = math.prod(sizes[i + 1 :])
        value = linear if stride == 1 else linear // stride
        if any(s > 1 for s in sizes[:i]):
            value = value % size
        result.append(value)
    return result


def physical_index(linear: Expr, shape: ArrayShape) -> list[Expr]:
    """The logical index of the element at physical position ``linear`` of ``shape``."""
    order = shape.major_to_minor
    coords = delinearise(linear, [shape.dims[d] for d in order])
    logical: list[Expr] = [Constant(0)] * shape.rank
    for d, expr in zip(order, coords, strict=True):
        logical[d] = expr
    return logical


@attrs.frozen
class ThreadMap:
    """A map over ``(thread_x, block_x)`` and range symbols, built from expressions."""

    threads: int
    blocks: int
    symbols: tuple[int, ...]
    results: tuple[Expr, ...]
    constraints: tuple[tuple[Expr, Interval], ...] = ()

    def indexing_map(self) -> IndexingMap:
        return IndexingMap(
            (
                Variable("th_x", Interval(0, self.threads - 1)),
                Variable("bl_x", Interval(0, self.blocks - 1)),
            ),
            self.results,
            tuple(Variable(f"s{i}", Interval(0, n - 1)) for i, n in enumerate(self.symbols)),
            (),
            self.constraints,
        )


THREAD = Dim(0)
BLOCK = Dim(1)


def sym(i: int) -> Symbol:
    return Symbol(i)


@attrs.define
class Group:
    """Roots reduced together (one ``blockIdx.y``): their heroes and side outputs."""

    heroes: list[Instruction]
    roots: list[Instruction]


class ReductionEmitterBase(FusionEmitter):
    """The shared part of the four reduction emitters (see the module docstring).

    A variant sets ``threads``/``blocks`` in ``plan()`` and implements
    ``input_map`` (thread, block, symbols -> per vector element the collapsed
    [major, middle, minor] input coordinate) and ``combine`` (per-thread
    partial values -> the written outputs).
    """

    #: Not promised: an output element is the combination of many threads'
    #: partial values, and its owner is picked by predicates the checker cannot
    #: see, so a checker must not hold these kernels to one write per element.
    writes_each_element_once = False

    def __init__(self, analysis: FusionAnalysis) -> None:
        super().__init__(analysis)
        reduction = analysis.reduction
        if reduction is None:
            raise self.error(
                f"hero selection found no reduction hero it could emit as a reduction (the"
                f" fusion's kind is {analysis.kind!r}); the reduction emitters emit the"
                " reduction the analysis describes"
            )
        self.reduction: ReductionDescription = reduction
        self.outputs = fusion_output_shapes(self.fusion)
        self.root_list = list(analysis.roots)
        self.hero_of: dict[int, Instruction | None] = {
            id(root): hero if any(hero is h for h in reduction.heroes) else None
            for root, hero in zip(analysis.roots, analysis.heroes, strict=True)
        }
        self.all_heroes = list(reduction.heroes)
        self.dims: ReductionDimensions = reduction.dimensions
        self.input_elements = math.prod(self.dims.dimensions)
        self.groups = self._groups()
        self.threads = 1
        self.blocks = 1
        self.vector_size = 1
        #: Whether the vector element is the input map's innermost range symbol (one
        #: accumulator for all of them: rows) or unrolled (one accumulator each: columns).
        self.vector_in_loop = False
        #: Each epilogue root after reduces of its own shape: hero index -> its index
        #: (:func:`~heron.plugins.iteration.epilogue_map`), made when the roots are checked.
        self.epilogue_maps: dict[Instruction, IndexingMap] = {}
        self.plan()
        self._check_roots()

    # -- variant hooks ---------------------------------------------------------------
    @abc.abstractmethod
    def plan(self) -> None:
        """Choose ``threads``, ``blocks``, ``vector_size`` and the variant's tiling."""

    @abc.abstractmethod
    def input_map(self) -> ThreadMap:
        """Per-thread input walk: collapsed coordinates, 3 per unrolled vector element.

        With ``vector_in_loop`` the results are one coordinate whose minor entry
        is ``base + s_last`` (the vectorize pass turns the reads into one vector
        load); otherwise ``vector_size`` coordinates, one per element.
        """

    @abc.abstractmethod
    def combine(self, state: GroupState) -> list[ir.Value]:
        """Combine ``state.partials`` across threads and write the group's outputs."""

    # -- FusionEmitter ---------------------------------------------------------------
    def launch_dimensions(self) -> LaunchDimensions:
        return LaunchDimensions(
            block_x=self.blocks, thread_x=self.threads, block_y=len(self.groups)
        )

    def heroes(self) -> tuple[Instruction, ...]:
        return tuple(self.all_heroes)

    def emit_entry(self, entry: EntryFunction) -> list[ir.Value]:
        outputs = list(entry.outputs)
        if len(self.groups) == 1:
            return self._emit_group(entry, self.groups[0], outputs)
        return self._switch(entry, 0, outputs)

    def _switch(self, entry: EntryFunction, k: int, outputs: list[ir.Value]) -> list[ir.Value]:
        """``if blockIdx.y == k then group k else (the next groups)`` as nested ``scf.if``."""
        if k == len(self.groups) - 1:
            return self._emit_group(entry, self.groups[k], outputs)
        is_k = arith.cmpi(
            arith.CmpIPredicate.eq, entry.block_ids[1], arith.constant(ir.IndexType.get(), k)
        )
        branch = scf.IfOp(is_k, [v.type for v in outputs], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            scf.YieldOp(self._emit_group(entry, self.groups[k], list(outputs)))
        with ir.InsertionPoint(branch.else_block):
            scf.YieldOp(self._switch(entry, k + 1, list(outputs)))
        return list(branch.results)

    # -- roots, outputs and groups -------------------------------------------------------
    def writes(self, root: Instruction) -> list[tuple[int, int]]:
        """``(leaf of root, output position)`` for every output written from ``root``.

        A root may appear several times in the root tuple: each copy is an output.
        """
        analysis = self.analysis
        return [
            (leaf, position)
            for operand, positions in zip(analysis.roots, analysis.output_positions, strict=True)
            if operand is root
            for leaf, position in enumerate(positions)
        ]

    def _groups(self) -> list[Group]:
        """Roots joined when they share an instruction other than a constant (XLA's groups).

        A shared parameter joins them too, so that each input element is read
        by one group's loop only (the reads of one element then merge).
        """
        unique: list[Instruction] = []
        for root in self.root_list:
            if all(root is not u for u in unique):
                unique.append(root)
        reach = [self._reachable(r) for r in unique]
        parent = list(range(len(unique)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for i in range(len(unique)):
            for j in range(i):
                if reach[i] & reach[j]:
                    parent[find(i)] = find(j)
        members: dict[int, list[Instruction]] = {}
        for i, root in enumerate(unique):
            members.setdefault(find(i), []).append(root)
        groups: list[Group] = []
        loose: list[Instruction] = []
        for roots in members.values():
            heroes: list[Instruction] = []
            for root in roots:
                hero = self.hero_of[id(root)]
                if hero is not None and all(hero is not h for h in heroes):
                    heroes.append(hero)
            if heroes:
                groups.append(Group(heroes, roots))
            else:
                loose.extend(roots)
        groups[0].roots.extend(loose)  # side outputs alone go with the first reductions
        return groups

    @staticmethod
    def _reachable(root: Instruction) -> set[int]:
        seen: set[int] = set()
        stack = [root]
        while stack:
            inst = stack.pop()
            if id(inst) in seen or _is_constant_like(inst):
                continue
            seen.add(id(inst))
            stack.extend(inst.operands)
        return seen

    def _check_roots(self) -> None:
        """Refuse, when built, every fusion whose roots this emitter cannot write, so that
        emitting never refuses a fusion it built (its spec says ``refuses_when_built``: the
        fusion passes build the emitter instead of emitting each fusion they make).

        A root that is not a reduction is an epilogue (computed from the reduced values
        by the thread that owns them: of its reduce's output shape, or of any shape after
        a reduction to a scalar) or a side output (computed per input element: as many
        elements as the reduction's input); a group's accumulators and side outputs are
        one loop's iteration arguments.
        """
        partitioned = self.partitioned()
        lanes = 1 if self.vector_in_loop else self.vector_size
        for group in self.groups:
            carried = 0
            for root in group.roots:
                if any(root is h for h in self.all_heroes):
                    continue
                sub = partitioned.epilogue_of(root) if root.opcode != "parameter" else None
                if sub is None:
                    for leaf in leaf_shapes(root.shape):
                        if leaf.num_elements != self.input_elements:
                            raise self.error_for(
                                root,
                                f"a side output with {leaf.num_elements} elements next to a"
                                f" reduction of {self.input_elements} input elements",
                            )
                    carried += len(self.writes(root))
                    continue
                hero_shapes = {leaf_shapes(h.shape)[0].dims for h in sub.injected}
                if hero_shapes not in ({leaf_shapes(root.shape)[0].dims}, {()}):
                    raise self.error_for(
                        root,
                        "an epilogue root whose shape differs from its reduce's output"
                        " (only reductions to a scalar may be broadcast in an epilogue)",
                    )
                if hero_shapes != {()}:
                    self.epilogue_maps[root] = self._epilogue_map(sub.injected, root)
                # The epilogue's function is indexed as its subgraph's roots are: a root
                # of another rank beside them (x * exp(sum(x)) written with exp(sum(x))
                # itself, both outputs) has no index to read its other operands at.
                indexed_by = len(sub.signature.index_ranges)
                for other in sub.roots:
                    rank = len(leaf_shapes(other.shape)[0].dims)
                    if rank != indexed_by:
                        raise self.error_for(
                            other,
                            f"an epilogue root of rank {rank} beside roots of rank"
                            f" {indexed_by} in one epilogue ({sub.name})",
                        )
            for hero in group.heroes:
                arity = len(hero.operands) // 2
                flagged = carries_flag(hero)
                carried += lanes * (arity + flagged)
            if carried > MAX_ITER_ARGS:
                raise self.error_for(
                    group.heroes[0],
                    f"{carried} accumulators and side outputs exceed the loop's {MAX_ITER_ARGS}",
                )

    def _epilogue_map(self, heroes: Sequence[Instruction], root: Instruction) -> IndexingMap:
        """The map from the heroes' output index to ``root``'s index, the same for each hero
        its epilogue reads (a layout-changing bitcast, a transpose or a reverse of the
        reduce's shape moves each value elsewhere: the owner thread writes it there)."""
        maps = []
        for hero in heroes:
            try:
                maps.append(epilogue_map(hero, root))
            except UnsupportedError as exc:
                raise self.error_for(root, f"its epilogue: {exc.message}") from exc
        if any(m.results != maps[0].results for m in maps[1:]):
            raise self.error_for(
                root, "an epilogue reading its reduces at different indices (called at one)"
            )
        return maps[0]

    def error_for(self, inst: Instruction, why: str) -> UnsupportedError:
        return UnsupportedError(
            f"fusion '{self.fusion.name}': the {self.name} emitter cannot emit"
            f" {inst.opcode} '{inst.name}' ({inst.shape}): {why}",
            inst.location or self.fusion.location,
        )

    def shape_error(self, why: str) -> UnsupportedError:
        """The analysis describes a reduction this variant cannot emit (a forced emitter)."""
        hero = self.all_heroes[0]
        return self.error(f"it cannot emit reduce '{hero.name}' ({hero.shape}): {why}", hero)

    def tile_element_bytes(self) -> int:
        """The bytes one element of a shared tile takes summed over every hero value's tile
        (:meth:`GroupState.tiles`; a reduction that carries a flag has a tile for it too):
        all groups' tiles are the kernel's shared memory at once."""
        total = 0
        for hero in self.all_heroes:
            total += sum(leaf.element_type.byte_width for leaf in leaf_shapes(hero.shape))
            total += 1 if carries_flag(hero) else 0
        return total

    def kept_elements(self) -> int:
        major, _, minor = self.dims.dimensions
        return self.dims.dimensions[1] if self.dims.is_row_reduction else major * minor

    # -- the shared phases ---------------------------------------------------------------
    def _emit_group(
        self, entry: EntryFunction, group: Group, outputs: list[ir.Value]
    ) -> list[ir.Value]:
        state = GroupState(self, entry, group, outputs)
        state.per_thread()
        return self.combine(state)

    def reducer(self, entry: EntryFunction, hero: Instruction):
        """The ``func.func`` of the hero's reducer computation (for ``shuffle_reduce``)."""
        return entry.computation_function(hero.called("to_apply"))

    def flagged_reducer(self, entry: EntryFunction, hero: Instruction) -> func.FuncOp:
        """``(a..., fa, b..., fb) -> (r..., fa | fb)``: the reducer over values that may be unset.

        Used when the init value is not a constant: HLO applies the init once,
        so threads start without a value (flag false) instead of with the init.
        """
        cache = self.__dict__.setdefault("_flagged", {})
        if id(hero) in cache:
            return cache[id(hero)]
        reducer = self.reducer(entry, hero)
        types = list(reducer.type.results)
        i1 = ir.IntegerType.get_signless(1)
        signature = [*types, i1]
        module_body = entry.function.operation.parent.regions[0].blocks[0]
        with ir.InsertionPoint(module_body):
            name = entry.unique_name(f"{hero.name}_flagged_reducer".replace(".", "_"))
            function = func.FuncOp(name, ir.FunctionType.get(signature * 2, signature))
            function.sym_visibility = ir.StringAttr.get("private")
            block = function.add_entry_block()
        n = len(types)
        args = list(block.arguments)
        a, fa, b, fb = args[:n], args[n], args[n + 1 : 2 * n + 1], args[2 * n + 1]
        with ir.InsertionPoint(block):
            both = list(pure_call_op(reducer, [*a, *b], types).results)
            results = [
                arith.select(fb, arith.select(fa, c, y), x)
                for c, x, y in zip(both, a, b, strict=True)
            ]
            func.ReturnOp([*results, arith.ori(fa, fb)])
        cache[id(hero)] = function
        return function

    def collapsed_to_operand(self, operand: ArrayShape, coords: Sequence[Expr]) -> list[Expr]:
        """Collapsed [major, middle, minor] coordinates -> ``operand``'s logical index."""
        _, middle, minor = self.dims.dimensions
        linear = coords[0] * (middle * minor) + coords[1] * minor + coords[2]
        return physical_index(linear, operand)

    def kept_linear(self, coords: Sequence[Expr]) -> Expr:
        """The kept (output) position, linear in the operand's physical order."""
        if self.dims.is_row_reduction:
            return coords[1]
        return coords[0] * self.dims.dimensions[2] + coords[2]

    def hero_output_index(self, hero: Instruction, kept: Expr) -> list[Expr]:
        """The reduce's logical output index of kept position ``kept``."""
        operand = leaf_shapes(hero.operands[0].shape)[0]
        reduced = set(hero.attr("dimensions", ()))
        kept_dims = [d for d in operand.major_to_minor if d not in reduced]
        coords = dict(zip(kept_dims, delinearise(kept, [operand.dims[d] for d in kept_dims])))
        return [coords[d] for d in sorted(coords)]


class GroupState:
    """One group's emission: values and tensors threaded through the phases."""

    def __init__(
        self,
        emitter: ReductionEmitterBase,
        entry: EntryFunction,
        group: Group,
        outputs: list[ir.Value],
    ) -> None:
        self.emitter = emitter
        self.entry = entry
        self.group = group
        self.outputs = outputs
        self.heroes = group.heroes
        self.inits: dict[int, list[ir.Value]] = {}
        #: per hero: the values carried between threads (leaves, then a flag if any)
        self.start: dict[int, list[ir.Value]] = {}
        self.types: dict[int, list[ElementType]] = {}
        self.flagged: dict[int, bool] = {}
        self.combiner: dict[int, object] = {}
        #: per hero, per vector element, the partial values (``start``'s layout)
        self.partials: dict[int, list[list[ir.Value]]] = {}
        self.dims = [entry.thread_ids[0], entry.block_ids[0]]
        #: Accumulators per hero value: one per unrolled vector element.
        self.lanes = 1 if emitter.vector_in_loop else emitter.vector_size
        for hero in self.heroes:
            arity = len(hero.operands) // 2
            values: list[ir.Value] = []
            for init in hero.operands[arity:]:
                values.extend(entry.value_of(init, []))
            self.inits[id(hero)] = values
            leaves = [leaf.element_type for leaf in leaf_shapes(hero.shape)]
            flagged = carries_flag(hero)
            self.flagged[id(hero)] = flagged
            if flagged:
                false = arith.constant(ir.IntegerType.get_signless(1), 0)
                self.start[id(hero)] = [*values, false]
                self.types[id(hero)] = [*leaves, ElementType.PRED]
                self.combiner[id(hero)] = emitter.flagged_reducer(entry, hero)
            else:
                self.start[id(hero)] = list(values)
                self.types[id(hero)] = leaves
                self.combiner[id(hero)] = emitter.reducer(entry, hero)

    def combine_values(self, hero: Instruction, a: list, b: list) -> list[ir.Value]:
        """Two partial values of ``hero`` combined (through the flag-aware reducer if any)."""
        function = self.combiner[id(hero)]
        types = list(function.type.results)
        return list(pure_call_op(function, [*a, *b], types).results)

    def final_values(self, hero: Instruction, values: list[ir.Value]) -> list[ir.Value]:
        """The reduced leaves: with a non-constant init, ``init (+) partials`` once, as HLO says."""
        if not self.flagged[id(hero)]:
            return values
        *partial, flag = values
        inits = self.inits[id(hero)]
        applied = self.entry.call_computation(hero.called("to_apply"), [*inits, *partial])
        return [arith.select(flag, v, i) for v, i in zip(applied, inits, strict=True)]

    # -- helpers ----------------------------------------------------------------------
    def apply(self, results: Sequence[Expr], symbols: Sequence[int] = (), sym_values=()):
        """``apply_indexing`` of expressions over (thread, block)[symbols]."""
        tm = ThreadMap(self.emitter.threads, self.emitter.blocks, tuple(symbols), tuple(results))
        return list(apply_indexing_op(tm.indexing_map(), self.dims, list(sym_values)).results)

    def condition(self, constraints: Sequence[tuple[Expr, Interval]]) -> ir.Value:
        """An ``i1`` that holds when every ``expr in interval`` holds for this thread."""
        i1 = ir.IntegerType.get_signless(1)
        result = arith.constant(i1, 1)
        for expr, interval in constraints:
            (value,) = self.apply([expr])
            low = arith.cmpi(
                arith.CmpIPredicate.sge, value, arith.constant(ir.IndexType.get(), interval.lower)
            )
            high = arith.cmpi(
                arith.CmpIPredicate.sle, value, arith.constant(ir.IndexType.get(), interval.upper)
            )
            result = arith.andi(result, arith.andi(low, high))
        return result

    def side_outputs(self) -> list[Instruction]:
        e = self.emitter
        partitioned = self.entry.partitioned
        result = []
        for root in self.group.roots:
            if any(root is h for h in e.all_heroes):
                continue
            if root.opcode != "parameter" and partitioned.epilogue_of(root) is not None:
                continue
            result.append(root)
        return result

    # -- phase 1: every thread reduces its subshape -------------------------------------------
    def per_thread(self) -> None:
        e = self.emitter
        side = self.side_outputs()  # of the input's size (ReductionEmitterBase._check_roots)
        side_positions = [k for root in side for _, k in e.writes(root)]
        inits: list[ir.Value] = [self.outputs[k] for k in side_positions]
        slots: dict[tuple[int, int], int] = {}
        for hero in self.heroes:
            for vi in range(self.lanes):
                slots[(id(hero), vi)] = len(inits)
                inits.extend(self.start[id(hero)])
        assert len(inits) <= MAX_ITER_ARGS, "refused when built (_check_roots)"
        tm = e.input_map()
        index_maps: dict[tuple, IndexingMap] = {}

        def indices_in(shape: ArrayShape, coords: list[ir.Value]) -> list[ir.Value]:
            key = (*shape.dims, -1, *shape.minor_to_major)
            if key not in index_maps:
                collapsed = IndexingMap(
                    tuple(
                        Variable(f"d{i}", Interval(0, n - 1))
                        for i, n in enumerate(e.dims.dimensions)
                    ),
                    tuple(e.collapsed_to_operand(shape, [Dim(0), Dim(1), Dim(2)])),
                )
                index_maps[key] = collapsed
            if shape.rank == 0:
                return []
            return list(apply_indexing_op(index_maps[key], coords).results)

        def body(symbols, results, iter_args):
            del symbols
            values = list(iter_args)
            for vi in range(self.lanes):
                coords = list(results[3 * vi : 3 * vi + 3])
                for hero in self.heroes:
                    arity = len(hero.operands) // 2
                    # The operands of a variadic reduce are combined element by logical
                    # element, whatever their layouts (jax's argmax over a transposed
                    # array: the values in one layout, the iota in another): each is read
                    # at the logical index of the position in the first one's layout.
                    index = indices_in(leaf_shapes(hero.operands[0].shape)[0], coords)
                    elements: list[ir.Value] = []
                    for operand in hero.operands[:arity]:
                        elements.extend(self.entry.value_of(operand, index))
                    start = slots[(id(hero), vi)]
                    count = len(self.start[id(hero)])
                    accumulators = values[start : start + count]
                    values[start : start + count] = self._accumulate(hero, accumulators, elements)
                for root in side:
                    index = indices_in(leaf_shapes(root.shape)[0], coords)
                    leaves = self.entry.value_of(root, index)
                    for leaf, k in e.writes(root):
                        element = mlir_types.to_element(leaves[leaf], e.outputs[k].element_type)
                        slot = side_positions.index(k)
                        values[slot] = tensor.insert(element, values[slot], index)
            return values

        loop = loop_op(tm.indexing_map(), self.dims, inits, body)
        results = list(loop.results)
        for k, value in zip(side_positions, results[: len(side_positions)], strict=True):
            self.outputs[k] = value
        for hero in self.heroes:
            count = len(self.start[id(hero)])
            self.partials[id(hero)] = [
                results[slots[(id(hero), vi)] : slots[(id(hero), vi)] + count]
                for vi in range(self.lanes)
            ]

    def _accumulate(self, hero: Instruction, accumulators: list, elements: list) -> list:
        """``acc (+) x``; with a flag, the first element replaces the (unused) start value."""
        if not self.flagged[id(hero)]:
            return self.entry.call_computation(hero.called("to_apply"), [*accumulators, *elements])
        *partial, flag = accumulators
        reduced = self.entry.call_computation(hero.called("to_apply"), [*partial, *elements])
        chosen = [arith.select(flag, r, x) for r, x in zip(reduced, elements, strict=True)]
        return [*chosen, arith.constant(ir.IntegerType.get_signless(1), 1)]

    # -- phase 2 helpers: shuffles and shared memory -------------------------------------------
    def shuffle(self, values: dict[int, list[ir.Value]], max_distance: int) -> dict:
        """``shuffle_reduce`` of every hero's values (no-op for a distance below 1)."""
        if max_distance < 1:
            return values
        out = {}
        for hero in self.heroes:
            reducer = self.combiner[id(hero)]
            out[id(hero)] = list(shuffle_reduce_op(values[id(hero)], max_distance, reducer).results)
        return out

    def tiles(self, shape: Sequence[int]) -> dict[int, list[ir.Value]]:
        """One shared-memory tile per hero value, of ``shape``."""
        tiles = {}
        for hero in self.heroes:
            tiles[id(hero)] = []
            for element_type in self.types[id(hero)]:
                tile_shape = ArrayShape(element_type, tuple(shape))
                tile_type = mlir_types.tensor_type(tile_shape)
                tiles[id(hero)].append(allocate_shared_op(tile_type).results[0])
        return tiles

    def write_tiles(self, tiles, values, index, condition=None) -> None:
        """Each hero value into its tile at ``index`` (only where ``condition``, if given)."""
        for hero in self.heroes:
            for n, (element_type, value) in enumerate(
                zip(self.types[id(hero)], values[id(hero)], strict=True)
            ):
                element = mlir_types.to_element(value, element_type)
                tile = tiles[id(hero)][n]
                if condition is None:
                    tiles[id(hero)][n] = tensor.insert(element, tile, index)
                else:
                    tiles[id(hero)][n] = predicated_insert_op(
                        condition, element, tile, index
                    ).results[0]

    def sync(self, tiles) -> dict:
        flat = [t for hero in self.heroes for t in tiles[id(hero)]]
        synced = sync_threads(flat)
        out = {}
        position = 0
        for hero in self.heroes:
            count = len(tiles[id(hero)])
            out[id(hero)] = synced[position : position + count]
            position += count
        return out

    def read_tiles(self, tiles, index, condition=None) -> dict:
        """Every hero's values from its tiles (the init value where ``condition`` fails)."""
        out = {}
        for hero in self.heroes:
            values = []
            for element_type, tile, init in zip(
                self.types[id(hero)], tiles[id(hero)], self.start[id(hero)], strict=True
            ):
                if condition is None:
                    element = tensor.extract(tile, index)
                else:
                    fallback = mlir_types.to_element(init, element_type)
                    element = predicated_extract_op(condition, fallback, tile, index).results[0]
                values.append(mlir_types.to_scalar(element, element_type))
            out[id(hero)] = values
        return out

    # -- phase 3: epilogue and writes ------------------------------------------------------
    def write_results(
        self,
        reduced: dict[int, list[ir.Value]],
        kept: Expr,
        owner: Sequence[tuple[Expr, Interval]],
    ) -> None:
        """The owner thread of kept position ``kept`` writes every reduction and epilogue root."""
        e = self.emitter
        reduced = {id(h): self.final_values(h, reduced[id(h)]) for h in self.heroes}
        has_output = self.condition([*owner, (kept, Interval(0, e.kept_elements() - 1))])
        partitioned = self.entry.partitioned
        out_index_cache: dict[int, list[ir.Value]] = {}

        def out_index(hero: Instruction) -> list[ir.Value]:
            if id(hero) not in out_index_cache:
                exprs = e.hero_output_index(hero, kept)
                out_index_cache[id(hero)] = self.apply(exprs) if exprs else []
            return out_index_cache[id(hero)]

        for root in self.group.roots:
            if any(root is h for h in e.all_heroes):
                index = out_index(root)
                for leaf, k in e.writes(root):
                    self._insert(k, has_output, reduced[id(root)][leaf], index)
                continue
            sub = partitioned.epilogue_of(root) if root.opcode != "parameter" else None
            if sub is None:
                continue  # a side output, written in the per-thread loop
            injected = [v for h in sub.injected for v in reduced[id(h)]]
            hero_shapes = {leaf_shapes(h.shape)[0].dims for h in sub.injected}
            root_dims = leaf_shapes(root.shape)[0].dims
            if hero_shapes == {root_dims}:
                moved = e.epilogue_maps.get(root)  # None: a scalar, at no index
                if moved is None:
                    index = out_index(sub.injected[0])
                else:
                    hero_index = e.hero_output_index(sub.injected[0], kept)
                    index = self.apply([replace(r, dims=hero_index) for r in moved.results])
                values = self._epilogue_values(sub, root, index, injected)
                for leaf, k in e.writes(root):
                    self._insert(k, has_output, values[leaf], index)
            elif hero_shapes == {()}:
                self._scalar_epilogue(sub, root, injected, has_output)
            else:  # refused when built (_check_roots): a guard against a silent miscompile
                raise e.error_for(
                    root, "an epilogue root whose shape differs (not refused when built)"
                )

    def _epilogue_values(self, sub, root, index, injected) -> list[ir.Value]:
        results = self.entry.call_subgraph(sub, index, injected)
        offset = 0
        for r in sub.roots:
            count = len(leaf_shapes(r.shape))
            if r is root:
                return results[offset : offset + count]
            offset += count
        raise self.emitter.error_for(root, f"it is not a root of {sub.name}")

    def _scalar_epilogue(self, sub, root, injected, has_output) -> None:
        """A root after a reduction to a scalar: the owner thread writes all its elements."""
        e = self.emitter
        shape = leaf_shapes(root.shape)[0]
        writes = e.writes(root)
        positions = [k for _, k in writes]
        loop_map = IndexingMap(
            (Variable("th_x", Interval(0, e.threads - 1)),),
            tuple(Symbol(i) for i in range(shape.rank)),
            tuple(Variable(f"s{i}", Interval(0, n - 1)) for i, n in enumerate(shape.dims)),
        )

        def body(symbols, results, iter_args):
            del symbols
            values = self._epilogue_values(sub, root, list(results), injected)
            tensors = list(iter_args)
            for n, (leaf, k) in enumerate(writes):
                element = mlir_types.to_element(values[leaf], e.outputs[k].element_type)
                tensors[n] = predicated_insert_op(
                    has_output, element, tensors[n], list(results)
                ).results[0]
            return tensors

        loop = loop_op(loop_map, [self.dims[0]], [self.outputs[k] for k in positions], body)
        for k, value in zip(positions, loop.results, strict=True):
            self.outputs[k] = value

    def _insert(self, k: int, condition: ir.Value, value: ir.Value, index) -> None:
        leaf = self.emitter.outputs[k]
        element = mlir_types.to_element(value, leaf.element_type)
        self.outputs[k] = predicated_insert_op(condition, element, self.outputs[k], index).results[
            0
        ]
