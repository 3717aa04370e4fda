"""The corpus's sort programs run end to end on the interpreter and equal XLA:CPU bitwise.

``programs/`` (sort, argsort, sort_int32_axis0, and top_k, which the top-k
decomposer keeps for the top-k emitter) through the program path: the HLO
pipeline, outlining (a sort or a topk becomes a fusion of its own), kernels
compiled for the interpreter and run as an executable
(``heron.compiler.program_run``, as heron run). The installed emitters plus this tree's sort
and top-k emitters compile them and are what the fusion passes ask (the
``registry`` fixture), so the check does not depend on the environment's
entry points being current. A program's top-k launches the top-k library kernel
(``topk_rows``: built from the installed emitters, docs/emitters.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import heron.plugins.sort as sort_plugin
import heron.plugins.topk as topk_plugin
from heron.compiler import compile_fusion
from heron.compiler.program_run import run_program
from heron.emitters import selection
from heron.emitters.registry import EmitterRegistry
from heron.emitters.selection import default_registry
from heron.hlo.npz_io import load_inputs, load_outputs
from heron.hlo.parser import parse_module_file
from heron.runtime.interpreter.device import InterpreterDevice

PROGRAMS = Path(__file__).resolve().parents[3] / "programs"


@pytest.fixture
def registry(monkeypatch) -> EmitterRegistry:
    """This tree's registry, for the compiles and for the fusion passes' checker."""
    made = _registry()
    monkeypatch.setattr(selection, "default_registry", lambda: made)
    return made


def _registry() -> EmitterRegistry:
    ours = [*sort_plugin.heron_emitter_specs(), *topk_plugin.heron_emitter_specs()]
    names = {spec.name for spec in ours}
    installed = [(spec, None) for spec in default_registry().specs if spec.name not in names]
    return EmitterRegistry([*installed, *((s, None) for s in ours)])


@pytest.mark.parametrize(
    ("name", "emitter"),
    [("sort", "sort"), ("argsort", "sort"), ("sort_int32_axis0", "sort"), ("top_k", "topk_rows")],
)
@pytest.mark.parametrize("warp", [32, 64])
def test_the_sort_program_equals_xla_cpu(name, emitter, warp, registry):
    module = parse_module_file(PROGRAMS / name / "module.hlo")
    parameters = module.entry.parameters
    arguments = load_inputs(
        PROGRAMS / name / "inputs.npz", [p.shape for p in parameters], [p.name for p in parameters]
    )
    run = run_program(
        module,
        arguments,
        InterpreterDevice(warp_size=warp),
        "interpreter",
        compiler=lambda fusion, target, backend: compile_fusion(
            fusion, target, backend, emitters=registry
        ),
    )
    assert emitter in [k.emitter for k in run.kernels]
    expected = load_outputs(PROGRAMS / name / "outputs.npz")
    assert len(run.outputs) == len(expected)
    for got, want in zip(run.outputs, expected, strict=True):
        got, want = np.asarray(got), np.asarray(want)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


#: ``jnp.sort`` of rows longer than a block's threads (2 x 1,024): a stable sort of one
#: operand, JAX's comparator (-0.0 and 0.0 tie, so only stability orders them).
LONG_SORT = """
HloModule jit_sort
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  zero = f32[] constant(0)
  a_zero = pred[] compare(a, zero), direction=EQ
  a0 = f32[] select(a_zero, zero, a)
  b_zero = pred[] compare(b, zero), direction=EQ
  b0 = f32[] select(b_zero, zero, b)
  ROOT lt = pred[] compare(a0, b0), direction=LT, type=TOTALORDER
}
ENTRY main {
  x = f32[2,5000] parameter(0)
  ROOT s = f32[2,5000] sort(x), dimensions={1}, is_stable=true, to_apply=cmp
}
"""


def test_a_long_stable_sort_without_an_iota_runs_with_the_expanders_iota(registry):
    """The stable-sort expander gives it an iota (fused into the sort's kernel), whose
    values keep -0.0 and 0.0 in their original order across the global steps."""
    from heron.hlo.evaluator import evaluate_module
    from heron.hlo.parser import parse_module

    rng = np.random.default_rng(5000)
    x = rng.choice(np.array([0.0, -0.0, 1.0, -1.0, np.nan], np.float32), (2, 5000))
    run = run_program(
        parse_module(LONG_SORT),
        [x],
        InterpreterDevice(warp_size=32),
        "interpreter",
        compiler=lambda fusion, target, backend: compile_fusion(
            fusion, target, backend, emitters=registry
        ),
    )
    assert [k.emitter for k in run.kernels] == ["sort"]
    want = np.asarray(evaluate_module(parse_module(LONG_SORT), [x]))
    (got,) = run.outputs
    assert np.asarray(got).tobytes() == want.tobytes()


@pytest.mark.parametrize(
    ("shape", "k", "emitter"),
    [("f32[1000]", 8, "topk_rows"), ("bf16[3,333]", 16, "topk_rows"), ("f32[2,40]", 17, "sort")],
)
def test_a_topk_runs_on_the_kernel_or_decomposed_as_the_decomposer_decides(
    shape, k, emitter, registry
):
    """XLA's conditions (k <= 16, f32/bf16, rank <= 2): the top-k library kernel (the top-k
    emitter's, for any row length); else sort + slices."""
    import ml_dtypes

    from heron.hlo.evaluator import evaluate_module
    from heron.hlo.parser import parse_module

    element, dims = shape.rstrip("]").split("[")
    sizes = tuple(int(d) for d in dims.split(","))
    out = ",".join([*dims.split(",")[:-1], str(k)])
    text = f"""
HloModule jit_top_k
ENTRY main {{
  x = {shape} parameter(0)
  t = ({element}[{out}], s32[{out}]) topk(x), k={k}, largest=true
  a = {element}[{out}] get-tuple-element(t), index=0
  b = s32[{out}] get-tuple-element(t), index=1
  ROOT r = ({element}[{out}], s32[{out}]) tuple(a, b)
}}
"""
    rng = np.random.default_rng(k)
    pool = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5], np.float32)
    dtype = np.float32 if element == "f32" else ml_dtypes.bfloat16
    x = rng.choice(pool, sizes).astype(dtype)
    run = run_program(
        parse_module(text),
        [x],
        InterpreterDevice(warp_size=32),
        "interpreter",
        compiler=lambda fusion, target, backend: compile_fusion(
            fusion, target, backend, emitters=registry
        ),
    )
    assert emitter in [kernel.emitter for kernel in run.kernels]
    expected = evaluate_module(parse_module(text), [x])
    for got, want in zip(run.outputs, expected, strict=True):
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
