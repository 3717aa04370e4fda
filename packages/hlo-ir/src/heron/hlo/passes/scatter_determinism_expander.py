"""An order-dependent scatter as a sorted scatter that no two updates meet in.

XLA:GPU's ScatterDeterminismExpander (``--xla_gpu_deterministic_ops``), for
heron's ``--deterministic``: a scatter whose combined updates depend on the
order the GPU's atomics apply them (:func:`heron.hlo.determinism.order_dependence`:
a float add, an overwrite) becomes

1. its index vectors, flattened to ``[N, K]`` (``N`` updates of ``K`` indices),
   converted to s32 (s64 for dimensions past 2**31) and sorted together with
   their positions (ties broken by position: a total order, so the permutation
   is the same on every device);
2. the updates, flattened to ``[N, window...]``, gathered in that order;
3. an inclusive scan of the combiner over each run of equal index vectors, in
   ``ceil(log2 N)`` steps (Hillis-Steele: step ``d`` combines each update with
   the one ``2**d`` before it when their index vectors are equal), applying the
   combiner as ``f(earlier, later)``, so an overwrite keeps the last update as
   XLA:CPU's in-order scatter does;
4. a scatter of only each run's last element (the others get index -1, which
   puts their window out of bounds: scatter skips it), with
   ``unique_indices=true``: every element is written by at most one thread and
   the scatter emitter needs no atomics.

The result equals the original for an associative combiner; a float sum is
re-associated (by the scan's tree instead of the arrival order), but the same
tree every run. It applies when distinct index vectors cannot overlap: every
operand dimension the indices address has a window of one element (jax's
``.at[].add`` of rows, segment sums, embedding gradients). Other
order-dependent scatters (overlapping windows, batching dimensions, several
operands) are left alone; the scatter emitter applies those serially when
deterministic kernels are asked for
(:data:`heron.hlo.determinism.SERIAL_UPDATES`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from heron.hlo.attributes import (
    ComputationRef,
    KeyValueList,
    PadDim,
    PaddingConfig,
    QuotedString,
    SliceRange,
)
from heron.hlo.builder import NameUniquer
from heron.hlo.determinism import (
    SERIAL_UPDATES,
    combiner_opcode,
    frontend_attributes,
    mark_regrouped,
    order_dependence,
    serial_updates_requested,
)
from heron.hlo.element_types import ElementType
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import (
    Inserter,
    module_names,
    non_fusion_computations,
    remove_instructions,
)
from heron.hlo.shapes import ArrayShape, TupleShape

__all__ = ["expand_order_dependent_scatters"]


@hlo_pass(
    "scatter-determinism-expander",
    "order-dependent scatters sorted, scanned and scattered once per element (--deterministic)",
)
def expand_order_dependent_scatters(module: Module) -> bool:
    names = module_names(module)
    changed = False
    rewritable = {id(c) for c in non_fusion_computations(module)}
    for computation in list(module.computations):
        expanded = []
        for scatter in [i for i in computation.instructions if i.opcode == "scatter"]:
            if order_dependence(scatter) is None:
                continue
            # A fusion's body is the emitter's input (an already fused module): its
            # scatter can only be applied serially.
            if (
                id(computation) not in rewritable
                or not _expandable(scatter)
                or not _scannable(scatter.called("to_apply"))
            ):
                changed |= _ask_for_serial_updates(scatter)
                continue
            inserter = Inserter(computation, names)
            replacement = _Expansion(module, computation, inserter, names, scatter).build()
            inserter.replace(scatter, replacement)
            expanded.append(scatter)
        remove_instructions(computation, expanded)
        changed |= bool(expanded)
    return changed


def _ask_for_serial_updates(scatter: Instruction) -> bool:
    if serial_updates_requested(scatter):
        return False
    entries = frontend_attributes(scatter)
    entries[SERIAL_UPDATES] = QuotedString("true")
    scatter.attributes["frontend_attributes"] = KeyValueList(tuple(entries.items()))
    return True


#: Combiners whose updates a scan may combine before the operand meets them: f is
#: associative (a float sum or product up to reassociation), so f(f(x, a), b) equals
#: f(x, f(a, b)).
_ASSOCIATIVE = frozenset({"add", "multiply", "maximum", "minimum", "and", "or", "xor"})


def _scannable(combiner: Computation) -> bool:
    """Whether the scan of step 3 computes what the scatter does: the combiner is an
    overwrite (the later update wins) or an associative op of its two parameters. Any
    other (jax's ``.at[].apply(g)`` is ``g(x)``, which ignores the update and must run
    once per update) is applied serially instead."""
    parameters = combiner.parameters
    if len(parameters) == 2 and combiner.root_instruction is parameters[1]:
        return True
    return combiner_opcode(combiner) in _ASSOCIATIVE


def _expandable(scatter: Instruction) -> bool:
    """One operand, no batching dimensions, and a one-element window wherever indices point."""
    if len(scatter.operands) != 3:
        return False
    if scatter.attr("input_batching_dims", ()) or scatter.attr("scatter_indices_batching_dims", ()):
        return False
    operand, _, updates = scatter.operands
    window_dims = tuple(scatter.attr("update_window_dims", ()))
    inserted = tuple(scatter.attr("inserted_window_dims", ()))
    window_of = {}  # operand dimension -> its window extent
    window = iter(updates.array_shape.dims[d] for d in window_dims)
    for d in range(operand.array_shape.rank):
        window_of[d] = 1 if d in inserted else next(window)
    return all(window_of[d] == 1 for d in scatter.attr("scatter_dims_to_operand_dims", ()))


class _Expansion:
    """The instructions that replace one scatter (see the module docstring)."""

    def __init__(
        self,
        module: Module,
        computation: Computation,
        inserter: Inserter,
        names: NameUniquer,
        scatter: Instruction,
    ) -> None:
        self.module, self.computation = module, computation
        self.inserter, self.names, self.scatter = inserter, names, scatter
        self.operand, self.indices, self.updates = scatter.operands
        self.index_vector_dim = int(scatter.attr("index_vector_dim"))
        self.window_dims = tuple(scatter.attr("update_window_dims", ()))
        self.index_map = tuple(scatter.attr("scatter_dims_to_operand_dims", ()))
        largest = max((self.operand.array_shape.dims[d] for d in self.index_map), default=0)
        self.index_type = ElementType.S32 if largest < 2**31 else ElementType.S64
        # A float sum or product of the updates that meet, combined by the scan's tree
        # instead of in order (an overwrite keeps the last update, exactly).
        combiner = scatter.called("to_apply")
        element = combiner.root_instruction.shape.element_type
        self._reassociates = combiner_opcode(combiner) in ("add", "multiply") and (
            element.is_floating or element.is_complex
        )

    def add(
        self,
        opcode: str,
        shape,
        operands: Sequence[Instruction] = (),
        attributes=None,
        *,
        suffix: str,
        literal=None,
    ) -> Instruction:
        return self.inserter.add(
            opcode, shape, operands, attributes, like=self.scatter, suffix=suffix, literal=literal
        )

    def build(self) -> Instruction:
        keys = self._index_vectors()
        count = keys[0].array_shape.dims[0]
        positions = self.add(
            "iota",
            ArrayShape(ElementType.S32, (count,)),
            (),
            {"iota_dimension": 0},
            suffix="position",
        )
        *sorted_keys, order = self._sort([*keys, positions])
        updates = self._gathered(self._flat_updates(count), order)
        step = 1
        while step < count:
            updates = self._combine_runs(updates, self._equal_shifted(sorted_keys, step), step)
            step *= 2
        last = self._last_of_runs(sorted_keys, count)
        return self._scatter_once(sorted_keys, last, updates)

    # -- step 1: index vectors, sorted --------------------------------------------------

    def _index_vectors(self) -> list[Instruction]:
        """``K`` arrays ``[N]`` of the index type: the index vectors' components by update."""
        indices = self.indices
        shape = indices.array_shape
        vector_dim = self.index_vector_dim
        if vector_dim == shape.rank:  # scalar indices: vectors of one
            count, length = shape.num_elements, 1
        else:
            order = [d for d in range(shape.rank) if d != vector_dim] + [vector_dim]
            count, length = shape.num_elements // shape.dims[vector_dim], shape.dims[vector_dim]
            if order != list(range(shape.rank)):
                indices = self.add(
                    "transpose",
                    ArrayShape(shape.element_type, tuple(shape.dims[d] for d in order)),
                    [indices],
                    {"dimensions": tuple(order)},
                    suffix="index_vectors_last",
                )
        flat = self.add(
            "reshape",
            ArrayShape(shape.element_type, (count, length)),
            [indices],
            suffix="index_vectors",
        )
        if shape.element_type is not self.index_type:
            flat = self.add(
                "convert", ArrayShape(self.index_type, (count, length)), [flat], suffix="index_type"
            )
        components = []
        for k in range(length):
            column = self.add(
                "slice",
                ArrayShape(self.index_type, (count, 1)),
                [flat],
                {"slice": (SliceRange(0, count), SliceRange(k, k + 1))},
                suffix=f"index{k}",
            )
            components.append(
                self.add(
                    "reshape", ArrayShape(self.index_type, (count,)), [column], suffix=f"key{k}"
                )
            )
        return components

    def _sort(self, operands: list[Instruction]) -> list[Instruction]:
        """``operands`` (keys..., positions) sorted lexicographically: a total order."""
        comparator = self._lexicographic_comparator([o.array_shape.element_type for o in operands])
        shapes = tuple(o.shape for o in operands)
        sort = self.add(
            "sort",
            TupleShape(shapes),
            operands,
            {
                "dimensions": (0,),
                "is_stable": False,
                "to_apply": ComputationRef(comparator.name, comparator),
            },
            suffix="sorted",
        )
        results = []
        for n, shape in enumerate(shapes):
            results.append(
                self.add("get-tuple-element", shape, [sort], {"index": n}, suffix=f"sorted{n}")
            )
        return results

    def _lexicographic_comparator(self, types: list[ElementType]) -> Computation:
        """``(a0, b0, a1, b1, ...) -> a < b`` comparing component 0 first."""
        computation = Computation(self.names.unique(f"{self.scatter.name}.lexicographic"))
        scalar_pred = ArrayShape(ElementType.PRED, ())
        parameters = []
        for n, element in enumerate(types):
            for side in ("lhs", "rhs"):
                number = len(parameters)
                parameters.append(
                    computation.add(
                        Instruction(
                            self.names.unique(f"{side}{n}"),
                            "parameter",
                            ArrayShape(element, ()),
                            parameter_number=number,
                        )
                    )
                )

        def compare(a: Instruction, b: Instruction, direction: str) -> Instruction:
            return computation.add(
                Instruction(
                    self.names.unique(f"compare_{direction.lower()}"),
                    "compare",
                    scalar_pred,
                    [a, b],
                    {"direction": direction},
                )
            )

        def binary(opcode: str, a: Instruction, b: Instruction) -> Instruction:
            return computation.add(
                Instruction(self.names.unique(opcode), opcode, scalar_pred, [a, b])
            )

        # Last component first: less = lt_k or (eq_k and less_of_the_rest).
        less = None
        for n in reversed(range(len(types))):
            a, b = parameters[2 * n], parameters[2 * n + 1]
            here = compare(a, b, "LT")
            less = (
                here
                if less is None
                else binary("or", here, binary("and", compare(a, b, "EQ"), less))
            )
        computation.root = less
        self.module.computations.insert(
            self.module.computations.index(self.computation), computation
        )
        return computation

    # -- step 2: updates in that order ------------------------------------------------

    def _flat_updates(self, count: int) -> Instruction:
        """The updates as ``[N, window...]``: scatter dimensions first, flattened."""
        shape = self.updates.array_shape
        scatter_dims = [d for d in range(shape.rank) if d not in self.window_dims]
        order = scatter_dims + list(self.window_dims)
        updates = self.updates
        if order != list(range(shape.rank)):
            updates = self.add(
                "transpose",
                ArrayShape(shape.element_type, tuple(shape.dims[d] for d in order)),
                [updates],
                {"dimensions": tuple(order)},
                suffix="updates_scatter_dims_first",
            )
        window = tuple(shape.dims[d] for d in self.window_dims)
        return self.add(
            "reshape",
            ArrayShape(shape.element_type, (count, *window)),
            [updates],
            suffix="flat_updates",
        )

    def _gathered(self, updates: Instruction, order: Instruction) -> Instruction:
        shape = updates.array_shape
        count, window = shape.dims[0], shape.dims[1:]
        starts = self.add(
            "reshape", ArrayShape(ElementType.S32, (count, 1)), [order], suffix="order"
        )
        return self.add(
            "gather",
            shape,
            [updates, starts],
            {
                "offset_dims": tuple(range(1, 1 + len(window))),
                "collapsed_slice_dims": (0,),
                "start_index_map": (0,),
                "index_vector_dim": 1,
                "slice_sizes": (1, *window),
                "indices_are_sorted": False,
            },
            suffix="sorted_updates",
        )

    # -- step 3: the segmented scan ---------------------------------------------------

    def _shifted(self, value: Instruction, step: int, *, suffix: str) -> Instruction:
        """``value`` moved ``step`` elements later along dimension 0 (zeros before)."""
        shape = value.array_shape
        count = shape.dims[0]
        kept = self.add(
            "slice",
            ArrayShape(shape.element_type, (count - step, *shape.dims[1:])),
            [value],
            {"slice": (SliceRange(0, count - step), *(SliceRange(0, d) for d in shape.dims[1:]))},
            suffix=f"{suffix}_kept",
        )
        zero = self.add(
            "constant",
            ArrayShape(shape.element_type, ()),
            suffix=f"{suffix}_zero",
            literal=_zero(shape.element_type),
        )
        padding = PaddingConfig((PadDim(step, 0), *(PadDim(0, 0) for _ in shape.dims[1:])))
        return self.add(
            "pad", shape, [kept, zero], {"padding": padding}, suffix=f"{suffix}_shifted"
        )

    def _equal_shifted(self, keys: list[Instruction], step: int) -> Instruction:
        """pred[N]: element i has the index vector of element i - step (false for i < step)."""
        count = keys[0].array_shape.dims[0]
        pred = ArrayShape(ElementType.PRED, (count,))
        position = self.add(
            "iota",
            ArrayShape(ElementType.S32, (count,)),
            (),
            {"iota_dimension": 0},
            suffix="scan_position",
        )
        first = self.add(
            "constant",
            ArrayShape(ElementType.S32, ()),
            suffix="scan_step",
            literal=_scalar(ElementType.S32, step),
        )
        bound = self.add(
            "broadcast",
            ArrayShape(ElementType.S32, (count,)),
            [first],
            {"dimensions": ()},
            suffix="scan_bound",
        )
        same = self.add(
            "compare", pred, [position, bound], {"direction": "GE"}, suffix="has_earlier"
        )
        for k, key in enumerate(keys):
            earlier = self._shifted(key, step, suffix=f"key{k}")
            equal = self.add(
                "compare", pred, [key, earlier], {"direction": "EQ"}, suffix=f"same_key{k}"
            )
            same = self.add("and", pred, [same, equal], suffix="same_run")
        return same

    def _combine_runs(self, updates: Instruction, same: Instruction, step: int) -> Instruction:
        shape = updates.array_shape
        earlier = self._shifted(updates, step, suffix="updates")
        combined = self.add(
            "map",
            shape,
            [earlier, updates],
            {
                "dimensions": tuple(range(shape.rank)),
                "to_apply": self.scatter.attributes["to_apply"],
            },
            suffix="combined",
        )
        if self._reassociates:
            mark_regrouped(combined)  # a check compares the sums within reassociation bounds
        mask = self.add(
            "broadcast",
            ArrayShape(ElementType.PRED, shape.dims),
            [same],
            {"dimensions": (0,)},
            suffix="run_mask",
        )
        return self.add("select", shape, [mask, combined, updates], suffix="scanned")

    # -- step 4: one update per element --------------------------------------------------

    def _last_of_runs(self, keys: list[Instruction], count: int) -> Instruction:
        """pred[N]: element i ends its run (the next one has another index vector, or none)."""
        pred = ArrayShape(ElementType.PRED, (count,))
        position = self.add(
            "iota",
            ArrayShape(ElementType.S32, (count,)),
            (),
            {"iota_dimension": 0},
            suffix="last_position",
        )
        final = self.add(
            "constant",
            ArrayShape(ElementType.S32, ()),
            suffix="last_index",
            literal=_scalar(ElementType.S32, count - 1),
        )
        bound = self.add(
            "broadcast",
            ArrayShape(ElementType.S32, (count,)),
            [final],
            {"dimensions": ()},
            suffix="last_bound",
        )
        last = self.add("compare", pred, [position, bound], {"direction": "EQ"}, suffix="is_final")
        if count < 2:
            return last
        for k, key in enumerate(keys):
            following = self.add(
                "slice",
                ArrayShape(self.index_type, (count - 1,)),
                [key],
                {"slice": (SliceRange(1, count),)},
                suffix=f"next_key{k}_kept",
            )
            zero = self.add(
                "constant",
                ArrayShape(self.index_type, ()),
                suffix=f"next_key{k}_zero",
                literal=_zero(self.index_type),
            )
            following = self.add(
                "pad",
                key.shape,
                [following, zero],
                {"padding": PaddingConfig((PadDim(0, 1),))},
                suffix=f"next_key{k}",
            )
            differs = self.add(
                "compare", pred, [key, following], {"direction": "NE"}, suffix=f"next_differs{k}"
            )
            last = self.add("or", pred, [last, differs], suffix="ends_run")
        return last

    def _scatter_once(
        self, keys: list[Instruction], last: Instruction, updates: Instruction
    ) -> Instruction:
        count = keys[0].array_shape.dims[0]
        minus_one = self.add(
            "constant",
            ArrayShape(self.index_type, ()),
            suffix="skipped",
            literal=_scalar(self.index_type, -1),
        )
        skipped = self.add(
            "broadcast", keys[0].shape, [minus_one], {"dimensions": ()}, suffix="skipped_index"
        )
        columns = []
        for k, key in enumerate(keys):
            kept = self.add("select", key.shape, [last, key, skipped], suffix=f"kept_index{k}")
            columns.append(
                self.add(
                    "reshape",
                    ArrayShape(self.index_type, (count, 1)),
                    [kept],
                    suffix=f"kept_column{k}",
                )
            )
        indices = columns[0]
        if len(columns) > 1:
            indices = self.add(
                "concatenate",
                ArrayShape(self.index_type, (count, len(columns))),
                columns,
                {"dimensions": (1,)},
                suffix="kept_indices",
            )
        attributes = dict(self.scatter.attributes)
        attributes.update(
            {
                "update_window_dims": tuple(range(1, updates.array_shape.rank)),
                "index_vector_dim": 1,
                "indices_are_sorted": True,
                "unique_indices": True,
            }
        )
        return self.add(
            "scatter",
            self.scatter.shape,
            [self.operand, indices, updates],
            attributes,
            suffix="sorted",
        )


def _scalar(element: ElementType, value: int) -> np.ndarray:
    return np.asarray(value, dtype=element.numpy_dtype)


def _zero(element: ElementType) -> np.ndarray:
    return np.zeros((), dtype=element.numpy_dtype)
