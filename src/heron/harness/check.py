"""Does a fusion's kernel compute what the reference evaluator computes? (``heron check``)

For each fusion of a file: compile it for a Target through a backend
(:func:`heron.compiler.compile_fusion`), run it on two
input sets (:mod:`~heron.harness.inputs`), compare every output with
``heron.hlo.evaluator`` within the tolerance of :mod:`~heron.harness.tolerance`,
and check how the kernel touched memory:

* every output element written at least once, and exactly once unless the
  emitter may write an element several times (reductions, scatter): the
  loop-family emitters are bijections from threads to elements;
* the RUN line's ``--bijection_outputs=H``: the outputs H produces (H a root,
  or reaching one through elementwise ops) written exactly once;
* ``--bijection_inputs=H:i``: H's operand i, when it comes from a fusion
  parameter (directly or through unary elementwise ops / bitcasts of the same
  element count), read exactly once per element; a bare ``--bijection_inputs=H``:
  every operand H reads element for element (a reduce's inputs, not its init
  values: :func:`bijection_operands`).

Write and read counts come from the interpreter device
(``InterpreterDevice.access_counts``); other devices cannot count, and the
report says so instead of guessing. A fusion too large to run on the host
(:data:`DEFAULT_MAX_ELEMENTS`) is refused with a message, not attempted.

The result is a :class:`CheckReport`: per fusion, the problems found
(:class:`Finding`, one per output and kind, with counts and the first
position) and a short greppable text (:meth:`CheckReport.text`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import attrs
import numpy as np

from heron.compiler.device_kernels import run_on_device, target_for_device
from heron.compiler.driver import CompiledKernel, compile_fusion
from heron.compiler.fusions import fusions_of, selected_fusions
from heron.harness.inputs import GENERATION_BYTES_PER_ELEMENT, INPUT_SET_NAMES, input_sets
from heron.harness.run_lines import RunLineError, RunSpec, parse_run_lines
from heron.harness.scatter_inputs import keep_scatter_promises
from heron.harness.tolerance import (
    ErrorBounds,
    OutputTolerance,
    describe_value,
    leaf_of,
    output_tolerance,
)
from heron.hlo import memory_budget, parse_module, print_module
from heron.hlo.errors import HloError
from heron.hlo.evaluator import evaluate_computation
from heron.hlo.fusion_outputs import output_roots
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.memory_budget import MemoryBudgetError
from heron.hlo.memory_layout import logical_elements, memory_dtype, memory_size
from heron.hlo.opcodes import Category, is_elementwise, opcode_info
from heron.hlo.parser import parse_module_file
from heron.hlo.shapes import ArrayShape, Shape, TupleShape
from heron.runtime.core.device import DeviceError, DeviceLimitError
from heron.target import Target

__all__ = [
    "DEFAULT_MAX_ELEMENTS",
    "CheckOptions",
    "CheckReport",
    "Finding",
    "FusionReport",
    "bijection_operands",
    "check_file",
    "check_fusion",
    "check_fusions",
    "element_counts",
    "shrunk_fusion",
]

#: Largest buffer (elements) a check runs: the interpreter and the evaluator run on the host.
DEFAULT_MAX_ELEMENTS = 1 << 26


@attrs.frozen
class CheckOptions:
    """What ``heron check`` was asked: backend, one fusion or all, seed, size limit, target.

    ``target`` is the device the kernels are compiled for; None: the default
    for the device they run on (:func:`heron.target_for_device`: h100
    for the interpreter's 32-lane warps, mi300x for 64).
    """

    backend: str = "interpreter"
    fusion: str | None = None
    seed: int = 0
    max_elements: int = DEFAULT_MAX_ELEMENTS
    target: Target | None = None


@attrs.frozen
class Finding:
    """One problem: a kind, where (output / input, input set), how many, the first position.

    ``kind`` is one of ``values`` (differs from the reference), ``unwritten``,
    ``written-more-than-once``, ``input-reads`` (a bijection input read other
    than once), ``error`` (sanitizer, unsupported op, compile failure),
    ``refused`` (too large), ``run-line`` (a RUN-line flag that does not fit
    the fusion).
    """

    kind: str
    message: str
    output: int | None = None
    input_set: str | None = None
    count: int = 0
    total: int = 0
    position: tuple[int, ...] | None = None


@attrs.define
class FusionReport:
    """What checking one fusion found."""

    name: str
    backend: str
    emitter: str | None = None
    input_sets: int = 0
    outputs: int = 0
    findings: list[Finding] = attrs.field(factory=list)
    #: What was verified beyond values (bijections), or could not be measured.
    notes: list[str] = attrs.field(factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def refused(self) -> bool:
        """Not checked because heron refused it (too large, a limit, cannot compile)."""
        return any(f.kind == "refused" for f in self.findings)

    def lines(self, label: str) -> list[str]:
        emitter = f"{self.emitter} emitter, " if self.emitter else ""
        outputs = f"{self.outputs} output{'s' if self.outputs != 1 else ''}"
        sets = f"{self.input_sets} input set{'s' if self.input_sets != 1 else ''}"
        verdict = "OK" if self.ok else ("REFUSED" if self.refused else "FAILED")
        head = f"{label}: fusion '{self.name}' ({emitter}{self.backend}): {sets}, {outputs}"
        return [
            f"{head}: {verdict}",
            *(f"  {finding.message}" for finding in self.findings),
            *(f"  {note}" for note in self.notes),
        ]


@attrs.define
class CheckReport:
    """The check of one file (or a list of fusions): per-fusion reports and file-level problems."""

    label: str
    fusions: list[FusionReport] = attrs.field(factory=list)
    errors: list[str] = attrs.field(factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors and all(f.ok for f in self.fusions)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    @property
    def findings(self) -> list[Finding]:
        return [finding for fusion in self.fusions for finding in fusion.findings]

    def text(self) -> str:
        lines = [f"{self.label}: {error}" for error in self.errors]
        for fusion in self.fusions:
            lines += fusion.lines(self.label)
        count = len(self.fusions)
        plural = "fusion" if count == 1 else "fusions"
        refused = [f"'{f.name}'" for f in self.fusions if f.refused]
        failed = [f"'{f.name}'" for f in self.fusions if not f.ok and not f.refused]
        if self.ok:
            lines.append(f"check: {count} {plural}, all agree")
        elif failed or refused:
            parts = [f"{len(failed)} failed: {', '.join(failed)}"] if failed else []
            parts += [f"{len(refused)} refused: {', '.join(refused)}"] if refused else []
            lines.append(f"check: {count} {plural}, {'; '.join(parts)}")
        else:
            lines.append(f"check: {count} {plural}, {len(self.errors)} error(s) in the file")
        return "\n".join(lines)


# -- counts per element ------------------------------------------------------------------


def element_counts(
    byte_counts: np.ndarray, bit_counts: np.ndarray | None, shape: ArrayShape
) -> np.ndarray:
    """Per logical element of ``shape``: how often all of it was accessed.

    An element counts the minimum over its bytes (a half-written f32 is not
    written). Sub-byte types count the minimum over their bits, from the
    per-bit counts of packed stores where a byte has any, else from the
    byte's own count (a whole-byte store).
    """
    element = shape.element_type
    count = shape.num_elements
    size = memory_size(shape)
    if element.is_sub_byte:
        width = element.bit_width
        per_bit = np.repeat(byte_counts[:size, None], 8, axis=1)
        if bit_counts is not None:
            packed = bit_counts[:size].any(axis=1)
            per_bit = np.where(packed[:, None], bit_counts[:size], per_bit)
        flat = per_bit.reshape(-1)[: count * width].reshape(count, width).min(axis=1)
    else:
        itemsize = memory_dtype(element).itemsize
        flat = byte_counts[: count * itemsize].reshape(count, itemsize).min(axis=1)
    return logical_elements(flat, shape)


# -- the fusion's structure: outputs, heroes ---------------------------------------------


def _array_leaves(shape: Shape) -> list[ArrayShape]:
    return list(shape.leaves()) if isinstance(shape, TupleShape) else [shape]


def _largest_buffer(fusion: Instruction) -> tuple[str, int]:
    """(which buffer, elements) of the fusion's largest input or output."""
    buffers = [
        (f"parameter {k} '{operand.name}'", leaf)
        for k, operand in enumerate(fusion.operands)
        for leaf in _array_leaves(operand.shape)
    ]
    buffers += [(f"output {k}", leaf) for k, leaf in enumerate(_array_leaves(fusion.shape))]
    what, shape = max(buffers, key=lambda item: item[1].num_elements)
    return f"{what} ({shape})", shape.num_elements


def _through_elementwise(source: Instruction) -> set[int]:
    """ids of ``source`` and of everything it reaches through elementwise ops."""
    seen: set[int] = set()
    stack = [source]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if current is source or is_elementwise(current.opcode):
            stack.extend(current.operands)
    return seen


def _is_unary_passthrough(instruction: Instruction) -> bool:
    """Unary elementwise ops and bitcasts that keep the element count (one element in, one out)."""
    info = opcode_info(instruction.opcode)
    if len(instruction.operands) != 1 or info is None:
        return False
    if info.category is Category.ELEMENTWISE_UNARY:
        return True
    if instruction.opcode == "bitcast":
        (operand,) = instruction.operands
        return (
            isinstance(operand.shape, ArrayShape)
            and isinstance(instruction.shape, ArrayShape)
            and operand.shape.num_elements == instruction.shape.num_elements
        )
    return False


def _find_instruction(computation: Computation, name: str) -> Instruction | None:
    for instruction in computation.instructions:
        if instruction.name == name:
            return instruction
    return None


@attrs.frozen
class _InputBijection:
    """A RUN line's ``H:i`` resolved: the fusion parameter it reads, or why it is not measured."""

    label: str  # "H:i"
    parameter: int | None
    why_not: str = ""


@attrs.define
class _Plan:
    """What a fusion's RUN-line flags ask, resolved against its computation."""

    outputs: dict[str, list[int]] = attrs.field(factory=dict)
    inputs: list[_InputBijection] = attrs.field(factory=list)
    errors: list[str] = attrs.field(factory=list)


def bijection_operands(hero: Instruction) -> tuple[int, ...]:
    """The operands of ``hero`` its threads read element for element: those a
    ``--bijection_inputs`` flag may name, all of them for a bare ``HERO``.

    A reduce's init values are not among them: XLA's reduction emitters read the
    init values once per thread, to start its accumulator, and give them no
    thread-to-input indexing at all ("we don't have indexing for the init values",
    ``ReductionFusion::ComputeThreadIdToInputIndexing``); heron's read them once per
    thread too. A scalar init parameter is read by every thread, as in XLA.
    """
    if hero.opcode == "reduce":
        return tuple(range(len(hero.operands) // 2))
    return tuple(range(len(hero.operands)))


def _plan(computation: Computation, spec: RunSpec, sources: list[Instruction]) -> _Plan:
    plan = _Plan()
    reach = [_through_elementwise(source) for source in sources]
    for hero_name in spec.bijection_outputs:
        hero = _find_instruction(computation, hero_name)
        if hero is None:
            plan.errors.append(f"--bijection_outputs={hero_name}: no instruction '{hero_name}'")
            continue
        produced = [k for k, ids in enumerate(reach) if id(hero) in ids]
        if not produced:
            plan.errors.append(
                f"--bijection_outputs={hero_name}: '{hero_name}' ({hero.opcode}) reaches no"
                " output through elementwise ops"
            )
        plan.outputs[hero_name] = produced
    for hero_name, numbers in spec.bijection_inputs.items():
        hero = _find_instruction(computation, hero_name)
        if hero is None:
            plan.errors.append(f"--bijection_inputs={hero_name}: no instruction '{hero_name}'")
            continue
        read = bijection_operands(hero)
        for number in numbers or read:
            label = f"{hero_name}:{number}"
            if number >= len(hero.operands):
                plan.errors.append(
                    f"--bijection_inputs={label}: '{hero_name}' ({hero.opcode}) has"
                    f" {len(hero.operands)} operands"
                )
                continue
            if number not in read:
                plan.errors.append(
                    f"--bijection_inputs={label}: operand {number} of '{hero_name}'"
                    f" ({hero.opcode}) is an init value, read once per thread, not once"
                    f" per element (the operands read element for element:"
                    f" {', '.join(map(str, read))})"
                )
                continue
            plan.inputs.append(_resolve_input(label, hero.operands[number]))
    return plan


def _resolve_input(label: str, operand: Instruction) -> _InputBijection:
    current = operand
    while current.opcode != "parameter" and _is_unary_passthrough(current):
        current = current.operands[0]
    if current.opcode == "parameter" and current.parameter_number is not None:
        return _InputBijection(label, current.parameter_number)
    return _InputBijection(
        label,
        None,
        f"comes from {current.opcode} '{current.name}', not a fusion parameter",
    )


# -- comparing and counting ----------------------------------------------------------------


def _position(flat_index: int, dims: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat_index, tuple(dims))) if dims else ()


def _leaves(value) -> list[np.ndarray]:
    if isinstance(value, tuple):
        return [leaf for element in value for leaf in _leaves(element)]
    return [np.asarray(value)]


def _output_label(k: int, shape: ArrayShape, source: Instruction) -> str:
    return f"output {k} ({shape} from {source.opcode} '{source.name}')"


def _compare(
    k: int,
    label: str,
    set_name: str,
    kernel: np.ndarray,
    expected: np.ndarray,
    tolerance: OutputTolerance,
    skip: np.ndarray | None,
) -> Finding | None:
    """A ``values`` finding for output ``k``, or None when it agrees (``skip``: unwritten)."""
    ulps = tolerance.ulps
    found = tolerance.mismatches(kernel, expected)
    indices, distances = found.indices, found.distances
    if skip is not None and indices.size:
        keep = ~skip.reshape(-1)[indices]
        indices, distances = indices[keep], distances[keep]
    if indices.size == 0:
        return None
    first = int(indices[0])
    position = _position(first, expected.shape)
    how = "bitwise" if ulps == 0 else f"by more than {ulps} ulps"
    if tolerance.reordered:
        how += ", beyond the reassociation bounds"
    tail = ""
    if ulps or np.issubdtype(expected.dtype, np.floating) and expected.dtype.itemsize > 1:
        first_distance = int(distances[0])
        what = f"{first_distance} ulps" if first_distance else "zeros of opposite sign"
        tail = f" ({what}; max {int(distances.max())})"
    message = (
        f"{label}, {set_name}: {indices.size} of {expected.size} elements differ ({how});"
        f" first at {position}: kernel {describe_value(kernel, first)}, reference"
        f" {describe_value(expected, first)}{tail}"
    )
    return Finding("values", message, k, set_name, int(indices.size), expected.size, position)


def _write_findings(
    k: int, label: str, set_name: str, counts: np.ndarray, once: bool, why_once: str
) -> list[Finding]:
    findings = []
    unwritten = np.flatnonzero(counts.reshape(-1) == 0)
    total = counts.size
    if unwritten.size:
        position = _position(int(unwritten[0]), counts.shape)
        findings.append(
            Finding(
                "unwritten",
                f"{label}, {set_name}: {unwritten.size} of {total} elements never written;"
                f" first at {position}",
                k,
                set_name,
                int(unwritten.size),
                total,
                position,
            )
        )
    if once:
        over = np.flatnonzero(counts.reshape(-1) > 1)
        if over.size:
            first = int(over[0])
            position = _position(first, counts.shape)
            findings.append(
                Finding(
                    "written-more-than-once",
                    f"{label}, {set_name}: {over.size} of {total} elements written more than"
                    f" once ({why_once}); first at {position}, written"
                    f" {int(counts.reshape(-1)[first])} times",
                    k,
                    set_name,
                    int(over.size),
                    total,
                    position,
                )
            )
    return findings


def _read_finding(
    bijection: _InputBijection,
    parameter: Instruction,
    set_name: str,
    counts: np.ndarray,
) -> Finding | None:
    wrong = np.flatnonzero(counts.reshape(-1) != 1)
    if wrong.size == 0:
        return None
    first = int(wrong[0])
    position = _position(first, counts.shape)
    return Finding(
        "input-reads",
        f"bijection input {bijection.label}: parameter {bijection.parameter}"
        f" '{parameter.name}' ({parameter.shape}), {set_name}: {wrong.size} of {counts.size}"
        f" elements not read exactly once; first at {position}, read"
        f" {int(counts.reshape(-1)[first])} times",
        None,
        set_name,
        int(wrong.size),
        int(counts.size),
        position,
    )


# -- one fusion ----------------------------------------------------------------------------


@attrs.define
class _FusionCheck:
    """The state of checking one fusion (the steps of :func:`check_fusion`)."""

    fusion: Instruction
    kernel: CompiledKernel
    report: FusionReport
    plan: _Plan
    sources: list[Instruction]
    bounds: ErrorBounds
    reported: set[tuple[int | None, str, str]] = attrs.field(factory=set)

    def add(self, finding: Finding | None, key: str = "") -> None:
        """Record ``finding`` once per (output, kind, key): the same gap in both sets is one."""
        if finding is None:
            return
        identity = (finding.output, finding.kind, key)
        if finding.kind != "values" and identity in self.reported:
            return
        self.reported.add(identity)
        self.report.findings.append(finding)


def check_fusion(
    fusion: Instruction,
    device,
    options: CheckOptions | None = None,
    spec: RunSpec | None = None,
    number: int = 0,
    name: str | None = None,
) -> FusionReport:
    """Check one fusion on ``device`` (see the module docstring); never raises for kernel bugs.

    ``number`` (the fusion's position in its file) varies the inputs between
    fusions of one file. ``name`` is how the report names the fusion (default:
    the fusion instruction's name).
    """
    options = options or CheckOptions()
    spec = spec or RunSpec()
    report = FusionReport(name or fusion.name, options.backend)
    computation: Computation = fusion.called("calls")
    report.outputs = len(_array_leaves(fusion.shape))
    what, elements = _largest_buffer(fusion)
    if elements > options.max_elements:
        host = "the interpreter" if options.backend == "interpreter" else "the host evaluator"
        report.findings.append(
            Finding(
                "refused",
                f"too large for {host}: {what} has {elements} elements, more than"
                f" --max-elements {options.max_elements}",
                total=elements,
            )
        )
        return report
    try:
        target = target_for_device(device, options.backend, options.target)
        kernel = compile_fusion(fusion, target, options.backend)
    except HloError as exc:
        # A fusion heron cannot compile is refused, as `heron compile` refuses it (exit 2).
        report.findings.append(Finding("refused", f"compile: {exc}"))
        return report
    report.emitter = kernel.emitter
    sources = list(output_roots(computation))
    plan = _plan(computation, spec, sources)
    report.findings += [Finding("run-line", f"RUN line: {error}") for error in plan.errors]
    bounds = ErrorBounds(spec.abs_error_bound, spec.rel_error_bound)
    state = _FusionCheck(fusion, kernel, report, plan, sources, bounds)
    if len(kernel.output_shapes) != len(sources) or len(kernel.input_shapes) != len(
        computation.parameters
    ):
        report.findings.append(
            Finding(
                "error",
                f"the kernel has {len(kernel.input_shapes)} inputs and"
                f" {len(kernel.output_shapes)} outputs; the fusion"
                f" {len(computation.parameters)} parameters and {len(sources)} outputs",
            )
        )
        return report
    _run_sets(state, device, options, number)
    _bijection_notes(state, device)
    return report


def _kind_of(exc: Exception) -> str:
    """``refused`` for an allocation over the memory budget or a launch past a limit the
    user set (the input's size, not a kernel's fault: exit 2, like a fusion over
    --max-elements), ``error`` otherwise."""
    return "refused" if isinstance(exc, MemoryBudgetError | DeviceLimitError) else "error"


def _host_bytes(shape: ArrayShape) -> int:
    """Bytes of ``shape`` as a numpy array on the host (a sub-byte element takes a byte)."""
    return shape.num_elements * np.dtype(shape.element_type.numpy_dtype).itemsize


def host_bytes_of_a_check(kernel: CompiledKernel) -> int:
    """Host bytes one check of ``kernel`` holds at once, besides the device's buffers.

    Both input sets (made before the first runs), the generator's temporaries
    while it draws the largest input (:data:`GENERATION_BYTES_PER_ELEMENT`), and
    per output the kernel's result copied back and the reference's result.
    """
    inputs = [_host_bytes(shape) for shape in kernel.input_shapes]
    outputs = [_host_bytes(shape) for shape in kernel.output_shapes]
    largest = max((shape.num_elements for shape in kernel.input_shapes), default=0)
    sets = len(INPUT_SET_NAMES)
    return sets * sum(inputs) + largest * GENERATION_BYTES_PER_ELEMENT + 2 * sum(outputs)


def _run_sets(state: _FusionCheck, device, options: CheckOptions, number: int) -> None:
    need = host_bytes_of_a_check(state.kernel)
    what = f"the input sets and results of checking '{state.report.name}'"
    try:
        with memory_budget.reserve(need, what):
            _run_sets_within_budget(state, device, options, number)
    except MemoryBudgetError as exc:
        state.report.findings.append(Finding("refused", str(exc)))


def _run_sets_within_budget(
    state: _FusionCheck, device, options: CheckOptions, number: int
) -> None:
    kernel, report = state.kernel, state.report
    computation = state.fusion.called("calls")
    rng = np.random.default_rng([options.seed, number])
    sets = {
        name: keep_scatter_promises(computation, args, rng)
        for name, args in input_sets(list(kernel.input_shapes), rng).items()
    }
    report.input_sets = len(sets)
    try:
        loaded = device.load_kernel(kernel.image)
    except DeviceError as exc:
        report.findings.append(Finding("error", str(exc)))
        return
    for set_name, args in sets.items():
        try:
            run = run_on_device(device, kernel, args, loaded=loaded)
        except (DeviceError, HloError) as exc:
            report.findings.append(Finding(_kind_of(exc), f"{set_name}: {exc}", input_set=set_name))
            return
        try:
            expected = _leaves(evaluate_computation(computation, args))
        except HloError as exc:
            report.findings.append(
                Finding(_kind_of(exc), f"{set_name}: the reference evaluator failed: {exc}")
            )
            return
        _check_run(state, set_name, run, expected, args)


def _check_run(
    state: _FusionCheck, set_name: str, run, expected: list[np.ndarray], args: list
) -> None:
    kernel, plan = state.kernel, state.plan
    once_by_emitter = kernel.writes_each_element_once  # the emitter's own promise
    flagged = {k: hero for hero, outputs in plan.outputs.items() for k in outputs}
    computation = state.fusion.called("calls")
    for k, shape in enumerate(kernel.output_shapes):
        source = state.sources[k]
        label = _output_label(k, shape, source)
        unwritten = None
        counts = run.output_counts[k]
        if counts is not None:
            per_element = element_counts(counts.writes, counts.bit_writes, shape)
            # An in-place output starts as its input: unwritten elements keep that value.
            in_place = k in kernel.output_aliases
            unwritten = None if in_place else per_element == 0
            why = (
                f"--bijection_outputs={flagged[k]}"
                if k in flagged
                else f"the {kernel.emitter} emitter writes each element once"
            )
            once = once_by_emitter or k in flagged
            for finding in _write_findings(k, label, set_name, per_element, once, why):
                if not (in_place and finding.kind == "unwritten"):
                    state.add(finding)
        tolerance = output_tolerance(
            source,
            shape.element_type,
            state.bounds,
            reordering=kernel.sums_in_its_own_order,
            reduction=(source, computation, args),
            tf32=kernel.target.tf32,  # the Target the kernel was compiled for
            leaf=leaf_of(state.sources, k),
            # Edge inputs are not compared for a reordered sum: no bound to evaluate (an
            # arg-reduction's NaN ties are read from them all the same).
            summation_bounds=set_name != "edge inputs",
        )
        if tolerance.reordered and set_name == "edge inputs":
            # A float reduction: the order of the sum is the kernel's.
            note = (
                f"{label}: float reduction compared on moderate inputs only (on edge"
                " inputs the summation order decides overflow and NaN)"
            )
            if note not in state.report.notes:
                state.report.notes.append(note)
            continue
        state.add(_compare(k, label, set_name, run.outputs[k], expected[k], tolerance, unwritten))
    for bijection in plan.inputs:
        if bijection.parameter is None:
            continue
        counts = run.input_counts[bijection.parameter]
        shape = kernel.input_shapes[bijection.parameter]
        if counts is None or shape.element_type.is_sub_byte:
            continue
        per_element = element_counts(counts.reads, None, shape)
        parameter = computation.parameters[bijection.parameter]
        state.add(_read_finding(bijection, parameter, set_name, per_element), bijection.label)


def _bijection_notes(state: _FusionCheck, device) -> None:
    """The report's one line on what was verified (or not) beyond values."""
    kernel, plan, report = state.kernel, state.plan, state.report
    counting = hasattr(device, "access_counts")
    if not counting:
        report.notes.append(f"write coverage not measurable on {kernel.backend}")
    parts = []
    for bijection in plan.inputs:
        if bijection.parameter is None:
            parts.append(f"input {bijection.label} not measured ({bijection.why_not})")
        elif not counting:
            parts.append(f"input {bijection.label} not measurable on {kernel.backend}")
        elif kernel.input_shapes[bijection.parameter].element_type.is_sub_byte:
            element = kernel.input_shapes[bijection.parameter].element_type.name.lower()
            parts.append(
                f"input {bijection.label} ({element}): read counts per element not measurable"
                " for sub-byte types"
            )
        elif not any(f.kind == "input-reads" for f in report.findings):
            parts.append(f"inputs {bijection.label} read once")
    for hero, outputs in plan.outputs.items():
        if not outputs:
            continue
        if not counting:
            parts.append(f"outputs {hero} not measurable on {kernel.backend}")
        elif not any(
            f.kind in ("unwritten", "written-more-than-once") and f.output in outputs
            for f in report.findings
        ):
            parts.append(f"outputs {hero} written once")
    if parts and report.ok:
        report.notes.append("bijection: " + ", ".join(parts))
    elif parts:
        report.notes.append("bijection (where not failed above): " + ", ".join(parts))


# -- files and lists of fusions -----------------------------------------------------------


def _create_device(backend: str, target: Target | None):
    """The backend's device for ``target``; PluginError (saying why) when it is not available."""
    from heron.runtime.core.registry import default_backends

    return default_backends().create_device(backend, target)


def check_fusions(
    fusions: Sequence[Instruction],
    label: str,
    options: CheckOptions | None = None,
    spec: RunSpec | None = None,
    device=None,
    module: Module | None = None,
) -> CheckReport:
    """Check ``fusions`` (of one file called ``label``) on a device of ``options.backend``.

    With ``module`` (the fusions' module) a corpus file's fusion is named after
    its fused computation (``neg``), not the synthesised entry's ``fusion``.
    """
    options = options or CheckOptions()
    spec = spec or RunSpec()
    report = CheckReport(label)
    if options.fusion is None:
        for hero in sorted(spec.heroes):
            if not any(_find_instruction(f.called("calls"), hero) for f in fusions):
                names = ", ".join(f"'{f.name}'" for f in fusions)
                report.errors.append(
                    f"RUN line names hero '{hero}', which is in no fusion ({names})"
                )
    if device is None:
        device = _create_device(options.backend, options.target)
    for number, fusion in enumerate(fusions):
        computation = fusion.called("calls")
        own = RunSpec(
            bijection_inputs={
                hero: operands
                for hero, operands in spec.bijection_inputs.items()
                if _find_instruction(computation, hero)
            },
            bijection_outputs=tuple(
                hero for hero in spec.bijection_outputs if _find_instruction(computation, hero)
            ),
            abs_error_bound=spec.abs_error_bound,
            rel_error_bound=spec.rel_error_bound,
            correctness_test=spec.correctness_test,
        )
        name = fusion.name
        if module is not None and module.fusion_under_test == computation.name:
            name = computation.name
        report.fusions.append(check_fusion(fusion, device, options, own, number, name))
    return report


def check_file(path: str | Path, options: CheckOptions | None = None, device=None) -> CheckReport:
    """Check every fusion of the HLO file at ``path`` (or ``options.fusion`` only).

    Raises ``HloError`` for a file that does not parse or an unknown fusion
    name, and ``PluginError`` when the backend is not available here (its
    message says why): those are errors in the request, not in a kernel.
    """
    options = options or CheckOptions()
    file = Path(path)
    module = parse_module_file(file)
    report_label = file.name
    try:
        spec = parse_run_lines(file.read_text(), file.name)
    except RunLineError as exc:
        report = CheckReport(report_label, errors=[str(exc)])
        return report
    fusions = selected_fusions(module, options.fusion)
    return check_fusions(fusions, report_label, options, spec, device, module)


# -- a small copy of a huge fusion ----------------------------------------------------------

#: Ops whose meaning does not depend on the dims of their (same-shaped) operands.
_SHAPE_FREE = frozenset(
    {"parameter", "constant", "broadcast", "convert", "add", "multiply", "negate", "subtract"}
)
SMALL_DIMS = (2, 3, 5, 3, 7, 2)


def shrunk_fusion(module: Module, fusion: Instruction) -> Instruction:
    """A copy of ``fusion`` with the same ops and rank but small dims (for huge fusions).

    Only for fusions of elementwise ops and broadcasts of scalars, where every
    array has the root's dims, so that their meaning does not depend on the
    sizes; anything else raises ``ValueError`` naming the instruction.
    """
    computation: Computation = fusion.called("calls")
    root = computation.root_instruction
    if not isinstance(root.shape, ArrayShape):
        raise ValueError(f"cannot shrink '{fusion.name}': it has several outputs ('{root.name}')")
    dims = root.array_shape.dims
    for instruction in computation.instructions:
        shape = instruction.shape
        if instruction.opcode not in _SHAPE_FREE:
            raise ValueError(f"cannot shrink {instruction.opcode} '{instruction.name}'")
        if not isinstance(shape, ArrayShape) or shape.dims not in ((), dims):
            raise ValueError(f"cannot shrink '{instruction.name}' of shape {shape}")
        scalar_operand = all(o.array_shape.dims == () for o in instruction.operands)
        if instruction.opcode == "broadcast" and not scalar_operand:
            raise ValueError(f"cannot shrink '{instruction.name}': only scalar broadcasts")
        if instruction.opcode == "constant" and shape.dims != ():
            raise ValueError(f"cannot shrink '{instruction.name}': only scalar constants")
    small = SMALL_DIMS[: len(dims)]
    old = "[" + ",".join(str(d) for d in dims) + "]"
    new = "[" + ",".join(str(d) for d in small) + "]"
    text = print_module(module)
    if old not in text:
        raise ValueError(f"cannot shrink: {old} is not in the printed module")
    shrunk = parse_module(re.sub(re.escape(old), new, text), source="shrunk")
    (small_fusion,) = fusions_of(shrunk)
    return small_fusion
