"""Thunk emission: a scheduled, buffer-assigned module as a thunk program.

XLA's ``ThunkEmitter`` (seeds/from-hlo-to-thunks.md, "Thunks"): every
instruction of the entry computation, in schedule order, becomes the thunks
that do its work on the device, over the slices the buffer assignment gave
its operands and results:

- ``fusion``: a :class:`~heron.runtime.core.thunks.KernelThunk`, its
  arguments in heron's kernel ABI order (the fusion's operand leaves, then its
  result leaves). A GEMM fusion a library can compute
  (:mod:`heron.compiler.library_gemm`) is a ``LibraryCallThunk`` holding that
  launch as its fallback: the runtime picks one at load time. The launch's
  kernel is compiled only for the backends whose device may not run the call
  (``fallback_backends``; a CUDA device always runs a plain real GEMM with
  cuBLASLt, so a CUDA-only executable holds no kernel for it, as XLA's holds
  none); with none, the call has no fallback. An in-place
  output (``CompiledKernel.output_aliases``) whose slice the assignment did
  not make its input's gets a ``CopyThunk`` of the input first, as
  :func:`~heron.compiler.device_kernels.run_on_device` does. An output the
  assignment put over an input the kernel does not update in place (a while
  body's new state element over the old one, an update of a donated
  parameter written into the parameter's buffer) is written there: copy
  insertion allows that only where the kernel reads the input element by
  element (``heron.hlo.passes.copy_insertion.reads_in_place``). Such a
  kernel is compiled knowing it: every argument whose slice overlaps a
  written argument's, outside the kernel's own in-place pairs, is *shared*
  (``compile(fusion, shared, backends)``: neither ``noalias`` nor ``readonly``, so no
  load of it goes through the non-coherent ``ld.global.nc``;
  :mod:`heron.emitters.kernel_arguments`), as XLA computes noalias from the
  slices. The shared arguments are part of the kernel's identity: the same
  fusion launched on separate buffers elsewhere is another kernel, compiled
  as before.
- ``parameter``, ``constant``, ``tuple``, ``get-tuple-element``, ``bitcast``:
  nothing; their slices are their operands' or their allocation's.
- ``copy`` (added by copy insertion): a ``CopyThunk`` per leaf whose slices
  differ. A copy that changes the layout is refused: layout normalisation
  makes those transposes, which are fusions.
- ``while``: a ``WhileThunk`` of the condition's thunks, the predicate's
  slice (the condition's root) and the body's thunks, with the trip count
  when the caller knows it. The loop state is one buffer per leaf (the
  dataflow unites init, parameters, body root and result); where a slice
  still differs, a ``CopyThunk`` moves the value (before the loop for the
  init, at the end of the body for its root).
- ``conditional``: a ``ConditionalThunk`` on the pred or s32 selector's slice,
  each branch's thunks followed by copies of its result into the
  conditional's slices where they differ.
- ``custom-call``: a ``CustomCallThunk`` over its operand and result leaves
  slices, with its attributes, run by the target's host implementation
  (:mod:`heron.hlo.custom_calls`); a target no installed ``heron.custom_calls``
  plugin provides is refused here, naming it, the instruction and its
  computation, at its location. A convolution the DNN library takes
  (``__heron$convolution``, :mod:`heron.compiler.library_convolution`) and a
  fused attention (``__heron$attention``, :mod:`heron.compiler.library_attention`)
  and an FFT (``__heron$fft``, :mod:`heron.compiler.library_fft`) are each a
  ``LibraryCallThunk`` with that host call as its fallback.
- anything else (a dot or sort the fusion passes left unfused, a
  convolution ...): refused, naming the instruction.

Kernels are compiled by the caller's ``compile`` function (one call per
distinct fusion: fusions with the same body, kind, shapes and shared arguments
share one kernel image; :func:`heron.compiler.compile_fusion` per backend, or a cache of it);
this module only places them. Which kernels an executable holds, its allocation
table and its entry signature are :mod:`heron.compiler.executable`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from heron.compiler import (
    library_attention,
    library_attention_backward,
    library_convolution,
    library_fft,
)
from heron.compiler.library_gemm import gemm_fusion, gemm_library_call
from heron.hlo.buffers import BufferAssignment, in_place_operands
from heron.hlo.buffers import Slice as HloSlice
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.outline import HOST_OPCODES, REFUSED_OPCODES, describe, refusal
from heron.hlo.shapes import ArrayShape
from heron.runtime.core.thunks import (
    BufferSlice,
    ConditionalThunk,
    CopyThunk,
    CustomCallThunk,
    KernelThunk,
    Thunk,
    WhileThunk,
)
from heron.target import Target

if TYPE_CHECKING:
    from heron.compiler.driver import CompiledKernel

__all__ = ["EmittedKernel", "ThunkProgram", "emit_thunks", "expected_kernels", "image_key"]

#: ``compile(fusion, shared, backends)`` -> the fusion compiled for each backend, by
#: backend name; ``shared``: the kernel argument indices whose slice overlaps another
#: argument's (:func:`heron.compiler.compile_fusion`'s ``shared``), mostly empty;
#: ``backends``: the backends to compile for, None for every one the program has.
Compile = Callable[
    [Instruction, frozenset[int], tuple[str, ...] | None], Mapping[str, "CompiledKernel"]
]
#: A library call's contract object -> the backends whose images hold heron's kernel beside
#: it (a device of the others always runs the library: ``BackendSpec.library_always_runs``).
FallbackBackends = Callable[[object], tuple[str, ...]]


#: heron's library custom calls: whether an instruction is one, and the library call it makes
#: from the call's operands and every array leaf of its result (the host call beside it as
#: the fallback).
_LIBRARY_CUSTOM_CALLS = (
    (library_convolution.is_library_convolution, library_convolution.library_convolution_thunk),
    (library_attention.is_library_attention, library_attention.library_attention_thunk),
    (
        library_attention_backward.is_library_attention_backward,
        library_attention_backward.library_attention_backward_thunk,
    ),
    (library_fft.is_library_fft, library_fft.library_fft_thunk),
)


def _library_thunk_of(inst: Instruction) -> Callable | None:
    """The library thunk maker of one of heron's library custom calls, else None."""
    for recognises, make in _LIBRARY_CUSTOM_CALLS:
        if recognises(inst):
            return make
    return None


@attrs.frozen
class EmittedKernel:
    """A kernel: the first fusion compiled to it, and what it was compiled to, per backend."""

    key: str
    fusion: Instruction
    compiled: Mapping[str, CompiledKernel]


@attrs.frozen
class ThunkProgram:
    """The entry's thunks and the kernels they launch, in the order they appear.

    Every slice a thunk names lies in an allocation of the buffer assignment:
    thunk emission adds no allocation of its own.
    """

    thunks: tuple[Thunk, ...]
    #: One per distinct kernel (fusions with the same body, kind and shapes share one).
    kernels: tuple[EmittedKernel, ...]
    #: Fusion name -> the image key of its kernel.
    kernel_of: Mapping[str, str] = attrs.field(factory=dict)


_KEY_CHARACTERS = re.compile(r"[^A-Za-z0-9_.-]")


def image_key(fusion: Instruction) -> str:
    """The kernel image key of ``fusion``: its name as an archive-safe token.

    Instruction names are unique in a module, so the key is unique per
    kernel; a character a member name may not hold becomes ``_``.
    """
    key = _KEY_CHARACTERS.sub("_", fusion.name)
    if not key or not (key[0].isalpha() or key[0] == "_"):
        key = f"k_{key}"
    return key[:200]


def emit_thunks(
    assignment: BufferAssignment,
    compile: Compile,
    trip_counts: Mapping[str, int] | None = None,
    target: Target | None = None,
    fallback_backends: FallbackBackends | None = None,
) -> ThunkProgram:
    """The thunk program of ``assignment.module``'s entry (see the module docstring).

    ``compile(fusion, shared, backends)`` gives the fusion's :class:`CompiledKernel`
    per backend, compiled with the arguments ``shared`` overlapping another's;
    ``trip_counts`` maps a while instruction's name to its known trip count;
    ``target`` is the device compiled for, whose GEMM library computes the
    fusions it can (:mod:`heron.compiler.library_gemm`; none without a target);
    ``fallback_backends(call)`` the backends heron's kernel beside a GEMM library
    call is compiled for (None: every backend; none at all: the call has no
    fallback, and no kernel is compiled for its fusion).
    """
    emitter = _Emitter(assignment, compile, dict(trip_counts or {}), target, fallback_backends)
    thunks = emitter.computation(assignment.module.entry)
    return ThunkProgram(tuple(thunks), tuple(emitter.kernels), dict(emitter.kernel_of))


@attrs.define
class _Emitter:
    assignment: BufferAssignment
    compile: Compile
    trip_counts: dict[str, int]
    target: Target | None
    fallback_backends: FallbackBackends | None = None
    kernels: list[EmittedKernel] = attrs.field(factory=list)
    keys: set[str] = attrs.field(factory=set)
    by_identity: dict[tuple[object, ...], EmittedKernel] = attrs.field(factory=dict)
    kernel_of: dict[str, str] = attrs.field(factory=dict)

    # -- slices ------------------------------------------------------------------------

    def leaves(self, inst: Instruction) -> list[BufferSlice]:
        """The slice of every array leaf of ``inst``'s result, in order."""
        result = []
        for k, piece in enumerate(self.assignment.leaf_slices(inst)):
            if piece is None:
                raise UnsupportedError(
                    f"{describe(inst)}: leaf {k} has no bytes (a token); thunks take arrays",
                    inst.location,
                )
            result.append(_slice(piece))
        return result

    # -- computations ------------------------------------------------------------------

    def computation(self, computation: Computation) -> list[Thunk]:
        """The thunks of ``computation``'s instructions, in its (scheduled) order."""
        thunks: list[Thunk] = []
        for inst in computation.instructions:
            thunks.extend(self.instruction(inst))
        return thunks

    def instruction(self, inst: Instruction) -> list[Thunk]:
        op = inst.opcode
        if op in HOST_OPCODES:
            return []
        if op == "fusion":
            return self.fusion(inst)
        if op == "copy":
            return self.copy(inst)
        if op == "while":
            return [self.loop(inst)]
        if op == "conditional":
            return [self.conditional(inst)]
        if op == "custom-call":
            host = self.custom_call(inst)
            library_thunk = _library_thunk_of(inst)
            if self.target is not None and library_thunk is not None:
                results = self.leaves(inst)
                return [library_thunk(inst, host.operands, results, host, self.target)]
            return [host]
        if op in REFUSED_OPCODES:
            raise refusal(inst)
        raise UnsupportedError(
            f"cannot run instruction {describe(inst)}: no heron emitter takes it (the fusion"
            " passes left it outside a fusion)",
            inst.location,
        )

    # -- kernels -----------------------------------------------------------------------

    def kernel_for(
        self, inst: Instruction, shared: frozenset[int], backends: tuple[str, ...] | None = None
    ) -> EmittedKernel:
        """The kernel of ``inst`` with arguments ``shared`` overlapping another's, for
        ``backends`` (None: all): compiled once per distinct fusion (same body, kind,
        shapes, shared arguments, backends)."""
        identity = (*_identity(inst), tuple(sorted(shared)), backends)
        found = self.by_identity.get(identity)
        if found is None:
            compiled = dict(self.compile(inst, shared, backends))
            if not compiled:
                raise UnsupportedError(f"fusion {describe(inst)} was compiled for no backend")
            for backend, kernel in compiled.items():
                if not shared <= kernel.shared_arguments:
                    raise UnsupportedError(
                        f"fusion {describe(inst)}: its arguments {sorted(shared)} overlap"
                        f" another argument's buffer, but the {backend} kernel was compiled"
                        f" for {sorted(kernel.shared_arguments)} only (a compiler that"
                        " ignores compile_fusion's shared?)"
                    )
            found = EmittedKernel(self.unique_key(inst), inst, compiled)
            self.kernels.append(found)
            self.by_identity[identity] = found
        self.kernel_of[inst.name] = found.key
        return found

    def forget(self, emitted: EmittedKernel) -> None:
        """Drop ``emitted``, just compiled and not launched, from the program."""
        self.kernels.remove(emitted)
        self.keys.discard(emitted.key)
        for identity, kernel in list(self.by_identity.items()):
            if kernel is emitted:
                del self.by_identity[identity]

    def fusion(self, inst: Instruction) -> list[Thunk]:
        inputs = [piece for operand in inst.operands for piece in self.leaves(operand)]
        outputs = self.leaves(inst)
        overlaps = _overlaps((*inputs, *outputs), len(inputs))
        # The pairs the kernel will update in place, as the dataflow sees them; the kernel
        # says which it does once compiled (an emitter may decline one).
        shared = _shared(overlaps, _dataflow_pairs(inst, len(inputs))) if overlaps else frozenset()
        # A GEMM a library computes: the library call, heron's launch beside it (issue 17)
        # for the backends whose device may not run the call.
        library = None
        if self.target is not None:
            library = gemm_library_call(inst, inputs, outputs, self.target)
        backends = None
        if library is not None and self.fallback_backends is not None:
            backends = tuple(self.fallback_backends(library.call))
            if not backends:
                return [library.thunk()]
        count = len(self.kernels)
        emitted = self.kernel_for(inst, shared, backends)
        kernel = self.checked(inst, emitted, inputs, outputs)
        needed = _shared(overlaps, _declared_pairs(kernel.output_aliases, len(inputs)))
        if not needed <= shared or (kernel.output_aliases and backends is not None):
            # In place: no library call, so the kernel runs on every backend.
            if len(self.kernels) > count:
                self.forget(emitted)
            library, backends = None, None
            emitted = self.kernel_for(inst, shared | needed)
            kernel = self.checked(inst, emitted, inputs, outputs)
        thunks: list[Thunk] = []
        aliases = dict(kernel.output_aliases)
        for out, source in sorted(aliases.items()):
            if outputs[out] != inputs[source]:
                thunks.append(CopyThunk(inputs[source], outputs[out]))
        launch = KernelThunk(
            kernel_name=kernel.kernel_name,
            image_key=emitted.key,
            arguments=(*inputs, *outputs),
            grid=kernel.grid,
            block=kernel.block,
            order_dependence=kernel.order_dependence,
        )
        if library is not None and not thunks:
            return [library.thunk((launch,), kernel.emitter)]
        return [*thunks, launch]

    def checked(
        self,
        inst: Instruction,
        emitted: EmittedKernel,
        inputs: Sequence[BufferSlice],
        outputs: Sequence[BufferSlice],
    ) -> CompiledKernel:
        """The kernel one thunk launches for every backend of ``emitted``, its arguments
        the fusion's ``inputs`` then ``outputs``."""
        compiled = emitted.compiled
        kernel = next(iter(compiled.values()))
        for backend, other in compiled.items():
            if (other.kernel_name, other.grid, other.block, other.arguments) != (
                kernel.kernel_name,
                kernel.grid,
                kernel.block,
                kernel.arguments,
            ) or dict(other.output_aliases) != dict(kernel.output_aliases):
                raise UnsupportedError(
                    f"fusion {describe(inst)}: the {backend} kernel's name, launch or arguments"
                    f" differ from the {next(iter(compiled))} kernel's; one thunk cannot launch"
                    " both"
                )
        expected = [(a.shape.element_type, a.shape.dims) for a in kernel.arguments]
        given = [
            (leaf.element_type, leaf.dims)
            for leaf in (
                *(leaf for operand in inst.operands for leaf in operand.shape.leaves()),
                *inst.shape.leaves(),
            )
        ]
        if expected != given or len(inputs) + len(outputs) != len(given):
            raise UnsupportedError(
                f"fusion {describe(inst)}: the kernel's {len(expected)} arguments are not the"
                f" fusion's {len(inputs)} operand leaves and {len(outputs)} results"
            )
        return kernel

    def unique_key(self, inst: Instruction) -> str:
        key = base = image_key(inst)
        n = 1
        while key in self.keys:
            key = f"{base[:190]}.{n}"
            n += 1
        self.keys.add(key)
        return key

    # -- copies ------------------------------------------------------------------------

    def copy(self, inst: Instruction) -> list[Thunk]:
        (operand,) = inst.operands
        for mine, theirs in zip(inst.shape.leaves(), operand.shape.leaves(), strict=True):
            if isinstance(mine, ArrayShape) and mine.layout != theirs.layout:
                raise UnsupportedError(
                    f"copy {describe(inst)} changes the layout ({theirs} -> {mine}); layout"
                    " normalisation makes such copies transposes (fusions), so this module did"
                    " not go through the program pipeline",
                    inst.location,
                )
        return moves(self.leaves(operand), self.leaves(inst))

    # -- custom calls ------------------------------------------------------------------

    def custom_call(self, inst: Instruction) -> CustomCallThunk:
        """A host custom call; its target must be installed now, not first at run time."""
        from heron.hlo.custom_calls.registry import resolve

        call, _ = resolve(inst)
        return CustomCallThunk(
            target=call.target,
            name=call.instruction,
            computation=call.computation,
            operands=[piece for operand in inst.operands for piece in self.leaves(operand)],
            operand_shapes=[str(shape) for shape in call.operand_shapes],
            results=self.leaves(inst),
            result_shape=str(call.result_shape),
            backend_config=call.backend_config,
            opaque=call.opaque,
            api_version=call.api_version,
        )

    # -- control flow ------------------------------------------------------------------

    def loop(self, inst: Instruction) -> WhileThunk:
        condition, body = inst.called("condition"), inst.called("body")
        state = self.leaves(inst)
        before = moves(self.leaves(inst.operands[0]), state)
        if before:
            raise UnsupportedError(
                f"while {describe(inst)}: its init is not in the loop's buffers"
                f" ({len(before)} leaves differ); copy insertion shares them"
            )
        predicate = self.leaves(condition.root_instruction)
        if len(predicate) != 1 or predicate[0].size != 1:
            raise UnsupportedError(
                f"while {describe(inst)}: the condition's result is not one pred"
            )
        condition_thunks = self.computation(condition)
        for parameter in (*condition.parameters, *body.parameters):
            if self.leaves(parameter) != state:
                raise UnsupportedError(
                    f"while {describe(inst)}: parameter '{parameter.name}' of"
                    f" '{parameter.parent.name if parameter.parent else '?'}' is not in the"
                    " loop's buffers"
                )
        body_thunks = self.computation(body)
        body_thunks += moves(self.leaves(body.root_instruction), state)
        return WhileThunk(
            condition=tuple(condition_thunks),
            predicate=predicate[0],
            body=tuple(body_thunks),
            trip_count=self.trip_counts.get(inst.name),
        )

    def conditional(self, inst: Instruction) -> ConditionalThunk:
        selector_operand = inst.operands[0]
        (selector,) = self.leaves(selector_operand)
        selector_type = str(selector_operand.shape.element_type)
        if selector_type not in ("pred", "s32"):
            raise UnsupportedError(
                f"conditional {describe(inst)}: a {selector_type} selector (pred or s32 only)"
            )
        result = self.leaves(inst)
        branches = []
        for k, branch in enumerate(self._branches(inst)):
            for parameter in branch.parameters:
                if self.leaves(parameter) != self.leaves(inst.operands[k + 1]):
                    raise UnsupportedError(
                        f"conditional {describe(inst)}: branch '{branch.name}' does not read"
                        " its operand's bytes"
                    )
            thunks = self.computation(branch)
            thunks += moves(self.leaves(branch.root_instruction), result)
            branches.append(tuple(thunks))
        return ConditionalThunk(
            selector=selector, selector_type=selector_type, branches=tuple(branches)
        )

    @staticmethod
    def _branches(inst: Instruction) -> Sequence[Computation]:
        if inst.attributes.get("branch_computations") is not None:
            return list(inst.called_computations())
        return [inst.called("true_computation"), inst.called("false_computation")]


def expected_kernels(module: Module, target: Target) -> int:
    """How many kernels :func:`emit_thunks` will compile for ``module``, as far as can be
    told before it runs: its fusions of distinct :func:`_identity` (one kernel each),
    less those a GEMM library computes on ``target``.

    An estimate, and the same one for the same module: a library call that keeps
    heron's kernel beside it, or a kernel compiled again to update in place, is one
    more. The compile groups its kernels' last stage by it
    (:class:`heron.compiler.driver.StageBatches`).
    """
    identities = {
        _identity(inst)
        for inst in module.instructions()
        if inst.opcode == "fusion" and gemm_fusion(inst, target) is None
    }
    return len(identities)


def _identity(fusion: Instruction) -> tuple[object, ...]:
    """What a fusion's kernel depends on: its kind, shapes, backend config and body.

    The body by :func:`heron.compiler.fusion.fusion_cse.signature` (names
    ignored), so fusions that the fusion passes built apart but that compute
    the same thing share one kernel image.
    """
    from heron.compiler.fusion.fusion_cse import signature

    config = fusion.attributes.get("backend_config")
    return (
        str(fusion.attributes.get("kind")),
        str(fusion.shape),
        tuple(str(operand.shape) for operand in fusion.operands),
        str(getattr(config, "text", config)),
        signature(fusion.called("calls")),
    )


def _overlaps(arguments: Sequence[BufferSlice], n_inputs: int) -> set[tuple[int, int]]:
    """Pairs ``(i, j)``, ``i < j``, of kernel arguments whose bytes overlap, one of them written.

    ``arguments`` are the launch's slices, the ``n_inputs`` inputs first, then the
    outputs (written). Two inputs in one buffer are left alone: pointers that are
    only read may be ``noalias readonly`` both (nothing is written through either).
    """
    pairs = set()
    for j in range(n_inputs, len(arguments)):
        mine = arguments[j]
        for i, other in enumerate(arguments):
            if (
                i != j
                and other.allocation == mine.allocation
                and other.offset < mine.end
                and mine.offset < other.end
            ):
                pairs.add((min(i, j), max(i, j)))
    return pairs


def _dataflow_pairs(fusion: Instruction, n_inputs: int) -> set[tuple[int, int]]:
    """The in-place pairs the dataflow expects of ``fusion``'s kernel, as argument indices
    ``(parameter leaf, n_inputs + output)`` (``heron.hlo.buffers.in_place_operands``)."""
    first_leaf, count = [], 0
    for operand in fusion.operands:
        first_leaf.append(count)
        count += sum(1 for _ in operand.shape.leaves())
    return {(first_leaf[operand], n_inputs + leaf) for leaf, operand in in_place_operands(fusion)}


def _declared_pairs(aliases: Mapping[int, int], n_inputs: int) -> set[tuple[int, int]]:
    """A kernel's in-place pairs (``output_aliases``) as argument index pairs."""
    return {(source, n_inputs + out) for out, source in aliases.items()}


def _shared(overlaps: set[tuple[int, int]], in_place: set[tuple[int, int]]) -> frozenset[int]:
    """The arguments of the ``overlaps`` that are not an in-place pair of the kernel's."""
    return frozenset(k for pair in overlaps - in_place for k in pair)


def moves(sources: Sequence[BufferSlice], destinations: Sequence[BufferSlice]) -> list[Thunk]:
    """A ``CopyThunk`` for every leaf whose source slice is not its destination."""
    if len(sources) != len(destinations):
        raise UnsupportedError(
            f"cannot copy {len(sources)} leaves into {len(destinations)} (shapes differ)"
        )
    return [
        CopyThunk(source, destination)
        for source, destination in zip(sources, destinations, strict=True)
        if source != destination
    ]


def _slice(piece: HloSlice) -> BufferSlice:
    return BufferSlice(piece.allocation, piece.offset, piece.size)
