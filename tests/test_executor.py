"""The outline pass (unfused modules get a fusion per instruction) and whole modules run
on the interpreter (:func:`heron.compiler.program_run.run_program`: an executable).

Results are compared with heron's reference evaluator on the same arguments;
the ops used (add, multiply, negate, broadcast, f32) round the same way on
both, so the comparison is exact.
"""

from __future__ import annotations

import numpy as np
import pytest

from heron.compiler.program_run import run_program
from heron.emitters.elemental.core import supported_opcodes
from heron.hlo.errors import UnsupportedError
from heron.hlo.evaluator import evaluate_module, flatten_literal, random_arguments
from heron.hlo.parser import parse_module
from heron.hlo.passes.outline import outline_module as _outline
from heron.hlo.printer import print_module
from heron.runtime.core.executor import ExecutorError


def outline_module(module):
    """The outline pass with the loop emitter's opcodes, as the executor runs it."""
    return _outline(module, supported_opcodes())


#: As JAX prints a jitted function: no fusions, a tuple root.
UNFUSED = (
    "HloModule jit_f, entry_computation_layout="
    "{(f32[8,16]{1,0}, f32[16]{0})->(f32[8,16]{1,0}, f32[8,16]{1,0})}\n"
    + """

ENTRY main.9 {
  Arg_0.1 = f32[8,16]{1,0} parameter(0)
  Arg_1.2 = f32[16]{0} parameter(1)
  broadcast.3 = f32[8,16]{1,0} broadcast(Arg_1.2), dimensions={1}
  add.4 = f32[8,16]{1,0} add(Arg_0.1, broadcast.3)
  constant.5 = f32[] constant(2)
  broadcast.6 = f32[8,16]{1,0} broadcast(constant.5), dimensions={}
  multiply.7 = f32[8,16]{1,0} multiply(add.4, broadcast.6)
  negate.8 = f32[8,16]{1,0} negate(multiply.7)
  ROOT tuple.9 = (f32[8,16]{1,0}, f32[8,16]{1,0}) tuple(multiply.7, negate.8)
}
"""
)

WITH_DOT = """\
HloModule jit_g

ENTRY main {
  a = f32[4,8]{1,0} parameter(0)
  b = f32[8,2]{1,0} parameter(1)
  n = f32[4,8]{1,0} negate(a)
  ROOT d = f32[4,2]{1,0} dot(n, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""

HOST_ONLY = """\
HloModule host_only

ENTRY main {
  x = f32[2,3]{1,0} parameter(0)
  y = s32[4]{0} parameter(1)
  t = (f32[2,3]{1,0}, s32[4]{0}) tuple(x, y)
  g = f32[2,3]{1,0} get-tuple-element(t), index=0
  b = f32[3,2]{0,1} bitcast(g)
  c = s32[] constant(7)
  ROOT r = (f32[3,2]{0,1}, s32[4]{0}, s32[]) tuple(b, y, c)
}
"""


def _interpreter():
    from heron.runtime.core.registry import load_backends

    return load_backends().create_device("interpreter")


# -- outline -----------------------------------------------------------------------------


def test_outline_gives_each_computing_instruction_a_loop_fusion():
    module = parse_module(UNFUSED)
    outlined = outline_module(module)
    entry = outlined.entry
    opcodes = {inst.name: inst.opcode for inst in entry.instructions}
    assert opcodes == {
        "Arg_0.1": "parameter",
        "Arg_1.2": "parameter",
        "broadcast.3": "fusion",
        "add.4": "fusion",
        "constant.5": "constant",
        "broadcast.6": "fusion",
        "multiply.7": "fusion",
        "negate.8": "fusion",
        "tuple.9": "tuple",
    }
    add = entry.instruction("add.4")
    assert add.attr("kind") == "kLoop"
    body = add.called("calls")
    assert body.name == "fused_add.4"
    assert [p.shape for p in body.parameters] == [o.shape for o in add.operands]
    assert body.root_instruction.opcode == "add"
    assert body.root_instruction.operands == body.parameters
    # The fusion's operands are the outlined producers, not the original instructions.
    assert add.operands[1] is entry.instruction("broadcast.3")
    # The original module is untouched, and the result prints and parses back the same.
    assert all(inst.opcode != "fusion" for inst in module.entry.instructions)
    assert parse_module(print_module(outlined)) == outlined


def test_outline_shares_one_parameter_for_a_repeated_operand():
    module = parse_module(
        "HloModule sq\n\nENTRY main {\n  x = f32[8] parameter(0)\n"
        "  ROOT m = f32[8] multiply(x, x)\n}\n"
    )
    fusion = outline_module(module).entry.root_instruction
    assert fusion.opcode == "fusion" and len(fusion.operands) == 1
    body = fusion.called("calls")
    (parameter,) = body.parameters
    assert body.root_instruction.operands == [parameter, parameter]


def test_outline_keeps_a_fused_module_as_it_is():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "examples" / "gelu.hlo").read_text()
    module = parse_module(text)
    outlined = outline_module(module)
    assert [i.opcode for i in outlined.entry.instructions] == ["parameter", "fusion"]
    assert outlined.entry.root_instruction.called("calls").name == "gelu"
    assert len(outlined.computations) == len(module.computations)


def test_outline_gives_a_dot_a_fusion_of_its_own():
    """A dot is a hero (the GEMM emitter's): its producer is not fused into it."""
    outlined = outline_module(parse_module(WITH_DOT))
    fusions = [i for i in outlined.entry.instructions if i.opcode == "fusion"]
    roots = [f.called("calls").root_instruction.opcode for f in fusions]
    assert roots == ["negate", "dot"]
    dot = fusions[1].called("calls").root_instruction
    assert [o.opcode for o in dot.operands] == ["parameter", "parameter"]


def test_outline_refuses_a_convolution_naming_it():
    text = """\
HloModule jit_conv

ENTRY main {
  a = f32[1,8,2]{2,1,0} parameter(0)
  w = f32[3,2,4]{2,1,0} parameter(1)
  ROOT c = f32[1,6,4]{2,1,0} convolution(a, w), window={size=3}, dim_labels=b0f_0io->b0f
}
"""
    with pytest.raises(UnsupportedError) as error:
        outline_module(parse_module(text))
    message = str(error.value)
    assert "'c' (convolution, f32[1,6,4]" in message
    assert "convolution-to-dot" in message and "not lowered" in message


def test_outline_skips_dead_instructions():
    text = WITH_DOT.replace("ROOT d = ", "d = ").replace("  n = ", "  ROOT n = ")
    outlined = outline_module(parse_module(text))
    assert [i.name for i in outlined.entry.instructions] == ["a", "b", "n"]


# -- running a whole module ----------------------------------------------------------------


def test_host_ops_run_without_kernels():
    module = parse_module(HOST_ONLY)
    arguments = random_arguments(module, seed=1)
    result = run_program(module, arguments, _interpreter(), "interpreter")
    assert result.kernels == () and result.kernel_launches == 0
    expected = flatten_literal(evaluate_module(module, arguments))
    assert len(result.outputs) == 3
    for actual, reference in zip(result.outputs, expected, strict=True):
        assert actual.dtype == reference.dtype and np.array_equal(actual, reference)
    # The bitcast to [3,2] with layout {0,1} reads the row-major [2,3] buffer: a transpose.
    assert np.array_equal(result.outputs[0], arguments[0].T)


def test_unfused_module_runs_kernel_by_kernel_on_the_interpreter():
    module = parse_module(UNFUSED)
    arguments = random_arguments(module, seed=3)
    seen = []
    result = run_program(
        module, arguments, _interpreter(), "interpreter", on_thunk=lambda _, r: seen.append(r)
    )
    # The GPU pipeline fuses the whole chain into one loop kernel with two
    # outputs (multiply.7 is both an output and negate.8's operand).
    assert [k.fusion_name for k in result.kernels] == ["loop_multiply_fusion"]
    assert result.module.entry.root_instruction.opcode == "tuple"
    assert [record for _, record in result.thunks] == seen
    assert [r.kind for r in seen].count("kernel") == result.kernel_launches == 1
    assert all(k.emitter == "loop" and k.launches == 1 for k in result.kernels)
    assert all(k.run_seconds >= 0 for k in result.kernels)
    assert all(k.grid[0] * k.block[0] >= 1 for k in result.kernels)
    expected = flatten_literal(evaluate_module(module, arguments))
    assert len(result.outputs) == 2
    for actual, reference in zip(result.outputs, expected, strict=True):
        assert actual.dtype == np.float32
        assert np.array_equal(actual, reference)


def test_wrong_argument_count_is_refused():
    module = parse_module(UNFUSED)
    with pytest.raises(ExecutorError, match=r"takes 2 parameters .*given 1 inputs"):
        run_program(module, random_arguments(module)[:1], _interpreter(), "interpreter")


def test_mulhi_kernels_of_every_width_equal_the_evaluator():
    """mulhi (lax.mulhi) through heron's kernels on the interpreter, sub-byte and 64-bit
    types included, against the evaluator's exact products."""
    types = ["s4", "u4", "s8", "u16", "s32", "u32", "s64", "u64"]
    params = ", ".join(f"{t}[33]{{0}}, {t}[33]{{0}}" for t in types)
    results = ", ".join(f"{t}[33]{{0}}" for t in types)
    body = "\n".join(
        f"  a{k} = {t}[33]{{0}} parameter({2 * k})\n  b{k} = {t}[33]{{0}} parameter({2 * k + 1})\n"
        f"  m{k} = {t}[33]{{0}} mulhi(a{k}, b{k})"
        for k, t in enumerate(types)
    )
    tuple_operands = ", ".join(f"m{k}" for k in range(len(types)))
    module = parse_module(
        f"HloModule mulhi, entry_computation_layout={{({params})->({results})}}\n"
        f"ENTRY main {{\n{body}\n  ROOT t = ({results}) tuple({tuple_operands})\n}}\n"
    )
    arguments = random_arguments(module, seed=3)
    expected = flatten_literal(evaluate_module(module, arguments))
    result = run_program(module, arguments, _interpreter(), "interpreter")
    assert len(result.outputs) == len(types)
    for actual, reference in zip(result.outputs, expected, strict=True):
        assert np.array_equal(actual, reference)
