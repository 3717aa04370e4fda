"""Executables of the corpora: thunk emission, the artefact, ``heron compile --executable``.

Every program of ``programs/index.json`` and ``models/index.json`` is compiled
once, in one test that makes every check on it
(``heron_test_support.programs.compile_corpus_program``:
:func:`heron.compiler.executable.compile_program`, kernel images for the
interpreter, this tree's GEMM emitter), against what the compiler's own
analyses say, not against what the emitter wrote:

- the artefact builds (its consistency checks), saves, and loads back equal;
- every fusion of every sequential computation has exactly one kernel thunk,
  whose arguments are the buffer assignment's slices of the fusion's operand
  leaves and result leaves;
- while and conditional instructions are while and conditional thunks, in the
  computation they belong to, with the condition's root as the predicate;
- the allocation table is the assignment's (sizes, kinds, parameter numbers),
  every result leaf has an output allocation of its own, constants hold the
  literal's bytes, and peak memory is the assignment's;
- what no emitter can run is refused with the instruction named;
- its kernel count and peak bytes are its row of the corpus's table
  (docs/programs.md, docs/models.md; programs/table.py) and within issue 15's rule unless
  :data:`OVER_THE_RULE` names it;
- every artefact, saved and loaded back, runs through the thunk executor
  (:mod:`heron.runtime.core.executor`) on the interpreter and gives XLA:CPU's
  outputs (``outputs.npz``, ``heron_test_support.programs.assert_close``), with
  command buffers and without (the same bytes), holding exactly the
  allocations' bytes; and running the module through its buffer assignment's
  bytes gives the evaluator's results, no two live values sharing a byte.

(One test per program: pytest-xdist's ``--dist loadgroup`` cannot keep a
program's tests on one worker under pytest 9, where each would compile it
again.) A program of ``heron_test_support.programs.KNOWN_FAILURES`` is
checked to fail as recorded: a refused one where it compiles, one with wrong
results where it runs.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from heron_test_support.programs import (
    CORPORA,
    CorpusProgram,
    assert_close,
    compile_corpus_program,
    corpus_programs,
    expect_known_failure,
    kernel_compiler,
    parameters,
)
from heron_test_support.programs import index as corpus_index

from heron.compiler import Target
from heron.compiler.executable import CompiledExecutable, compile_program
from heron.hlo.buffers.dataflow import sequential_computations
from heron.hlo.errors import UnsupportedError
from heron.hlo.memory_layout import memory_bytes, to_memory
from heron.hlo.parser import parse_module
from heron.hlo.printer import print_module
from heron.runtime.core.artefact import Artefact
from heron.runtime.core.thunks import (
    CommandBufferThunk,
    ConditionalThunk,
    CopyThunk,
    CustomCallThunk,
    KernelThunk,
    LibraryCallThunk,
    Thunk,
    WhileThunk,
    walk,
)

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "programs"
TARGET = Target.preset("h100")
BY_ID = {program.id: program for program in corpus_programs()}

#: What no emitter runs yet: HLO's cholesky (jax lowers its own LAPACK or cuSOLVER call).
WITH_CHOLESKY = """\
HloModule jit_cholesky
ENTRY main {
  a = f32[2,4,4]{2,1,0} parameter(0)
  ROOT c = f32[2,4,4]{2,1,0} cholesky(a), lower=true
}
"""
#: Programs with loops and conditionals (their thunks are checked by kind), by
#: ``corpus/name``: every program tagged control-flow.
CONTROL_FLOW = {
    # cond's two cheap branches become a select (conditional-simplifier): no conditional.
    "programs/cond": "select",
    "programs/switch": "conditional",
    "programs/dropout_threefry": "while",
    "programs/fori_loop_newton_sqrt": "while",
    "programs/scan_cumulative_max": "while",
    "programs/scan_rnn": "while",
    "programs/while_loop_collatz": "while",
    # scans and fori_loops of recurrent cells; dropout's threefry counter loop
    **{
        f"models/{name}": "while"
        for name in (
            "flax_dropout",
            "flax_gru_scan",
            "flax_lstm_rnn",
            "flax_lstm_fori_loop",
            "equinox_gru_scan_vmap",
            "equinox_lstm_fori_loop",
            "haiku_lstm_dynamic_unroll",
            "haiku_gru_dynamic_unroll",
            # nn.scan over layers and its backward loop; threefry's loops (dropout,
            # sampling, the VAE's and DP-SGD's noise); CTC's alignment scan and its
            # gradient; a while_loop decoder; searchsorted's bisection loop
            "flax_scan_remat_layers_sgd_step",
            "flax_nnx_cnn_sgd_step",
            "flax_top_p_sampling",
            "equinox_vae_adabelief_step",
            "equinox_dp_sgd_per_example_clipping",
            "haiku_ctc_lion_step",
            "flax_greedy_decode_while_loop",
            "equinox_segment_metrics",
            # L-BFGS's zoom line search; a decoding scan with a key/value cache; gamma's
            # rejection-sampling loops; RK4 under lax.scan and its backward scan;
            # searchsorted's bisection loops (jnp.interp, jnp.searchsorted)
            "optax_lbfgs_zoom_linesearch",
            "flax_kv_cache_decode_scan",
            "haiku_dirichlet_vae_adamax_step",
            "equinox_neural_ode_rk4_nadam_step",
            "flax_order_statistics",
            # Hugging Face's generate: greedy decoding's and beam search's while loops
            "transformers_gpt2_greedy_generate",
            "transformers_bart_beam_search",
            # environments played at random: pgx's moves under fori_loop, gymnax's scan
            "pgx_connect_four_random_play",
            "gymnax_acrobot_random_rollout",
        )
    },
    # optax.apply_if_finite's lax.cond: its branches (the update, and constants) are cheap
    # as XLA counts them (a constant is elementwise to it): selects, as in XLA's module
    "models/optax_inject_hyperparams_apply_if_finite_step": "select",
    # jax's GPU lowering of the Cholesky factor's gradient: conds on constant predicates,
    # which the conditional simplifier inlines (no conditional, no select left)
    "models/optax_gaussian_process_adam_step": "select",
}


def test_the_tables_name_programs() -> None:
    assert set(CONTROL_FLOW) <= set(BY_ID) and set(OVER_THE_RULE) <= set(BY_ID)
    tagged = {
        f"{corpus}/{entry['name']}"
        for corpus in CORPORA
        for entry in corpus_index(corpus)["programs"]
        if "control-flow" in entry["tags"]
    }
    assert tagged == set(CONTROL_FLOW)


def test_what_no_emitter_runs_is_refused_with_the_instruction_named() -> None:
    """What no emitter runs is refused with the instruction named: a cholesky."""
    with pytest.raises(UnsupportedError, match=r"cannot run instruction 'c' \(cholesky,"):
        compile_program(
            parse_module(WITH_CHOLESKY), TARGET, ("interpreter",), compiler=kernel_compiler()
        )


@pytest.mark.parametrize("program", parameters())
def test_the_executable_of_a_corpus_program(program: CorpusProgram, tmp_path: Path) -> None:
    """The program compiled once (``heron compile --executable``), then every check of the
    module docstring on it: the artefact's round trip, kernel and control-flow thunks, the
    allocations, its row of the kernel table and its compile time; then its results: the
    artefact run by the thunk executor against XLA:CPU's outputs, and the program run
    through its buffer assignment's bytes against the evaluator."""
    with expect_known_failure(program, "compile"):
        executable = compile_corpus_program(program)
    _check_artefact_round_trip(executable, tmp_path / f"{program.name}.heron")
    _check_kernel_thunks(executable)
    _check_control_flow(executable, program.id)
    _check_allocations(executable)
    _check_kernel_table_row(program, executable)
    print(f"\ncompiled {program.id} into an executable in {executable.seconds:.1f} s")
    assert executable.seconds < COMPILE_SECONDS
    with expect_known_failure(program, "results"):
        _check_artefact_run(program, executable, tmp_path / f"{program.name}.heron")
        _check_buffer_assignment(program, executable)


#: The most seconds one program's compile may take (not a benchmark: that compiling each
#: program stays within what a CI run affords): the corpora's slowest take tens of seconds.
COMPILE_SECONDS = 300


def _check_artefact_round_trip(compiled: CompiledExecutable, path: Path) -> None:
    """The artefact saves and loads back equal."""
    artefact = compiled.artefact
    artefact.save(path)
    loaded = Artefact.load(path)
    assert loaded == artefact
    # the backends it holds kernel images for: none where every instruction is a copy or a
    # bitcast (a transpose that moves no byte)
    assert loaded.backends == (("interpreter",) if artefact.kernels else ())
    assert loaded.optimized_hlo is not None and "is_scheduled=true" in loaded.optimized_hlo


def _slices(assignment, inst) -> list[tuple[int, int, int]]:
    return [(s.allocation, s.offset, s.size) for s in assignment.leaf_slices(inst)]


def _as_tuples(thunk: KernelThunk) -> list[tuple[int, int, int]]:
    return [(s.allocation, s.offset, s.size) for s in thunk.arguments]


def _check_kernel_thunks(compiled) -> None:
    assignment = compiled.assignment
    fusions = [
        inst
        for computation in sequential_computations(compiled.module)
        for inst in computation.instructions
        if inst.opcode == "fusion"
    ]
    kernel_thunks = [t for t in walk(compiled.artefact.program) if isinstance(t, KernelThunk)]
    assert len(kernel_thunks) == len(fusions)
    # no kernel only where nothing computes (a transpose that moves no byte is a bitcast)
    assert fusions or _moves_bytes_only(compiled.module), print_module(compiled.module)
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


def _check_control_flow(compiled, name: str) -> None:
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


def test_a_counted_loop_has_its_trip_count() -> None:
    (loop,) = [
        t
        for t in walk(
            compile_corpus_program(BY_ID["programs/fori_loop_newton_sqrt"]).artefact.program
        )
        if isinstance(t, WhileThunk)
    ]
    text = (PROGRAMS / "fori_loop_newton_sqrt" / "module.hlo").read_text()
    assert re.search(r"constant\(8\)", text)
    assert loop.trip_count == 8
    (collatz,) = [
        t
        for t in walk(compile_corpus_program(BY_ID["programs/while_loop_collatz"]).artefact.program)
        if isinstance(t, WhileThunk)
    ]
    assert collatz.trip_count is None  # a data-dependent loop


def _check_allocations(compiled) -> None:
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


def _check_artefact_run(program: CorpusProgram, compiled: CompiledExecutable, path: Path) -> None:
    """The saved artefact, loaded back, runs through the thunk executor on the interpreter
    and gives XLA:CPU's outputs, the same bytes with command buffers and without, holding
    exactly the allocations' bytes."""
    from heron.runtime.core.executor import load_executable
    from heron.runtime.interpreter import InterpreterDevice

    name = program.id
    artefact = Artefact.load(path)
    arguments = program.inputs(program.module())
    recorded = load_executable(artefact, InterpreterDevice(), "interpreter")
    got = recorded.run(arguments)
    program.assert_outputs(got, "the executable")
    direct = load_executable(artefact, InterpreterDevice(), "interpreter", command_buffers=False)
    again = direct.run(arguments)
    for i, (a, b) in enumerate(zip(got, again, strict=True)):
        assert a.tobytes() == b.tobytes(), f"{name} out{i}: command buffers change the result"
    thunks = list(walk(artefact.program))
    if any(isinstance(t, (WhileThunk, ConditionalThunk)) for t in thunks) and not any(
        isinstance(t, CustomCallThunk) for t in thunks
    ):
        # Issue 30: on a device with conditional nodes every loop and conditional runs in
        # the graph, whatever its length: the program is one graph launch, no predicate
        # or selector is read back.
        assert [type(t) for t in recorded.program] == [CommandBufferThunk], name
        assert recorded.stats.predicate_reads == 0
        assert recorded.stats.command_buffers_recorded == 1
    total = sum(a.size for a in artefact.allocations)
    assert recorded.peak_device_bytes == direct.peak_device_bytes == total
    launches = [r for r in direct.stats.records if r.kind == "kernel"]
    assert direct.stats.kernel_launches == len(launches)
    assert launches or not any(isinstance(t, KernelThunk) for t in walk(artefact.program))
    if not any(isinstance(t, (WhileThunk, ConditionalThunk)) for t in artefact.program):
        # Straight-line programs launch every kernel thunk once.
        kernel_thunks = [t for t in walk(artefact.program) if isinstance(t, KernelThunk)]
        assert len(launches) == len(kernel_thunks)


def _check_kernel_table_row(program: CorpusProgram, compiled: CompiledExecutable) -> None:
    """programs/table.py's row of the program: what heron's executable launches (its
    prepared module, counted as the table counts it), within issue 15's rule (no more
    kernels than XLA:GPU, 1.5x where XLA uses Triton) unless OVER_THE_RULE names it (a
    program that comes within the rule must leave the list, one that goes over fails
    here); the corpus's document (docs/programs.md, docs/models.md) has the row."""
    table = _table()
    documented = (ROOT / "docs" / f"{program.corpus}.md").read_text()
    row = _documented_row(documented, program.name)
    assert row is not None, f"docs/{program.corpus}.md has no row for it"
    heron = table.kernels_of(compiled.module, compiled.assignment)
    # The table counts the executable's kernels (loops and conditionals are thunks of
    # their own), so it refuses nothing that compiles.
    assert heron.count is not None, heron
    # The document says what the code does: eight models' rows went stale for a day when
    # multi-output fusion took XLA's shape rule and nobody ran the table again.
    peak = "-" if heron.peak_bytes is None else f"{heron.peak_bytes:,}"
    assert row == (str(heron.count), peak), (
        f"docs/{program.corpus}.md says {row[0]} kernels and {row[1]} bytes for it; heron"
        f" launches {heron.count} in {peak} bytes: run python programs/table.py"
        f"{' --corpus models' if program.corpus == 'models' else ''}"
        f" --update docs/{program.corpus}.md"
    )
    assert (heron.count >= 1 or _moves_bytes_only(compiled.module)) and heron.peak_bytes > 0
    custom_calls = sum(
        1
        for c in sequential_computations(compiled.module)
        for i in c.instructions
        if i.opcode == "custom-call"
    )
    assert heron.count == len(compiled.program.kernel_of) + custom_calls
    facts = program.xla_facts()
    xla = table.xla_kernels(facts)
    over = heron.count > xla * (1.5 if facts["triton"] else 1)
    assert over == (program.id in OVER_THE_RULE), (heron.count, xla)


def _documented_row(document: str, name: str) -> tuple[str, str] | None:
    """heron's kernels and bytes as ``name``'s row in a corpus table says them (the second
    and fourth columns of programs/table.py's markdown), or None without a row."""
    for line in document.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) > 3 and cells[0] == name:
            return cells[1], cells[3]
    return None


def _moves_bytes_only(module) -> bool:
    """Whether ``module`` computes nothing: parameters, bitcasts, copies and tuples only."""
    return all(
        inst.opcode in ("parameter", "bitcast", "copy", "tuple", "get-tuple-element")
        for computation in sequential_computations(module)
        for inst in computation.instructions
    )


def _table():
    spec = importlib.util.spec_from_file_location("programs_table", PROGRAMS / "table.py")
    table = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = table
    spec.loader.exec_module(table)
    return table


#: Programs whose heron kernel count is over issue 15's rule (docs/programs.md,
#: docs/models.md: why), by ``corpus/name``, and why.
_LIBRARY_SPLIT = (
    "each dot is a cuBLASLt call and what cuBLASLt does not fuse (a dynamic-slice or an"
    " im2col before it, a tanh or a sigmoid after it) a kernel of its own (issue 28);"
    " XLA's small Triton GEMM fusions hold them"
)
OVER_THE_RULE = {
    "models/equinox_mlp": "docs/models.md",
    "models/equinox_batchnorm_train": "docs/models.md",
    "programs/scan_rnn": _LIBRARY_SPLIT,
}


def _check_buffer_assignment(program: CorpusProgram, compiled: CompiledExecutable) -> None:
    """Issue 15's acceptance: the executable's buffer assignment (the program pipeline,
    the fusion of loop bodies and branches, copy insertion and the scheduler, then buffer
    assignment at the kernel ABI's alignment). No two values live at one time share a
    byte (the overlap checker), and running the program through the assigned bytes (each
    value stored at its offset, each operand read back from there) gives the evaluator's
    results: bit for bit for integers; for floats within assert_close's bound, because
    numpy's matmul may sum in another order when its operand is a contiguous copy rather
    than a transposed view (a value overwritten while live would be far outside it)."""
    from heron.hlo.buffers.check import overlapping_buffers, simulate
    from heron.hlo.evaluator import evaluate_module, flatten_literal

    assignment = compiled.assignment
    assert overlapping_buffers(assignment) == [], assignment.listing()
    arguments = program.inputs(program.module())
    expected = [np.asarray(v) for v in flatten_literal(evaluate_module(compiled.module, arguments))]
    simulated = [np.asarray(v) for v in flatten_literal(simulate(assignment, arguments))]
    assert len(simulated) == len(expected)
    for i, (got, want) in enumerate(zip(simulated, expected, strict=True)):
        assert_close(got, want, f"{program.id} out{i} through the assigned bytes")


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


def test_results_that_are_parameters_get_output_allocations_and_copies() -> None:
    compiled = compile_program(
        parse_module(RESULT_IS_A_PARAMETER), TARGET, ("interpreter",), compiler=kernel_compiler()
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


def test_an_instruction_no_emitter_takes_is_refused_by_name() -> None:
    with pytest.raises(
        UnsupportedError,
        match=r"custom-call 'c' in computation 'main': custom_call_target 'foo' is provided by"
        " no installed plugin",
    ):
        compile_program(parse_module(UNSUPPORTED), TARGET, ("interpreter",))


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


def test_a_kernel_that_cannot_write_over_its_input_is_copied_into_the_loop_state() -> None:
    compiled = compile_program(
        parse_module(REVERSED_STATE), TARGET, ("interpreter",), compiler=kernel_compiler()
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
    source = str(PROGRAMS / "scan_rnn" / "module.hlo")
    code, text, err = _heron(
        capsys, "compile", source, "--executable", str(out), "--backend", "interpreter"
    )
    assert code == 0, err
    artefact = Artefact.load(out)
    assert artefact.backends == ("interpreter",)
    assert artefact.target.name == "h100" and artefact.target.arch == "sm_90"
    kinds: dict[str, int] = {}
    beside: dict[str, int] = {}  # what the library calls carry for a device without them
    for thunk in walk(artefact.program):
        kinds[thunk.kind] = kinds.get(thunk.kind, 0) + 1
        if isinstance(thunk, LibraryCallThunk):
            for inner in walk(thunk.fallback):
                beside[inner.kind] = beside.get(inner.kind, 0) + 1
    assert kinds["while"] == 1 and beside  # the loop's GEMMs are cuBLASLt calls
    ran = kinds["kernel"] - beside.get("kernel", 0)
    assert f"kernel {ran}" in text and "while 1" in text
    assert f"for a device without the library: kernel {beside['kernel']}" in text
    total = sum(a.size for a in artefact.allocations)
    assert f"peak memory: {total} bytes" in text
    assert f"wrote {out}" in text


def test_heron_compile_executable_refuses_what_it_cannot_run(capsys, tmp_path) -> None:
    out = tmp_path / "cholesky.heron"
    unsupported = tmp_path / "cholesky.hlo"
    unsupported.write_text(WITH_CHOLESKY)
    code, _, err = _heron(capsys, "compile", str(unsupported), "--executable", str(out))
    assert code == 2 and "(cholesky," in err and "no heron emitter handles cholesky" in err
    assert not out.exists()
    source = str(PROGRAMS / "conv1d" / "module.hlo")
    code, _, err = _heron(capsys, "compile", source, "--executable", str(out), "--backend", "rocm")
    assert code == 2 and "a rocm image needs a rocm target" in err
    code, _, err = _heron(capsys, "compile", source, "--backend", "interpreter")
    assert code == 2 and "--backend applies to --executable only" in err


def test_heron_run_runs_an_artefact_and_writes_xla_cpus_outputs(capsys, tmp_path) -> None:
    from heron.hlo.npz_io import load_outputs

    artefact = tmp_path / "scan_rnn.heron"
    folder = PROGRAMS / "scan_rnn"
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
        assert_close(np.asarray(g), np.asarray(e), f"scan_rnn out{i} (heron run)")
    # Without --inputs, random arguments (heron run's seeded draw); the HLO-only options refused.
    code, text, err = _heron(capsys, "run", str(artefact), "--no-command-buffers")
    assert code == 0 and "arguments: random, seed 0" in text, err
    code, _, err = _heron(capsys, "run", str(artefact), "--check")
    assert code == 2 and "--check needs the HLO module" in err
    # The HLO runs through the same executor (compiled in memory), --repeat included.
    code, text, err = _heron(capsys, "run", str(folder / "module.hlo"), "--repeat", "2")
    assert code == 0 and "results identical across the 2 runs: yes" in text, err
