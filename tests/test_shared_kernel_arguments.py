"""A kernel handed one buffer for an input and an output is compiled knowing it.

The buffer assignment may put a fusion's output over one of its inputs outside the
kernel's own in-place pairs: a while body's new state element over the old one, and an
update of a donated parameter (``input_output_alias``) written into the parameter's
buffer. Thunk emission sees the overlapping slices and compiles that kernel with those
arguments *shared* (``heron.shares_buffer``): for the ``cuda`` backend their LLVM
pointers are neither ``noalias`` nor ``readonly``, so no load of the shared buffer goes
through the non-coherent read-only cache (``ld.global.nc``), while the kernel of the
same fusion on buffers of its own keeps both. The results are the reference
evaluator's on the interpreter.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from heron_test_support.programs import kernel_compiler

from heron.compiler import Target
from heron.compiler.executable import CompiledExecutable, compile_program
from heron.compiler.thunk_emission import _identity
from heron.hlo.evaluator import evaluate_module, flatten_literal
from heron.hlo.parser import parse_module
from heron.runtime.core.executor import load_executable
from heron.runtime.core.thunks import KernelThunk, WhileThunk
from heron.runtime.interpreter import InterpreterDevice

TARGET = Target.preset("h100")
_COMPILER = kernel_compiler()


def _compile(text: str) -> CompiledExecutable:
    return compile_program(parse_module(text), TARGET, ("cuda", "interpreter"), compiler=_COMPILER)


def _artefact(compiled: CompiledExecutable, key: str, stage: str) -> str:
    (emitted,) = [e for e in compiled.program.kernels if e.key == key]
    (artefact,) = [a for a in emitted.compiled["cuda"].artefacts if a.stage == stage]
    return artefact.data.decode()


def _define(compiled: CompiledExecutable, key: str) -> list[str]:
    """The kernel's LLVM pointer arguments, as the ``define`` prints them."""
    (define,) = re.findall(
        r"^define ptx_kernel void @\w+\((.*)\)", _artefact(compiled, key, "llvm-ir"), re.M
    )
    return define.split(", ")


def _global_loads(ptx: str) -> dict[int, list[str]]:
    """Kernel parameter number -> the global loads whose address is computed from it.

    A small taint walk over the PTX: a register loaded from ``_param_K`` holds
    parameter K's pointer, and so does every register an instruction (not a load)
    computes from one; a ``ld.global`` is charged to the parameters its address uses.
    """
    taint: dict[str, set[int]] = {}
    loads: dict[int, list[str]] = {}
    for line in ptx.splitlines():
        line = line.strip().rstrip(";")
        if not line or line.startswith(("//", ".", "{", "}")):
            continue
        op, _, rest = line.partition(" ")
        if op.startswith("ld.param"):
            param = re.search(r"_param_(\d+)\]", rest)
            dest = re.match(r"\s*(%\w+)", rest)
            if param and dest:
                taint[dest.group(1)] = {int(param.group(1))}
            continue
        if op.startswith("ld.global"):
            address = re.search(r"\[(%\w+)", rest)
            for k in taint.get(address.group(1), set()) if address else set():
                loads.setdefault(k, []).append(op)
            continue
        if op.startswith(("st.", "ret", "bra", "@")):
            continue
        registers = re.findall(r"%\w+", rest)
        if len(registers) >= 2:
            sources = set().union(*(taint.get(r, set()) for r in registers[1:]))
            if sources:
                taint[registers[0]] = sources
    return loads


def _run(compiled: CompiledExecutable, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    executable = load_executable(compiled.artefact, InterpreterDevice(), "interpreter")
    return executable.run(args)


def _matches_the_evaluator(compiled: CompiledExecutable, text: str, args) -> None:
    expected = list(flatten_literal(evaluate_module(parse_module(text), args)))
    got = _run(compiled, args)
    for k, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert a.tobytes() == np.ascontiguousarray(b).tobytes(), f"result {k}"


def _launches(thunks) -> list[KernelThunk]:
    found = []
    for thunk in thunks:
        if isinstance(thunk, KernelThunk):
            found.append(thunk)
        elif isinstance(thunk, WhileThunk):
            found.extend(_launches(thunk.condition))
            found.extend(_launches(thunk.body))
    return found


def _shared_launch(compiled: CompiledExecutable) -> KernelThunk:
    """The one launch that hands its kernel an input's slice as its output."""
    (launch,) = [
        t
        for t in _launches(compiled.artefact.program)
        if t.arguments[-1] in t.arguments[:-1] and t.arguments[-1].size > 4
    ]
    return launch


# -- the donated SGD step -------------------------------------------------------------------


def _sgd_text(donate: bool) -> str:
    jax = pytest.importorskip("jax")

    def sgd(p, g):
        return p - 0.1 * g

    args = [np.zeros(1024, np.float32)] * 2
    traced = jax.jit(sgd, donate_argnums=(0,) if donate else (), keep_unused=True).trace(*args)
    return traced.lower(lowering_platforms=("cpu",)).compiler_ir("hlo").as_hlo_text()


def test_a_donated_sgd_step_writes_over_its_parameter_without_noalias_or_nc_loads() -> None:
    donated_text, plain_text = _sgd_text(True), _sgd_text(False)
    assert "input_output_alias" in donated_text and "input_output_alias" not in plain_text
    donated, plain = _compile(donated_text), _compile(plain_text)
    args = [np.linspace(-3, 3, 1024, dtype=np.float32), np.linspace(1, 2, 1024, dtype=np.float32)]
    _matches_the_evaluator(donated, donated_text, args)
    _matches_the_evaluator(plain, plain_text, args)

    launch = _shared_launch(donated)
    p = launch.arguments.index(launch.arguments[-1])  # the parameter p's argument
    g = 1 - p
    kernel = donated.program.kernels[0].compiled["cuda"]
    assert kernel.shared_arguments == {p, 2}
    define = _define(donated, launch.image_key)
    assert define[g].startswith("ptr noalias readonly align 16")
    assert define[p].startswith("ptr align 16") and define[2].startswith("ptr align 16")
    loads = _global_loads(_artefact(donated, launch.image_key, "ptx"))
    assert loads[g] and all(op.startswith("ld.global.nc") for op in loads[g])
    assert loads[p] and not any(op.startswith("ld.global.nc") for op in loads[p])

    # The same fusion on buffers of its own: every input noalias readonly, nc loads only.
    (kernel,) = [e.compiled["cuda"] for e in plain.program.kernels]
    assert kernel.shared_arguments == frozenset()
    (emitted,) = plain.program.kernels
    define = _define(plain, emitted.key)
    assert [d.split(" align")[0] for d in define] == [
        "ptr noalias readonly",
        "ptr noalias readonly",
        "ptr noalias",
    ]
    loads = _global_loads(_artefact(plain, emitted.key, "ptx"))
    assert sorted(loads) == [0, 1]
    assert all(op.startswith("ld.global.nc") for ops in loads.values() for op in ops)


# -- a while loop whose body writes its state element in place ------------------------------

# The body's x - d/2 is written over x (elementwise: copy insertion allows it); the entry
# computes the same fusion once before the loop into a buffer of its own.
LOOP = """
HloModule stepping, entry_computation_layout={(f32[256]{0}, f32[256]{0})->f32[256]{0}}

%body (p: (s32[], f32[256], f32[256])) -> (s32[], f32[256], f32[256]) {
  %p = (s32[], f32[256]{0}, f32[256]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %x = f32[256]{0} get-tuple-element(%p), index=1
  %d = f32[256]{0} get-tuple-element(%p), index=2
  %half = f32[] constant(0.5)
  %h = f32[256]{0} broadcast(%half), dimensions={}
  %s = f32[256]{0} multiply(%d, %h)
  %y = f32[256]{0} subtract(%x, %s)
  ROOT %t = (s32[], f32[256]{0}, f32[256]{0}) tuple(%next, %y, %d)
}

%cond (p: (s32[], f32[256], f32[256])) -> pred[] {
  %p = (s32[], f32[256]{0}, f32[256]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant(5)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

ENTRY %main (a: f32[256], d: f32[256]) -> f32[256] {
  %a = f32[256]{0} parameter(0)
  %d = f32[256]{0} parameter(1)
  %half = f32[] constant(0.5)
  %h = f32[256]{0} broadcast(%half), dimensions={}
  %s = f32[256]{0} multiply(%d, %h)
  %first = f32[256]{0} subtract(%a, %s)
  %zero = s32[] constant(0)
  %init = (s32[], f32[256]{0}, f32[256]{0}) tuple(%zero, %first, %d)
  %w = (s32[], f32[256]{0}, f32[256]{0}) while(%init), condition=%cond, body=%body
  ROOT %out = f32[256]{0} get-tuple-element(%w), index=1
}
"""


def test_a_loop_state_written_in_place_is_compiled_as_shared_and_its_twin_is_not() -> None:
    compiled = _compile(LOOP)
    args = [np.linspace(-1, 1, 256, dtype=np.float32), np.linspace(0, 4, 256, dtype=np.float32)]
    _matches_the_evaluator(compiled, LOOP, args)

    launch = _shared_launch(compiled)
    x = launch.arguments.index(launch.arguments[-1])
    d = 1 - x
    by_key = {e.key: e for e in compiled.program.kernels}
    inside = by_key[launch.image_key]
    assert inside.compiled["cuda"].shared_arguments == {x, 2}
    # The entry's fusion before the loop is the same fusion (one kernel before), launched
    # on buffers of its own: another kernel, compiled as ever.
    (outside,) = [
        e
        for e in compiled.program.kernels
        if e is not inside and _identity(e.fusion) == _identity(inside.fusion)
    ]
    assert outside.compiled["cuda"].shared_arguments == frozenset()

    define = _define(compiled, inside.key)
    assert define[d].startswith("ptr noalias readonly align 16")
    assert define[x].startswith("ptr align 16") and define[2].startswith("ptr align 16")
    loads = _global_loads(_artefact(compiled, inside.key, "ptx"))
    assert loads[x] and not any(op.startswith("ld.global.nc") for op in loads[x])
    assert all(op.startswith("ld.global.nc") for op in loads[d])

    define = _define(compiled, outside.key)
    assert [a.split(" align")[0] for a in define] == [
        "ptr noalias readonly",
        "ptr noalias readonly",
        "ptr noalias",
    ]
    loads = _global_loads(_artefact(compiled, outside.key, "ptx"))
    assert sorted(loads) == [0, 1]
    assert all(op.startswith("ld.global.nc") for ops in loads.values() for op in ops)
