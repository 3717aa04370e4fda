"""Thunk emission on hand-written modules: what each instruction becomes, and what is refused.

The corpus (tests/test_executables.py) covers real programs; these modules
isolate one rule each: the elementwise rule for sharing an input's bytes, image
keys, copies, a layout-changing copy, a conditional's branches and result.
"""

from __future__ import annotations

import pytest

from heron.compiler import Target
from heron.compiler.executable import compile_program
from heron.compiler.thunk_emission import emit_thunks, image_key
from heron.hlo import parse_module
from heron.hlo.buffers import assign_buffers
from heron.hlo.errors import UnsupportedError
from heron.hlo.passes import pass_named, run_pipeline
from heron.hlo.passes.manager import pipeline_of
from heron.runtime.core.thunks import ConditionalThunk, CopyThunk, KernelThunk, WhileThunk, walk

TARGET = Target.preset("h100")

FUSIONS = """
HloModule fusions, entry_computation_layout={(f32[8]{0}, f32[8]{0})->(f32[8]{0}, f32[8]{0})}

%elementwise (p0: f32[8], p1: f32[8]) -> f32[8] {
  %p0 = f32[8]{0} parameter(0)
  %p1 = f32[8]{0} parameter(1)
  %n = f32[8]{0} negate(%p0)
  ROOT %a = f32[8]{0} add(%n, %p1)
}

%reversing (p0: f32[8], p1: f32[8]) -> f32[8] {
  %p0 = f32[8]{0} parameter(0)
  %p1 = f32[8]{0} parameter(1)
  %r = f32[8]{0} reverse(%p0), dimensions={0}
  ROOT %a = f32[8]{0} add(%r, %p1)
}

ENTRY %main (x: f32[8], y: f32[8]) -> (f32[8], f32[8]) {
  %x = f32[8]{0} parameter(0)
  %y = f32[8]{0} parameter(1)
  %f.1 = f32[8]{0} fusion(%x, %y), kind=kLoop, calls=%elementwise
  %g = f32[8]{0} fusion(%x, %y), kind=kLoop, calls=%reversing
  ROOT %t = (f32[8]{0}, f32[8]{0}) tuple(%f.1, %g)
}
"""


def _fusion(module, name):
    return next(i for i in module.entry.instructions if i.name == name)


def test_image_keys_are_archive_safe_tokens() -> None:
    module = parse_module(FUSIONS)
    assert image_key(_fusion(module, "f.1")) == "f.1"
    fusion = _fusion(module, "g")
    fusion.name = "3rd/fusion#1"
    assert image_key(fusion) == "k_3rd_fusion_1"


CONDITIONAL = """
HloModule branches, entry_computation_layout={(s32[], f32[4]{0})->f32[4]{0}}

%double (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %d = f32[4]{0} add(%p, %p)
}

%same (p: f32[4]) -> f32[4] {
  ROOT %p = f32[4]{0} parameter(0)
}

%negated (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %n = f32[4]{0} negate(%p)
}

ENTRY %main (i: s32[], x: f32[4]) -> f32[4] {
  %i = s32[] parameter(0)
  %x = f32[4]{0} parameter(1)
  ROOT %c = f32[4]{0} conditional(%i, %x, %x, %x), branch_computations={%double, %same, %negated}
}
"""


def test_a_conditional_runs_each_branchs_kernels_into_its_result() -> None:
    compiled = compile_program(parse_module(CONDITIONAL), TARGET, ("interpreter",))
    artefact = compiled.artefact
    (conditional,) = [t for t in artefact.program if isinstance(t, ConditionalThunk)]
    assert conditional.selector_type == "s32" and conditional.selector.size == 4
    assert len(conditional.branches) == 3
    (output,) = [a for a in artefact.allocations if a.kind == "output"]
    for k, branch in enumerate(conditional.branches):
        # Every branch leaves its result in the conditional's output allocation.
        writers = [t for t in branch if isinstance(t, (KernelThunk, CopyThunk))]
        assert writers, f"branch {k} writes nothing"
        last = writers[-1]
        written = last.arguments[-1] if isinstance(last, KernelThunk) else last.destination
        assert written.allocation == output.index, f"branch {k}"
    # The pass-through branch copies its operand (copy insertion's copy, or emission's).
    assert not any(isinstance(t, KernelThunk) for t in conditional.branches[1])


LAYOUT_COPY = """
HloModule transposing, entry_computation_layout={(f32[2,3]{1,0})->f32[2,3]{0,1}}

ENTRY %main (x: f32[2,3]) -> f32[2,3] {
  %x = f32[2,3]{1,0} parameter(0)
  ROOT %c = f32[2,3]{0,1} copy(%x)
}
"""


def test_a_copy_that_changes_the_layout_is_refused() -> None:
    """Through the program pipeline it is a transpose fusion; emitted as is, it is refused."""
    module = parse_module(LAYOUT_COPY)
    run_pipeline(module, pipeline_of([pass_named("copy-insertion"), pass_named("scheduler")]))
    assignment = assign_buffers(module, alignment=16)
    with pytest.raises(UnsupportedError, match=r"copy 'c' .* changes the layout"):
        emit_thunks(assignment, lambda fusion, shared, backends: {})
    compiled = compile_program(parse_module(LAYOUT_COPY), TARGET, ("interpreter",))
    kernels = [t for t in walk(compiled.artefact.program) if isinstance(t, KernelThunk)]
    assert len(kernels) == 1


def test_a_fusion_compiled_for_no_backend_is_an_error() -> None:
    module = parse_module(FUSIONS)
    run_pipeline(module, pipeline_of([pass_named("copy-insertion"), pass_named("scheduler")]))
    assignment = assign_buffers(module, alignment=16)
    with pytest.raises(UnsupportedError, match="compiled for no backend"):
        emit_thunks(assignment, lambda fusion, shared, backends: {})


DATA_DEPENDENT_LOOP = """
HloModule halving, entry_computation_layout={(s32[])->s32[]}

%body (p: s32[]) -> s32[] {
  %p = s32[] parameter(0)
  %two = s32[] constant(2)
  ROOT %half = s32[] divide(%p, %two)
}

%cond (p: s32[]) -> pred[] {
  %p = s32[] parameter(0)
  %zero = s32[] constant(0)
  ROOT %gt = pred[] compare(%p, %zero), direction=GT
}

ENTRY %main (x: s32[]) -> s32[] {
  %x = s32[] parameter(0)
  ROOT %w = s32[] while(%x), condition=%cond, body=%body%CONFIG%
}
"""


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("", None),
        (', backend_config={"known_trip_count":{"n":"5"}}', 5),
        (', backend_config={"known_trip_count":{"n":"x"}}', None),
        (', backend_config={"other":1}', None),
    ],
)
def test_a_loop_takes_xlas_known_trip_count(config: str, expected: int | None) -> None:
    module = parse_module(DATA_DEPENDENT_LOOP.replace("%CONFIG%", config))
    compiled = compile_program(module, TARGET, ("interpreter",))
    (loop,) = [t for t in walk(compiled.artefact.program) if isinstance(t, WhileThunk)]
    assert loop.trip_count == expected
    # The condition's kernel writes the predicate the loop reads.
    (condition,) = loop.condition
    assert isinstance(condition, KernelThunk) and condition.arguments[-1] == loop.predicate


def test_a_kernel_handed_one_slice_twice_is_compiled_with_those_arguments_shared() -> None:
    """The body's divide writes the loop state over the element it reads (elementwise);
    the condition's compare reads the state into a pred of its own."""
    from heron.compiler import compile_fusion

    module = parse_module(DATA_DEPENDENT_LOOP.replace("%CONFIG%", ""))
    asked: dict[str, frozenset[int]] = {}

    def compiler(fusion, target, backend, shared=frozenset()):
        asked[fusion.called("calls").root_instruction.opcode] = frozenset(shared)
        return compile_fusion(fusion, target, backend, shared=shared)

    compiled = compile_program(module, TARGET, ("interpreter",), compiler=compiler)
    assert asked == {"compare": frozenset(), "divide": frozenset({0, 1})}
    (loop,) = [t for t in walk(compiled.artefact.program) if isinstance(t, WhileThunk)]
    (body,) = loop.body
    assert body.arguments[0] == body.arguments[1]
    by_key = {e.key: e.compiled["interpreter"] for e in compiled.program.kernels}
    assert by_key[body.image_key].shared_arguments == {0, 1}

    # A compiler that takes ``shared`` but ignores it would hand back a noalias kernel.
    def ignoring(fusion, target, backend, shared=frozenset()):
        return compile_fusion(fusion, target, backend)

    with pytest.raises(UnsupportedError, match=r"arguments \[0, 1\] overlap another"):
        compile_program(module, TARGET, ("interpreter",), compiler=ignoring)


REPEATED_LAYERS_AND_A_GEMM = """
HloModule layers

%relu (p0: f32[64,64]) -> f32[64,64] {
  %p0 = f32[64,64]{1,0} parameter(0)
  %zero = f32[] constant(0)
  %zeros = f32[64,64]{1,0} broadcast(%zero), dimensions={}
  ROOT %m = f32[64,64]{1,0} maximum(%p0, %zeros)
}

%gemm (p0: f32[64,64], p1: f32[64,64]) -> f32[64,64] {
  %p0 = f32[64,64]{1,0} parameter(0)
  %p1 = f32[64,64]{1,0} parameter(1)
  ROOT %d = f32[64,64]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (x: f32[64,64], y: f32[64,64], w: f32[64,64]) -> (f32[64,64], f32[64,64], f32[64,64]) {
  %x = f32[64,64]{1,0} parameter(0)
  %y = f32[64,64]{1,0} parameter(1)
  %w = f32[64,64]{1,0} parameter(2)
  %r.1 = f32[64,64]{1,0} fusion(%x), kind=kLoop, calls=%relu
  %r.2 = f32[64,64]{1,0} fusion(%y), kind=kLoop, calls=%relu
  %g = f32[64,64]{1,0} fusion(%x, %w), kind=kCustom, calls=%gemm
  ROOT %t = (f32[64,64]{1,0}, f32[64,64]{1,0}, f32[64,64]{1,0}) tuple(%r.1, %r.2, %g)
}
"""


def test_the_kernels_expected_before_emission_are_the_kernels_compiled() -> None:
    """Two fusions of one body are one kernel; a GEMM cuBLASLt computes is none."""
    from heron.compiler.library_gemm import gemm_fusion
    from heron.compiler.thunk_emission import expected_kernels

    module = parse_module(REPEATED_LAYERS_AND_A_GEMM)
    assert gemm_fusion(_fusion(module, "g"), TARGET) is not None
    assert expected_kernels(module, TARGET) == 1
    compiled = compile_program(module, TARGET, ("cuda", "interpreter"))
    cuda_kernels = [k for k in compiled.program.kernels if "cuda" in k.compiled]
    assert len(cuda_kernels) == expected_kernels(compiled.module, TARGET) == 1
