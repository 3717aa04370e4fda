"""The emitter base: what every hero emitter shares, from a fusion to an ``emitted`` module.

A hero emitter (loop, transpose, reduction, ...) only decides how the entry
function iterates and where results go. Everything else is the same for all
of them and lives here (docs/pipeline.md, stage ``emitted``):

- a fresh MLIR context and module per fusion;
- the fused computation partitioned (``heron.partitioner.partition``) with the
  emitter's heroes, and every subgraph emitted as a private ``func.func``
  with the partitioner's signature (one tensor per fusion parameter, one
  index per output dimension, injected hero values; one scalar per root
  leaf), its body elemental code (``heron.emitters.elemental``) whose operands
  come from ``tensor.extract`` of a parameter, the same function, or a
  ``heron_gpu.pure_call`` of the subgraph that computes them;
- every scalar computation the fusion calls (reducers, map bodies) as a
  private ``func.func`` of scalars;
- the entry function: fusion parameters then output tensors, returning the
  outputs, with ``heron.kernel``, ``heron.block_size`` and ``heron.grid_size``,
  each in-place output argument marked with the parameter whose buffer it is
  (``heron.in_place_of``, ``heron.emitters.kernel_arguments``), and the thread
  and block ids the hero's loop is indexed by; the arguments a buffer
  assignment makes overlap another are marked afterwards, by whoever emits for
  it (``heron.shares_buffer``, :func:`share_buffers`);
- verification (MLIR's verifier and ``verify_xla_ops``), so a broken emitter
  is caught where it is, not three passes later.

Errors: an op with no lowering, or any failure while emitting an op, is an
``UnsupportedError`` naming the fusion and the op (and the op's source line).
"""

from __future__ import annotations

import abc
from collections.abc import Collection, Iterable, Sequence
from typing import ClassVar

import attrs
from mlir import ir
from mlir.dialects import func, gpu, tensor

from heron.emitters import mlir_types
from heron.emitters.dialect import (
    make_context,
    predicated_extract_op,
    pure_call_op,
    verify_xla_ops,
)
from heron.emitters.dialect.irdl_source import MAX_CALL_RESULTS
from heron.emitters.elemental import ElementalContext, emit_instruction
from heron.emitters.elemental.data_ops import scalar_constant
from heron.emitters.fusion_analysis import FusionAnalysis
from heron.emitters.kernel_arguments import (
    KERNEL_ATTR,
    SHAPE_GENERIC_ATTR,
    mark_in_place,
    mark_shared,
)
from heron.hlo.errors import HloError, UnsupportedError
from heron.hlo.ir import Computation, Instruction
from heron.hlo.shapes import ArrayShape, Shape
from heron.indexing.thread_maps import LaunchDimensions
from heron.partitioner import PartitionedComputation, Subgraph, function_name, partition
from heron.partitioner.subgraph import leaf_shapes

__all__ = [
    "DominanceMemo",
    "EmittedKernel",
    "EntryFunction",
    "FusionEmitter",
    "KernelArgument",
    "fusion_output_shapes",
    "kernel_arguments_of",
    "same_buffer",
    "share_buffers",
]

Values = list[ir.Value]


@attrs.frozen
class KernelArgument:
    """One buffer of the kernel's ABI: a fusion parameter (leaf) or an output."""

    name: str
    shape: ArrayShape
    is_output: bool


@attrs.frozen
class EmittedKernel:
    """An emitted fusion: the ``emitted``-stage module and what a launcher needs to know.

    ``name`` is the entry function's symbol; ``arguments`` are the entry's
    tensors in order (parameters, then outputs). ``module`` lives in its own
    context (``module.context``) and is changed in place by the passes.
    ``output_aliases`` maps an output (its index among the outputs) to the
    parameter leaf whose buffer it is: an in-place kernel (dynamic-update-slice,
    scatter) writes only what changes, so whoever launches it must hand it a
    buffer that already holds that parameter, as XLA's buffer sharing does.
    ``emitter`` is the name of the emitter that emitted it, and
    ``writes_each_element_once`` that emitter's promise (``FusionEmitter``'s
    class variable), which a checker may hold the kernel to.
    ``order_dependence`` says why the kernel's result may differ from run to
    run (threads combining floats with atomics in the order they arrive), or
    is None (:meth:`FusionEmitter.order_dependence`). ``analysis`` and
    ``partitioned`` are the fusion analysis the emitter was built from and the
    partition into subgraph functions it emitted: handed on, so that a report
    shows the decisions the kernel came from instead of making them again.
    """

    name: str
    fusion_name: str
    emitter: str
    launch: LaunchDimensions
    arguments: tuple[KernelArgument, ...]
    module: ir.Module = attrs.field(eq=False, repr=False)
    output_aliases: dict[int, int] = attrs.field(factory=dict, hash=False)
    writes_each_element_once: bool = True
    order_dependence: str | None = None
    analysis: FusionAnalysis | None = attrs.field(default=None, eq=False, repr=False)
    partitioned: PartitionedComputation | None = attrs.field(default=None, eq=False, repr=False)
    #: Argument indices whose buffer overlaps another argument's outside the in-place
    #: pairs (:func:`share_buffers`): neither ``noalias`` nor ``readonly``.
    shared_arguments: frozenset[int] = frozenset()


def share_buffers(kernel: EmittedKernel, shared: Collection[int]) -> EmittedKernel:
    """``kernel`` for a launch whose arguments ``shared`` overlap another argument's buffer.

    The buffer assignment, not the emitter, knows which slices a launch hands
    the kernel; an argument overlapping another (a while body's state element
    written over the old one, a donated parameter's update) must lose its
    ``noalias`` and ``readonly`` (``heron.emitters.kernel_arguments``). The
    entry's arguments are marked ``heron.shares_buffer`` (in place, in
    ``kernel.module``) and the kernel returned records them. An empty
    ``shared`` changes nothing. An index outside the kernel's arguments is an
    ``UnsupportedError``.
    """
    wanted = frozenset(shared)
    bad = sorted(k for k in wanted if not (isinstance(k, int) and 0 <= k < len(kernel.arguments)))
    if bad:
        raise UnsupportedError(
            f"fusion '{kernel.fusion_name}': arguments {bad} cannot share a buffer: the kernel"
            f" has {len(kernel.arguments)} arguments"
        )
    if not wanted:
        return kernel
    entries = [
        op
        for op in kernel.module.body.operations
        if op.operation.name == "func.func" and KERNEL_ATTR in op.operation.attributes
    ]
    if len(entries) != 1:
        raise UnsupportedError(
            f"fusion '{kernel.fusion_name}': expected one entry function marked {KERNEL_ATTR}"
            f" to mark shared arguments on, found {len(entries)}"
        )
    with kernel.module.context:
        mark_shared(entries[0].operation, wanted)
    return attrs.evolve(kernel, shared_arguments=kernel.shared_arguments | wanted)


def fusion_output_shapes(fusion: Instruction) -> tuple[ArrayShape, ...]:
    """The fusion's outputs: the array leaves of its shape, in order."""
    return tuple(leaf_shapes(fusion.shape))


def kernel_arguments_of(fusion: Instruction) -> tuple[KernelArgument, ...]:
    """The arguments of ``fusion``'s kernel in heron's kernel ABI order: every leaf of its
    body's parameters, then every output (a library kernel launched for the fusion takes
    the same: :mod:`heron.compiler.library_kernels`)."""
    params = [
        KernelArgument(f"{param.name}_{k}" if param.shape.is_tuple else param.name, leaf, False)
        for param in fusion.called("calls").parameters
        for k, leaf in enumerate(leaf_shapes(param.shape))
    ]
    outputs = [
        KernelArgument(f"out{k}", leaf, True) for k, leaf in enumerate(fusion_output_shapes(fusion))
    ]
    return (*params, *outputs)


def same_buffer(a: Shape, b: Shape) -> bool:
    """Whether arrays of shapes ``a`` and ``b`` can be one buffer: same element type and count.

    What an in-place output needs from the parameter it aliases. Dimensions and
    layouts may differ: a bitcast (``f32[20,30] -> f32[600]``) moves no bytes,
    so a dynamic-update-slice reaching the root through one is still in place.
    """
    if a.is_tuple or b.is_tuple:
        return a == b
    return a.element_type == b.element_type and a.num_elements == b.num_elements


def _leaf_count(shape: Shape) -> int:
    return len(leaf_shapes(shape))


class DominanceMemo:
    """Values computed per key, reusable only where they dominate.

    A lowering may resolve an operand inside a region (a reduce's loop body);
    a value created there must not be reused after the region. Each entry
    remembers the block it was created in and is found again only from that
    block or blocks nested in it.
    """

    def __init__(self) -> None:
        self._entries: dict[tuple, list[tuple[ir.Block, Values]]] = {}

    @staticmethod
    def _ancestry(block: ir.Block) -> list[ir.Block]:
        chain = [block]
        while True:
            owner = block.owner
            if owner is None or owner.name in ("func.func", "builtin.module"):
                return chain
            parent = owner.operation.block
            if parent is None:
                return chain
            chain.append(parent)
            block = parent

    def get(self, key: tuple) -> Values | None:
        entries = self._entries.get(key)
        if not entries:
            return None
        chain = self._ancestry(ir.InsertionPoint.current.block)
        for block, values in entries:
            if any(block == b for b in chain):
                return values
        return None

    def put(self, key: tuple, values: Values) -> Values:
        self._entries.setdefault(key, []).append((ir.InsertionPoint.current.block, values))
        return values


def _key(indices: Sequence[ir.Value]) -> tuple[ir.Value, ...]:
    return tuple(indices)


class _ModuleEmitter:
    """Builds the functions of one fusion's module; shared by the entry and the subgraphs."""

    def __init__(self, fusion: Instruction, partitioned: PartitionedComputation) -> None:
        self.fusion = fusion
        self.fusion_name = fusion.name
        self.computation = partitioned.computation
        self.partitioned = partitioned
        self.entry_name = function_name(fusion.name)
        self.taken: set[str] = {self.entry_name}
        self.subgraph_functions: dict[int, func.FuncOp] = {}
        self.subgraph_of_root: dict[int, Subgraph] = {}
        self.computation_functions: dict[int, func.FuncOp] = {}
        self.parameter_leaves: dict[int, tuple[int, int]] = {}  # id(param) -> (first, count)
        self.call_memo = DominanceMemo()
        position = 0
        for param in self.computation.parameters:
            count = _leaf_count(param.shape)
            self.parameter_leaves[id(param)] = (position, count)
            position += count

    # -- names and declarations ----------------------------------------------

    def unique(self, name: str) -> str:
        candidate, suffix = name, 1
        while candidate in self.taken:
            candidate = f"{name}_{suffix}"
            suffix += 1
        self.taken.add(candidate)
        return candidate

    def error(self, inst: Instruction | None, why: str) -> UnsupportedError:
        if inst is None:
            return UnsupportedError(f"fusion '{self.fusion_name}': {why}", self.fusion.location)
        return UnsupportedError(
            f"fusion '{self.fusion_name}': cannot emit {inst.opcode} '{inst.name}'"
            f" ({inst.shape}): {why}",
            inst.location or self.fusion.location,
        )

    def tensor_types(self) -> list[ir.Type]:
        return [
            mlir_types.tensor_type(leaf)
            for param in self.computation.parameters
            for leaf in leaf_shapes(param.shape)
        ]

    def declare_subgraph(self, sub: Subgraph) -> func.FuncOp:
        signature = sub.signature
        index = mlir_types.index_type()
        inputs = [
            *(mlir_types.tensor_type(shape) for _, shape in signature.tensor_params),
            *([index] * len(signature.index_ranges)),
            *(mlir_types.scalar_type(shape.element_type) for _, shape in signature.injected),
        ]
        results = [mlir_types.scalar_type(shape.element_type) for _, shape in signature.results]
        function = func.FuncOp(self.unique(sub.name), ir.FunctionType.get(inputs, results))
        function.sym_visibility = ir.StringAttr.get("private")
        function.add_entry_block()
        self.subgraph_functions[id(sub)] = function
        for root in sub.roots:
            self.subgraph_of_root.setdefault(id(root), sub)
        return function

    def declare_computation(self, computation: Computation) -> func.FuncOp:
        inputs = [
            mlir_types.scalar_type(leaf.element_type)
            for param in computation.parameters
            for leaf in leaf_shapes(param.shape)
        ]
        results = [
            mlir_types.scalar_type(leaf.element_type)
            for leaf in leaf_shapes(computation.root_instruction.shape)
        ]
        name = self.unique(function_name(computation.name))
        function = func.FuncOp(name, ir.FunctionType.get(inputs, results))
        function.sym_visibility = ir.StringAttr.get("private")
        function.add_entry_block()
        self.computation_functions[id(computation)] = function
        return function

    # -- calls -----------------------------------------------------------------

    def call_computation(self, computation: Computation, scalars: Sequence[ir.Value]) -> Values:
        """``pure_call`` of a scalar computation's function (a reducer, a map body)."""
        function = self.computation_functions.get(id(computation))
        if function is None:
            raise self.error(None, f"computation '{computation.name}' was not declared")
        types = list(function.type.results)
        return list(pure_call_op(function, list(scalars), types).results)

    def call_subgraph(
        self,
        sub: Subgraph,
        tensors: Sequence[ir.Value],
        indices: Sequence[ir.Value],
        injected: Sequence[ir.Value] = (),
    ) -> Values:
        """``pure_call`` of a subgraph's function; one value per root leaf (memoised)."""
        function = self.subgraph_functions[id(sub)]
        if len(indices) != len(sub.signature.index_ranges):
            raise self.error(
                sub.roots[0],
                f"function {sub.name} takes {len(sub.signature.index_ranges)} indices,"
                f" called with {len(indices)}",
            )
        key = (id(sub), _key(tensors), _key(indices), _key(injected))
        found = self.call_memo.get(key)
        if found is not None:
            return found
        types = list(function.type.results)
        call = pure_call_op(function, [*tensors, *indices, *injected], types)
        return self.call_memo.put(key, list(call.results))

    def root_values(
        self,
        inst: Instruction,
        tensors: Sequence[ir.Value],
        indices: Sequence[ir.Value],
        sub: Subgraph | None = None,
    ) -> Values:
        """The values (one per leaf) of ``inst``, computed by calling its subgraph.

        A subgraph computed from injected heroes (an epilogue) cannot be called from
        here: nothing hands it the heroes' values. That is a refusal naming the root
        and the hero, not a call whose arguments do not match its function.
        """
        if sub is None:
            why = why_not_callable(self.partitioned, inst)
            if why is not None:
                raise self.error(inst, why)
            sub = self.partitioned.subgraph_of(inst)
        results = self.call_subgraph(sub, tensors, indices)
        offset = 0
        for root in sub.roots:
            count = _leaf_count(root.shape)
            if root is inst:
                return results[offset : offset + count]
            offset += count
        raise self.error(inst, f"it is not a root of {sub.name}, which computes it")

    def extract_parameter(
        self,
        param: Instruction,
        tensors: Sequence[ir.Value],
        indices: Sequence[ir.Value],
        condition: ir.Value | None = None,
    ) -> Values:
        """A fusion parameter's element(s) at ``indices``: ``tensor.extract`` + ``to_scalar``.

        With ``condition`` (an ``i1``), the element is read only where it holds and is
        zero elsewhere (``predicated_extract``): a thread whose element is out of range
        and whose result is discarded must not read a clamped index either, since an
        output may share the parameter's buffer (an in-place loop carry) and another
        thread writes that element in the same launch."""
        first, count = self.parameter_leaves[id(param)]
        values = []
        for leaf, source in zip(leaf_shapes(param.shape), tensors[first : first + count]):
            if len(indices) != leaf.rank:
                raise self.error(
                    param, f"read with {len(indices)} indices, but it has rank {leaf.rank}"
                )
            if condition is None:
                element = tensor.extract(source, list(indices))
            else:
                zero = scalar_constant(0, leaf.element_type)
                zero = mlir_types.to_element(zero, leaf.element_type)
                element = predicated_extract_op(condition, zero, source, list(indices)).results[0]
            values.append(mlir_types.to_scalar(element, leaf.element_type))
        return values

    # -- bodies ---------------------------------------------------------------------

    def emit_subgraph_body(self, sub: Subgraph) -> None:
        function = self.subgraph_functions[id(sub)]
        block = function.entry_block
        args = list(block.arguments)
        n_tensors = len(sub.signature.tensor_params)
        n_indices = len(sub.signature.index_ranges)
        tensors = args[:n_tensors]
        indices = args[n_tensors : n_tensors + n_indices]
        injected_values = args[n_tensors + n_indices :]
        injected: dict[int, Values] = {}
        position = 0
        for hero in sub.injected:
            count = _leaf_count(hero.shape)
            injected[id(hero)] = injected_values[position : position + count]
            position += count
        scope = _SubgraphScope(self, sub, tensors, injected)
        with ir.InsertionPoint(block):
            results: Values = []
            for root in sub.roots:
                if len(indices) != _rank(root.shape):
                    raise self.error(
                        root,
                        f"a root of {sub.name} with rank {_rank(root.shape)} in a function"
                        f" indexed by {len(indices)} indices",
                    )
                results.extend(scope.emit(root, indices))
            self.check_results(sub.roots, results, function)
            func.ReturnOp(results)

    def emit_computation_body(self, computation: Computation) -> None:
        function = self.computation_functions[id(computation)]
        block = function.entry_block
        args = list(block.arguments)
        params: dict[int, Values] = {}
        position = 0
        for param in computation.parameters:
            count = _leaf_count(param.shape)
            params[id(param)] = args[position : position + count]
            position += count
        scope = _ScalarScope(self, computation, params)
        root = computation.root_instruction
        with ir.InsertionPoint(block):
            results = scope.resolve(root, [])
            self.check_results([root], results, function)
            func.ReturnOp(results)

    def check_results(
        self, roots: Sequence[Instruction], results: Values, function: func.FuncOp
    ) -> None:
        expected = list(function.type.results)
        got = [v.type for v in results]
        if got != expected:
            names = ", ".join(f"{r.opcode} '{r.name}'" for r in roots)
            raise self.error(
                roots[0],
                f"the lowering of {names} gave values of types"
                f" ({', '.join(map(str, got))}), expected ({', '.join(map(str, expected))})",
            )

    def emit_one(self, inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext):
        """``emit_instruction`` with any non-HLO failure reported against the op and fusion."""
        try:
            values = emit_instruction(inst, indices, ctx)
        except HloError:
            raise
        except Exception as exc:  # a lowering's bug must still name the op and fusion
            raise self.error(inst, f"{type(exc).__name__}: {exc}") from exc
        expected = _leaf_count(inst.shape)
        if len(values) != expected:
            raise self.error(
                inst, f"its lowering returned {len(values)} values, expected {expected}"
            )
        return values


def _rank(shape: Shape) -> int:
    return leaf_shapes(shape)[0].rank


class _SubgraphScope:
    """Operand resolution inside one subgraph function (see ``resolve``)."""

    def __init__(
        self,
        emitter: _ModuleEmitter,
        sub: Subgraph,
        tensors: Values,
        injected: dict[int, Values],
    ) -> None:
        self.emitter = emitter
        self.sub = sub
        self.members = {id(inst) for inst in sub.instructions}
        self.tensors = tensors
        self.injected = injected
        self.memo = DominanceMemo()
        self.context = ElementalContext(
            resolve=self.resolve,
            call=emitter.call_computation,
            fusion_name=emitter.fusion_name,
        )

    def emit(self, inst: Instruction, indices: Sequence[ir.Value]) -> Values:
        key = (id(inst), _key(indices))
        found = self.memo.get(key)
        if found is not None:
            return found
        return self.memo.put(key, self.emitter.emit_one(inst, indices, self.context))

    def resolve(self, operand: Instruction, indices: Sequence[ir.Value]) -> Values:
        """An operand's element at ``indices``.

        A fusion parameter is read from its tensor; an injected hero is the
        function's argument; an instruction of this subgraph is emitted here
        (once per distinct index); anything else is a call of its subgraph.
        """
        if id(operand) in self.injected:
            return self.injected[id(operand)]
        if operand.opcode == "parameter" and id(operand) in self.emitter.parameter_leaves:
            key = ("param", id(operand), _key(indices))
            found = self.memo.get(key)
            if found is not None:
                return found
            values = self.emitter.extract_parameter(operand, self.tensors, indices)
            return self.memo.put(key, values)
        if id(operand) in self.members:
            return self.emit(operand, indices)
        return self.emitter.root_values(operand, self.tensors, indices)


class _ScalarScope:
    """Operand resolution inside a scalar computation (reducer, map body): no indices."""

    def __init__(
        self, emitter: _ModuleEmitter, computation: Computation, params: dict[int, Values]
    ) -> None:
        self.emitter = emitter
        self.computation = computation
        self.params = params
        self.memo: dict[int, Values] = {}
        self.context = ElementalContext(
            resolve=self.resolve,
            call=emitter.call_computation,
            fusion_name=emitter.fusion_name,
        )

    def resolve(self, operand: Instruction, indices: Sequence[ir.Value]) -> Values:
        if id(operand) in self.params:
            return self.params[id(operand)]
        found = self.memo.get(id(operand))
        if found is not None:
            return found
        if operand.opcode == "tuple":
            values = [v for o in operand.operands for v in self.resolve(o, indices)]
        else:
            values = self.emitter.emit_one(operand, indices, self.context)
        self.memo[id(operand)] = values
        return values


class EntryFunction:
    """The entry function under construction, as a hero emitter's ``emit_entry`` sees it.

    ``parameters`` are the fusion parameters' tensors (leaves, in parameter
    order), ``outputs`` the output tensors (destination passing: only
    ``tensor.insert`` into them, and return what that gives), ``thread_ids``
    and ``block_ids`` the ``gpu.thread_id``/``gpu.block_id`` values (x, then y
    where the launch has one). The insertion point is the entry block, after
    the ids; ``emit_entry`` returns the final output tensors.
    """

    def __init__(
        self,
        emitter: _ModuleEmitter,
        function: func.FuncOp,
        launch: LaunchDimensions,
        thread_ids: Values,
        block_ids: Values,
    ) -> None:
        self._emitter = emitter
        self.function = function
        self.launch = launch
        args = list(function.entry_block.arguments)
        n_params = sum(count for _, count in emitter.parameter_leaves.values())
        self.parameters: Values = args[:n_params]
        self.outputs: Values = args[n_params:]
        self.thread_ids = thread_ids
        self.block_ids = block_ids
        self.partitioned = emitter.partitioned
        self.fusion = emitter.fusion
        self.computation = emitter.computation

    @property
    def fusion_name(self) -> str:
        return self._emitter.fusion_name

    @property
    def output_shapes(self) -> tuple[ArrayShape, ...]:
        return fusion_output_shapes(self.fusion)

    def value_of(
        self, inst: Instruction, indices: Sequence[ir.Value], condition: ir.Value | None = None
    ) -> Values:
        """``inst``'s element(s) at ``indices``: a parameter is read (only where
        ``condition`` holds, when given: ``_ModuleEmitter.extract_parameter``),
        anything else called."""
        if inst.opcode == "parameter" and id(inst) in self._emitter.parameter_leaves:
            return self._emitter.extract_parameter(inst, self.parameters, indices, condition)
        return self._emitter.root_values(inst, self.parameters, indices)

    def call_subgraph(
        self, sub: Subgraph, indices: Sequence[ir.Value], injected: Sequence[ir.Value] = ()
    ) -> Values:
        """``pure_call`` of ``sub``'s function with the entry's tensors: one value per root leaf."""
        return self._emitter.call_subgraph(sub, self.parameters, indices, injected)

    def call_computation(self, computation: Computation, scalars: Sequence[ir.Value]) -> Values:
        return self._emitter.call_computation(computation, scalars)

    def computation_function(self, computation: Computation) -> func.FuncOp:
        """The private ``func.func`` of a scalar computation (a reducer, for ``shuffle_reduce``)."""
        function = self._emitter.computation_functions.get(id(computation))
        if function is None:
            raise self.error(None, f"computation '{computation.name}' was not declared")
        return function

    def unique_name(self, name: str) -> str:
        """A symbol name not yet taken in the module (for functions an emitter adds)."""
        return self._emitter.unique(name)

    def error(self, inst: Instruction | None, why: str) -> UnsupportedError:
        return self._emitter.error(inst, why)


def why_not_callable(partitioned: PartitionedComputation, inst: Instruction) -> str | None:
    """Why ``inst``'s value cannot be had by calling the function that computes it (None:
    it can): it is in no function, or only an epilogue computes it (from heroes that a
    caller other than the emitter's own epilogue call cannot hand it), or it does not
    leave its function."""
    sub = partitioned.instruction_to_subgraph.get(inst)
    if sub is None:
        sub = partitioned.instruction_to_epilogue.get(inst)
    if sub is None:
        return (
            f"'{inst.name}' ({inst.opcode}) is in no subgraph of"
            f" '{partitioned.computation.name}' (parameters and a root tuple never are)"
        )
    if sub.injected:
        heroes = ", ".join(f"'{hero.name}'" for hero in sub.injected)
        return (
            f"it is read outside the epilogue {sub.name} that computes it from the"
            f" hero {heroes} (a root read at another index than its hero's)"
        )
    if not any(root is inst for root in sub.roots):
        return f"it is not a root of {sub.name}, which computes it"
    return None


def called_computations(computation: Computation) -> list[Computation]:
    """Every computation reached from ``computation``'s instructions, callees first."""
    order: list[Computation] = []
    seen: set[int] = set()

    def visit(comp: Computation) -> None:
        for inst in comp.instructions:
            for callee in inst.called_computations():
                if id(callee) not in seen:
                    seen.add(id(callee))
                    visit(callee)
                    order.append(callee)

    visit(computation)
    return order


class FusionEmitter(abc.ABC):
    """A hero emitter for one fusion, built from the fusion's analysis.

    Subclasses set ``name``, say how the kernel is launched
    (``launch_dimensions``) and which instructions are heroes (``heroes``;
    a loop fusion has none), and write the entry function's body
    (``emit_entry``). ``emit`` does the rest (see the module docstring).

    ``analysis`` (``heron.emitters.fusion_analysis.FusionAnalysis``) holds
    everything hero selection found: the roots, their heroes, the normalised
    transpose or the collapsed reduction, and the target; an emitter reads
    them there instead of searching again. ``target`` is the analysis's target
    (warp size, core count, shared-memory limits).
    """

    name: ClassVar[str] = "?"
    #: Whether every output element is written by exactly one thread, once. An
    #: emitter whose threads combine into an element (reductions' partial
    #: results, scatter's updates) sets False; ``heron check`` then does not
    #: count a second write of an element as a bug.
    writes_each_element_once: ClassVar[bool] = True
    #: Whether the kernel is built once for any size of its arguments (a library kernel:
    #: :mod:`heron.compiler.library_kernels`): its arguments' types are upper bounds, its
    #: sizes read from an argument, and it is launched on any grid up to
    #: ``launch_dimensions()``. Its entry then declares no grid size and carries
    #: ``SHAPE_GENERIC_ATTR``, which a device binds each argument by its buffer's size for.
    shape_generic: ClassVar[bool] = False

    def order_dependence(self) -> str | None:
        """Why this kernel's result depends on the order its threads run, or None.

        Only an emitter whose threads combine values with atomics can make such a
        kernel (the scatter emitter); the runtime's report names those kernels,
        and ``--deterministic`` compiles avoid them.
        """
        return None

    def __init__(self, analysis: FusionAnalysis) -> None:
        if not isinstance(analysis, FusionAnalysis):
            raise UnsupportedError(
                f"the {self.name} emitter is built from a fusion's analysis"
                f" (heron.emitters.fusion_analysis.analyse_fusion), not from"
                f" {type(analysis).__name__} {getattr(analysis, 'name', analysis)!r}"
            )
        self.analysis = analysis
        self.target = analysis.target
        self.fusion = analysis.fusion
        self.computation = analysis.computation
        self._partitioned: PartitionedComputation | None = None

    def error(self, why: str, inst: Instruction | None = None) -> UnsupportedError:
        """An ``UnsupportedError`` naming the fusion, this emitter and ``inst`` (if any)."""
        where = "" if inst is None else f" {inst.opcode} '{inst.name}' ({inst.shape}):"
        location = (inst.location if inst is not None else None) or self.fusion.location
        return UnsupportedError(
            f"fusion '{self.fusion.name}': the {self.name} emitter:{where} {why}", location
        )

    def only_root(self, opcode: str) -> Instruction:
        """The fusion's one root, which must be an ``opcode`` (an emitter that takes one op
        alone, as ``fusion_analysis.claims_root`` claims it), or an error naming the roots."""
        roots = self.analysis.roots
        if len(roots) != 1 or roots[0].opcode != opcode:
            found = ", ".join(f"{r.opcode} '{r.name}'" for r in roots)
            raise self.error(f"needs one {opcode} as the fusion root, not {found}")
        return roots[0]

    @abc.abstractmethod
    def launch_dimensions(self) -> LaunchDimensions:
        """Blocks and threads per block of the kernel."""

    def heroes(self) -> tuple[Instruction, ...]:
        """Instructions the partitioner must treat as heroes (none for a loop fusion)."""
        return ()

    def unemitted_heroes(self) -> tuple[Instruction, ...]:
        """Heroes whose own subgraph function is not emitted.

        A hero that the entry function implements itself and that has no
        elemental lowering (the scatter of the scatter emitter) is listed
        here: only the subgraphs around it become functions.
        """
        return ()

    def output_aliases(self) -> dict[int, int]:
        """Outputs updated in place: output index -> the parameter leaf index it aliases.

        Empty for a kernel that writes every output element. An in-place
        emitter writes only the elements it changes; the output buffer must
        then hold the parameter's data before the launch (see ``EmittedKernel``).
        """
        return {}

    def _checked_aliases(self) -> dict[int, int]:
        aliases = dict(self.output_aliases())
        arguments = self.arguments()
        params = [a for a in arguments if not a.is_output]
        outputs = [a for a in arguments if a.is_output]
        for out, param in aliases.items():
            if not (0 <= out < len(outputs) and 0 <= param < len(params)):
                raise UnsupportedError(
                    f"fusion '{self.fusion.name}': the {self.name} emitter aliases output {out}"
                    f" with parameter {param}, but the kernel has {len(outputs)} outputs and"
                    f" {len(params)} parameter buffers",
                    self.fusion.location,
                )
            if not same_buffer(outputs[out].shape, params[param].shape):
                raise UnsupportedError(
                    f"fusion '{self.fusion.name}': output {out} ({outputs[out].shape}) cannot"
                    f" alias parameter {params[param].name} ({params[param].shape}): the"
                    " buffers differ",
                    self.fusion.location,
                )
        return aliases

    @abc.abstractmethod
    def emit_entry(self, entry: EntryFunction) -> Values:
        """Build the entry function's body; return the final output tensors, in order."""

    # -- the shared part ------------------------------------------------------------

    def arguments(self) -> tuple[KernelArgument, ...]:
        return kernel_arguments_of(self.fusion)

    def partitioned(self) -> PartitionedComputation:
        """The fused computation partitioned around :meth:`heroes` (made once: an emitter
        that checks its epilogues when built and then emits asks twice)."""
        if self._partitioned is not None:
            return self._partitioned
        try:
            known = partition(self.computation, self.heroes())
        except HloError:
            raise
        except Exception as exc:
            raise UnsupportedError(
                f"fusion '{self.fusion.name}': partitioning failed: {exc}", self.fusion.location
            ) from exc
        for sub in known.subgraphs:  # refused here, when built, not by the call's builder
            results = sum(len(leaf_shapes(root.shape)) for root in sub.roots)
            if results > MAX_CALL_RESULTS:
                raise UnsupportedError(
                    f"fusion '{self.fusion.name}': subgraph {sub.name} returns {results}"
                    f" values, more than a heron_gpu.pure_call's {MAX_CALL_RESULTS}",
                    self.fusion.location,
                )
        self._partitioned = known
        return known

    def refuse_uncallable_reads(self, read_by_entry: Iterable[Instruction] = ()) -> None:
        """Refuse a fusion where a value is read by calling a function that cannot give it
        (:func:`why_not_callable`: a value only an epilogue computes, from heroes nothing
        else hands it): the error :meth:`emit` would meet, raised by a constructor
        instead, so that an emitter whose spec says ``refuses_when_built`` can be built
        rather than emitted. The reads are each emitted function's operands from other
        functions, and ``read_by_entry``: what the emitter's entry reads itself
        (``EntryFunction.value_of``: a hero's operands, a side output)."""
        partitioned = self.partitioned()
        skipped = {id(hero) for hero in self.unemitted_heroes()}
        reads: list[Instruction] = [r for r in read_by_entry if r.opcode != "parameter"]
        for sub in partitioned.subgraphs:
            if all(id(root) in skipped for root in sub.roots):
                continue  # not emitted
            inside = {id(inst) for inst in sub.instructions}
            inside.update(id(hero) for hero in sub.injected)
            reads.extend(
                operand
                for inst in sub.instructions
                for operand in inst.operands
                if id(operand) not in inside and operand.opcode != "parameter"
            )
        for value in dict.fromkeys(reads):
            why = why_not_callable(partitioned, value)
            if why is not None:
                raise self.error(why, value)

    def emit(self) -> EmittedKernel:
        """The fusion as an ``emitted``-stage module (docs/pipeline.md)."""
        partitioned = self.partitioned()
        launch = self.launch_dimensions()
        skipped = {id(hero) for hero in self.unemitted_heroes()}
        subgraphs = [
            sub
            for sub in partitioned.subgraphs
            if not all(id(root) in skipped for root in sub.roots)
        ]
        aliases = self._checked_aliases()
        context = make_context()
        with context, ir.Location.unknown():
            module = ir.Module.create()
            emitter = _ModuleEmitter(self.fusion, partitioned)
            entry = self._declare_entry(module, emitter, launch)
            mark_in_place(entry.operation, aliases)
            with ir.InsertionPoint(module.body):
                for sub in subgraphs:
                    emitter.declare_subgraph(sub)
                computations = called_computations(self.computation)
                for computation in computations:
                    emitter.declare_computation(computation)
            for sub in subgraphs:
                emitter.emit_subgraph_body(sub)
            for computation in computations:
                emitter.emit_computation_body(computation)
            self._emit_entry_body(entry, emitter, launch)
            self._verify(module)
        return EmittedKernel(
            name=emitter.entry_name,
            fusion_name=self.fusion.name,
            emitter=self.name,
            launch=launch,
            arguments=self.arguments(),
            module=module,
            output_aliases=aliases,
            writes_each_element_once=self.writes_each_element_once,
            order_dependence=self.order_dependence(),
            analysis=self.analysis,
            partitioned=partitioned,
        )

    def _declare_entry(
        self, module: ir.Module, emitter: _ModuleEmitter, launch: LaunchDimensions
    ) -> func.FuncOp:
        outputs = [mlir_types.tensor_type(s) for s in fusion_output_shapes(self.fusion)]
        inputs = [*emitter.tensor_types(), *outputs]
        with ir.InsertionPoint(module.body):
            function = func.FuncOp(emitter.entry_name, ir.FunctionType.get(inputs, outputs))
            function.attributes[KERNEL_ATTR] = ir.UnitAttr.get()
            function.attributes["heron.block_size"] = ir.DenseI64ArrayAttr.get(
                [launch.thread_x, 1, 1]
            )
            if self.shape_generic:
                function.attributes[SHAPE_GENERIC_ATTR] = ir.UnitAttr.get()
            else:
                function.attributes["heron.grid_size"] = ir.DenseI64ArrayAttr.get(
                    [launch.block_x, launch.block_y, 1]
                )
            function.add_entry_block()
        return function

    def _emit_entry_body(
        self, function: func.FuncOp, emitter: _ModuleEmitter, launch: LaunchDimensions
    ) -> None:
        with ir.InsertionPoint(function.entry_block):
            thread_ids = [gpu.thread_id(gpu.Dimension.x, upper_bound=launch.thread_x)]
            block_ids = [gpu.block_id(gpu.Dimension.x, upper_bound=launch.block_x)]
            if launch.block_y > 1:
                block_ids.append(gpu.block_id(gpu.Dimension.y, upper_bound=launch.block_y))
            entry = EntryFunction(emitter, function, launch, thread_ids, block_ids)
            results = list(self.emit_entry(entry))
            expected = [v.type for v in entry.outputs]
            if [v.type for v in results] != expected:
                raise emitter.error(
                    None,
                    f"the {self.name} emitter returned {len(results)} tensors of the wrong"
                    " types for the outputs",
                )
            func.ReturnOp(results)

    def _verify(self, module: ir.Module) -> None:
        try:
            verify_xla_ops(module)
        except Exception as exc:
            raise UnsupportedError(
                f"fusion '{self.fusion.name}': the {self.name} emitter produced invalid IR: {exc}",
                self.fusion.location,
            ) from exc
