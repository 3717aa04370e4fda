"""Executables of the corpus: thunk emission, the artefact, ``heron compile --executable``.

Every program of ``programs/index.json`` is compiled once per test session
(:func:`heron.compiler.executable.compile_program`, kernel images for the
interpreter) and checked against what the compiler's own analyses say, not
against what the emitter wrote:

- the artefact builds (its consistency checks), saves, and loads back equal;
- every fusion of every sequential computation has exactly one kernel thunk,
  whose arguments are the buffer assignment's slices of the fusion's operand
  leaves and result leaves;
- while and conditional instructions are while and conditional thunks, in the
  computation they belong to, with the condition's root as the predicate;
- the allocation table is the assignment's (sizes, kinds, parameter numbers),
  every result leaf has an output allocation of its own, constants hold the
  literal's bytes, and peak memory is the assignment's;
- programs no emitter can run are refused with the instruction named;
- every artefact, saved and loaded back, runs through the thunk executor
  (:mod:`heron.runtime.core.executor`) on the interpreter and gives XLA:CPU's
  outputs (``outputs.npz``, tests/test_programs.py's tolerance), with command
  buffers and without (the same bytes), holding exactly the allocations' bytes.

The kernels are compiled with this tree's GEMM emitter, as tests/test_programs.py does.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from heron.compiler import Target
from heron.compiler.executable import CompiledExecutable, compile_program
from heron.hlo.buffers.dataflow import sequential_computations
from heron.hlo.errors import UnsupportedError
from heron.hlo.memory_layout import memory_bytes, to_memory
from heron.hlo.parser import parse_module, parse_module_file
from heron.runtime.core.artefact import Artefact
from heron.runtime.core.thunks import (
    ConditionalThunk,
    CopyThunk,
    KernelThunk,
    Thunk,
    WhileThunk,
    walk,
)

ROOT = Path(__file__).resolve().parents[1]


def _load_programs_tests():
    spec = importlib.util.spec_from_file_location(
        "_heron_programs_tests", ROOT / "tests" / "test_programs.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


PROGRAMS = _load_programs_tests()
NAMES = PROGRAMS.NAMES

#: program -> the opcode an executable is refused for (what no emitter runs yet).
REFUSED: dict[str, str] = {}
#: What no emitter runs yet: an fft (a cuFFT call in XLA).
WITH_FFT = """\
HloModule jit_fft
ENTRY main {
  a = c64[2,8]{1,0} parameter(0)
  ROOT c = c64[2,8]{1,0} fft(a), fft_type=FFT, fft_length={8}
}
"""
#: Programs with loops and conditionals (their thunks are checked by kind).
CONTROL_FLOW = {
    # cond's two cheap branches become a select (conditional-simplifier): no conditional.
    "cond": "select",
    "switch": "conditional",
    "dropout_threefry": "while",
    "fori_loop_newton_sqrt": "while",
    "scan_cumulative_max": "while",
    "scan_rnn": "while",
    "while_loop_collatz": "while",
}


class _Session:
    """Every program compiled once: the executable, or the error it was refused with."""

    def __init__(self) -> None:
        self.target = Target.preset("h100")
        self.compile_fusion = PROGRAMS._compiler()
        self.results: dict[str, CompiledExecutable | Exception] = {}
        self.seconds: dict[str, float] = {}

    def get(self, name: str) -> CompiledExecutable:
        if name not in self.results:
            start = time.perf_counter()
            try:
                module = parse_module_file(PROGRAMS.PROGRAMS / name / "module.hlo")
                self.results[name] = compile_program(
                    module, self.target, ("interpreter",), compiler=self.compile_fusion
                )
            except UnsupportedError as error:
                self.results[name] = error
            self.seconds[name] = time.perf_counter() - start
        result = self.results[name]
        if isinstance(result, Exception):
            raise result
        return result


@pytest.fixture(scope="session")
def executables() -> _Session:
    return _Session()


RUNNABLE = [n for n in NAMES if n not in REFUSED]


def test_the_tables_name_programs() -> None:
    assert set(REFUSED) <= set(NAMES) and set(CONTROL_FLOW) <= set(NAMES)
    tagged = {e["name"] for e in PROGRAMS.INDEX["programs"] if "control-flow" in e["tags"]}
    assert tagged == set(CONTROL_FLOW)


def test_refused_programs_name_the_instruction(executables: _Session) -> None:
    """Every corpus program compiles (REFUSED is empty); what no emitter runs is refused
    with the instruction named: an fft."""
    with pytest.raises(UnsupportedError, match=r"cannot run instruction 'c' \(fft,"):
        compile_program(
            parse_module(WITH_FFT),
            executables.target,
            ("interpreter",),
            compiler=executables.compile_fusion,
        )


@pytest.mark.parametrize("name", RUNNABLE)
def test_the_artefact_saves_and_loads_back_equal(executables, name, tmp_path) -> None:
    artefact = executables.get(name).artefact
    path = tmp_path / f"{name}.heron"
    artefact.save(path)
    loaded = Artefact.load(path)
    assert loaded == artefact
    assert loaded.backends == ("interpreter",)
    assert loaded.optimized_hlo is not None and "is_scheduled=true" in loaded.optimized_hlo


def _slices(assignment, inst) -> list[tuple[int, int, int]]:
    return [(s.allocation, s.offset, s.size) for s in assignment.leaf_slices(inst)]


def _as_tuples(thunk: KernelThunk) -> list[tuple[int, int, int]]:
    return [(s.allocation, s.offset, s.size) for s in thunk.arguments]


@pytest.mark.parametrize("name", RUNNABLE)
def test_kernel_thunks_take_the_assignments_slices(executables, name) -> None:
    compiled = executables.get(name)
    assignment = compiled.assignment
    fusions = [
        inst
        for computation in sequential_computations(compiled.module)
        for inst in computation.instructions
        if inst.opcode == "fusion"
    ]
    kernel_thunks = [t for t in walk(compiled.artefact.program) if isinstance(t, KernelThunk)]
    assert len(kernel_thunks) == len(fusions) >= 1
    kernel_of = compiled.program.kernel_of
    assert sorted(kernel_of) == sorted(f.name for f in fusions)
    assert len({e.key for e in compiled.program.kernels}) == len(compiled.program.kernels)
    assert set(kernel_of.values()) == {e.key for e in compiled.program.kernels}
    remaining = list(kernel_thunks)
    for fusion in _ordered(compiled.module, "fusion"):
        # Kernel thunks come in schedule order, the fusions' order in a walk of the module.
        thunk = remaining.pop(0)
        assert thunk.image_key == kernel_of[fusion.name]
        inputs = [piece for operand in fusion.operands for piece in _slices(assignment, operand)]
        outputs = _slices(assignment, fusion)
        got = _as_tuples(thunk)
        assert got[: len(inputs)] == inputs, f"{fusion.name}: input slices"
        assert got[len(inputs) :] == outputs, f"{fusion.name}: output slices"


def _computation_thunks(thunks: tuple[Thunk, ...]) -> list[Thunk]:
    return [t for t in thunks if isinstance(t, (WhileThunk, ConditionalThunk))]


@pytest.mark.parametrize("name", RUNNABLE)
def test_control_flow_becomes_while_and_conditional_thunks(executables, name) -> None:
    compiled = executables.get(name)
    assignment = compiled.assignment
    instructions = [
        inst
        for computation in sequential_computations(compiled.module)
        for inst in computation.instructions
    ]
    loops = [i for i in instructions if i.opcode == "while"]
    conditionals = [i for i in instructions if i.opcode == "conditional"]
    thunks = list(walk(compiled.artefact.program))
    whiles = [t for t in thunks if isinstance(t, WhileThunk)]
    branches = [t for t in thunks if isinstance(t, ConditionalThunk)]
    assert len(whiles) == len(loops) and len(branches) == len(conditionals)
    if CONTROL_FLOW.get(name) == "select":
        assert not loops and not conditionals, name
    elif name in CONTROL_FLOW:
        assert loops if CONTROL_FLOW[name] == "while" else conditionals, name
    # In schedule order: the n-th while thunk is the n-th while of a walk of the module.
    for loop, thunk in zip(_ordered(compiled.module, "while"), whiles, strict=True):
        (predicate,) = _slices(assignment, loop.called("condition").root_instruction)
        assert (thunk.predicate.allocation, thunk.predicate.offset, thunk.predicate.size) == (
            predicate
        )
        assert thunk.body, f"{loop.name}: an empty body"
    for conditional, thunk in zip(_ordered(compiled.module, "conditional"), branches, strict=True):
        (selector,) = _slices(assignment, conditional.operands[0])
        assert (thunk.selector.allocation, thunk.selector.offset, thunk.selector.size) == selector
        assert len(thunk.branches) == len(conditional.called_computations())


def _ordered(module, opcode: str) -> list:
    """Instructions of ``opcode`` in the order a walk of the thunk program meets them."""
    found = []

    def visit(computation) -> None:
        for inst in computation.instructions:
            if inst.opcode == opcode:
                found.append(inst)
            if inst.opcode == "while":
                visit(inst.called("condition"))
                visit(inst.called("body"))
            elif inst.opcode == "conditional":
                for branch in inst.called_computations():
                    visit(branch)

    visit(module.entry)
    return found


def test_a_counted_loop_has_its_trip_count(executables) -> None:
    (loop,) = [
        t
        for t in walk(executables.get("fori_loop_newton_sqrt").artefact.program)
        if isinstance(t, WhileThunk)
    ]
    text = (PROGRAMS.PROGRAMS / "fori_loop_newton_sqrt" / "module.hlo").read_text()
    assert re.search(r"constant\(8\)", text)
    assert loop.trip_count == 8
    (collatz,) = [
        t
        for t in walk(executables.get("while_loop_collatz").artefact.program)
        if isinstance(t, WhileThunk)
    ]
    assert collatz.trip_count is None  # a data-dependent loop


@pytest.mark.parametrize("name", RUNNABLE)
def test_allocations_signature_and_constants_are_the_assignments(executables, name) -> None:
    compiled = executables.get(name)
    artefact, assignment = compiled.artefact, compiled.assignment
    entry = compiled.module.entry
    mine = artefact.allocations[: len(assignment.allocations)]
    for allocation, theirs in zip(mine, assignment.allocations, strict=True):
        assert (allocation.index, allocation.size, allocation.kind) == (
            theirs.index,
            theirs.size,
            theirs.kind,
        )
        if theirs.kind == "parameter":
            assert allocation.parameter == theirs.parameter_number
    extra = artefact.allocations[len(assignment.allocations) :]
    assert all(a.kind == "output" for a in extra)  # thunk emission adds no scratch
    assert sum(a.size for a in artefact.allocations) == assignment.total_bytes + sum(
        a.size for a in extra
    )
    results = list(entry.root_instruction.shape.leaves())
    assert list(artefact.signature.results) == [str(r) for r in results]
    assert list(artefact.signature.parameters) == [str(p.shape) for p in entry.parameters]
    outputs = sorted(a.output for a in artefact.allocations if a.kind == "output")
    assert outputs == list(range(len(results))), "every result leaf has one output allocation"
    for allocation in artefact.allocations:
        if allocation.kind == "output":
            assert allocation.size == memory_bytes(results[allocation.output])
    buffers = assignment.flow.buffers()
    for index, data in artefact.constants.items():
        (buffer,) = assignment.allocations[index].chunks
        constant = next(
            v.instruction for v in buffers[buffer] if v.instruction.opcode == "constant"
        )
        assert data == to_memory(constant.literal, constant.shape).tobytes()


@pytest.mark.parametrize("name", RUNNABLE)
def test_the_artefact_runs_on_the_interpreter_and_gives_xla_cpus_outputs(
    executables, name, tmp_path
) -> None:
    from heron.hlo.npz_io import load_outputs
    from heron.runtime.core.executor import load_executable
    from heron.runtime.interpreter import InterpreterDevice

    compiled = executables.get(name)
    path = tmp_path / f"{name}.heron"
    compiled.artefact.save(path)
    artefact = Artefact.load(path)
    module = PROGRAMS._module(name)
    arguments = PROGRAMS._inputs(module, name)
    expected = load_outputs(PROGRAMS.PROGRAMS / name / "outputs.npz")
    recorded = load_executable(artefact, InterpreterDevice(), "interpreter")
    got = recorded.run(arguments)
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        PROGRAMS.assert_close(np.asarray(g), np.asarray(e), f"{name} out{i} (executable)")
    direct = load_executable(artefact, InterpreterDevice(), "interpreter", command_buffers=False)
    again = direct.run(arguments)
    for i, (a, b) in enumerate(zip(got, again, strict=True)):
        assert a.tobytes() == b.tobytes(), f"{name} out{i}: command buffers change the result"
    total = sum(a.size for a in artefact.allocations)
    assert recorded.peak_device_bytes == direct.peak_device_bytes == total
    launches = [r for r in direct.stats.records if r.kind == "kernel"]
    assert direct.stats.kernel_launches == len(launches) >= 1
    if not any(isinstance(t, (WhileThunk, ConditionalThunk)) for t in artefact.program):
        # Straight-line programs launch every kernel thunk once.
        kernel_thunks = [t for t in walk(artefact.program) if isinstance(t, KernelThunk)]
        assert len(launches) == len(kernel_thunks)


def test_compile_time_of_the_corpus_is_reported(executables) -> None:
    """Not a benchmark: that compiling the corpus stays within what a CI run affords."""
    for name in RUNNABLE:
        executables.get(name)
    total = sum(executables.seconds.values())
    print(f"\ncompiled {len(executables.seconds)} programs into executables in {total:.1f} s")
    assert total < 600


# -- hand-written modules: what the corpus does not show --------------------------------

RESULT_IS_A_PARAMETER = """
HloModule passthrough, entry_computation_layout={(f32[4]{0}, f32[4]{0})->(f32[4]{0}, f32[4]{0},
f32[4]{0})}

ENTRY %main (a: f32[4], b: f32[4]) -> (f32[4], f32[4], f32[4]) {
  %a = f32[4]{0} parameter(0)
  %b = f32[4]{0} parameter(1)
  %sum = f32[4]{0} add(%a, %b)
  ROOT %t = (f32[4]{0}, f32[4]{0}, f32[4]{0}) tuple(%a, %sum, %a)
}
"""


def test_results_that_are_parameters_get_output_allocations_and_copies(executables) -> None:
    compiled = compile_program(
        parse_module(RESULT_IS_A_PARAMETER),
        executables.target,
        ("interpreter",),
        compiler=executables.compile_fusion,
    )
    artefact = compiled.artefact
    outputs = {a.output: a for a in artefact.allocations if a.kind == "output"}
    assert sorted(outputs) == [0, 1, 2]
    parameter_0 = next(a.index for a in artefact.allocations if a.parameter == 0)
    copies = [t for t in walk(artefact.program) if isinstance(t, CopyThunk)]
    for leaf in (0, 2):
        assert any(
            c.source.allocation == parameter_0 and c.destination.allocation == outputs[leaf].index
            for c in copies
        ), f"result {leaf} is never copied from parameter 0"
    assert sum(isinstance(t, KernelThunk) for t in walk(artefact.program)) == 1


UNSUPPORTED = """
HloModule custom, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

ENTRY %main (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  ROOT %c = f32[4]{0} custom-call(%a), custom_call_target="foo"
}
"""


def test_an_instruction_no_emitter_takes_is_refused_by_name(executables) -> None:
    with pytest.raises(
        UnsupportedError,
        match=r"custom-call 'c' in computation 'main': custom_call_target 'foo' is provided by"
        " no installed plugin",
    ):
        compile_program(parse_module(UNSUPPORTED), executables.target, ("interpreter",))


#: A loop whose state element is replaced by its reverse: the fusion that reads the
#: old element may not write the new one over it (only an elementwise kernel may), so
#: copy insertion gives it bytes of its own and copies its result into the state.
REVERSED_STATE = """
HloModule reversing, entry_computation_layout={(f32[8]{0})->f32[8]{0}}

%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %x = f32[8]{0} get-tuple-element(%p), index=1
  %r = f32[8]{0} reverse(%x), dimensions={0}
  %y = f32[8]{0} negate(%r)
  ROOT %t = (s32[], f32[8]{0}) tuple(%next, %y)
}

%cond (p: (s32[], f32[8])) -> pred[] {
  %p = (s32[], f32[8]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %three = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %three), direction=LT
}

ENTRY %main (a: f32[8]) -> f32[8] {
  %a = f32[8]{0} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[8]{0}) tuple(%zero, %a)
  %w = (s32[], f32[8]{0}) while(%init), condition=%cond, body=%body
  ROOT %out = f32[8]{0} get-tuple-element(%w), index=1
}
"""


def test_a_kernel_that_cannot_write_over_its_input_is_copied_into_the_loop_state(
    executables,
) -> None:
    compiled = compile_program(
        parse_module(REVERSED_STATE),
        executables.target,
        ("interpreter",),
        compiler=executables.compile_fusion,
    )
    artefact = compiled.artefact
    (loop,) = [t for t in walk(artefact.program) if isinstance(t, WhileThunk)]
    assert loop.trip_count == 3
    # No scratch: the buffer assignment is the whole story.
    assert len(artefact.allocations) == len(compiled.assignment.allocations)
    kernels = [t for t in loop.body if isinstance(t, KernelThunk)]
    # The reversing kernel writes bytes none of its inputs use ...
    reversing = [k for k in kernels if k.arguments[-1] not in k.arguments[:-1]]
    assert len(reversing) == 1
    # ... then copy insertion's copy moves its result into the loop state's slice.
    index = loop.body.index(reversing[0])
    home = loop.body[index + 1]
    assert isinstance(home, CopyThunk) and home.source == reversing[0].arguments[-1]
    # The counter's add reads and writes its state element in place: elementwise, allowed.
    in_place = [k for k in kernels if k.arguments[0] == k.arguments[-1]]
    assert len(in_place) == 1


# -- the command -------------------------------------------------------------------------


def _heron(capsys, *argv: str) -> tuple[int, str, str]:
    from heron.cli.main import main

    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_heron_compile_executable_writes_an_artefact(capsys, tmp_path) -> None:
    out = tmp_path / "scan_rnn.heron"
    source = str(PROGRAMS.PROGRAMS / "scan_rnn" / "module.hlo")
    code, text, err = _heron(
        capsys, "compile", source, "--executable", str(out), "--backend", "interpreter"
    )
    assert code == 0, err
    artefact = Artefact.load(out)
    assert artefact.backends == ("interpreter",)
    assert artefact.target.name == "h100" and artefact.target.arch == "sm_90"
    kinds: dict[str, int] = {}
    for thunk in walk(artefact.program):
        kinds[thunk.kind] = kinds.get(thunk.kind, 0) + 1
    assert kinds["while"] == 1
    assert f"kernel {kinds['kernel']}" in text and "while 1" in text
    total = sum(a.size for a in artefact.allocations)
    assert f"peak memory: {total} bytes" in text
    assert f"wrote {out}" in text


def test_heron_compile_executable_refuses_what_it_cannot_run(capsys, tmp_path) -> None:
    out = tmp_path / "fft.heron"
    unsupported = tmp_path / "fft.hlo"
    unsupported.write_text(WITH_FFT)
    code, _, err = _heron(capsys, "compile", str(unsupported), "--executable", str(out))
    assert code == 2 and "(fft," in err and "no heron emitter handles fft" in err
    assert not out.exists()
    source = str(PROGRAMS.PROGRAMS / "conv1d" / "module.hlo")
    code, _, err = _heron(capsys, "compile", source, "--executable", str(out), "--backend", "rocm")
    assert code == 2 and "a rocm image needs a rocm target" in err
    code, _, err = _heron(capsys, "compile", source, "--backend", "interpreter")
    assert code == 2 and "--backend applies to --executable only" in err


def test_heron_run_runs_an_artefact_and_writes_xla_cpus_outputs(capsys, tmp_path) -> None:
    from heron.hlo.npz_io import load_outputs

    artefact = tmp_path / "scan_rnn.heron"
    folder = PROGRAMS.PROGRAMS / "scan_rnn"
    code, _, err = _heron(
        capsys, "compile", str(folder / "module.hlo"), "--executable", str(artefact)
    )
    assert code == 0, err
    out = tmp_path / "out.npz"
    code, text, err = _heron(
        capsys,
        "run",
        str(artefact),
        "--inputs",
        str(folder / "inputs.npz"),
        "--output",
        str(out),
        "--repeat",
        "3",
    )
    assert code == 0, err
    assert "backend: interpreter" in text and "results identical across the 3 runs: yes" in text
    got, expected = load_outputs(out), load_outputs(folder / "outputs.npz")
    assert len(got) == len(expected) == 2
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        PROGRAMS.assert_close(np.asarray(g), np.asarray(e), f"scan_rnn out{i} (heron run)")
    # Without --inputs, random arguments (heron run's seeded draw); the HLO-only options refused.
    code, text, err = _heron(capsys, "run", str(artefact), "--no-command-buffers")
    assert code == 0 and "arguments: random, seed 0" in text, err
    code, _, err = _heron(capsys, "run", str(artefact), "--check")
    assert code == 2 and "--check needs the HLO module" in err
    # The HLO runs through the same executor (compiled in memory), --repeat included.
    code, text, err = _heron(capsys, "run", str(folder / "module.hlo"), "--repeat", "2")
    assert code == 0 and "results identical across the 2 runs: yes" in text, err
