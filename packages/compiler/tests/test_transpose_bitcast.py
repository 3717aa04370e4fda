"""The ``transpose-bitcast`` pass: a transpose that moves no byte and that no kernel reads
becomes a bitcast; one a kernel reads stays, to be fused into that kernel."""

from __future__ import annotations

import numpy as np
import pytest

from heron.compiler import Target
from heron.compiler.executable import compile_program
from heron.compiler.fusion import fusion_pipeline
from heron.compiler.fusion.transpose_bitcast import transposes_as_bitcasts
from heron.hlo.evaluator import evaluate_module, random_arguments
from heron.hlo.parser import parse_module
from heron.hlo.passes import run_pipeline


def _module(body: str, result: str) -> str:
    return f"HloModule m, entry_computation_layout={{(f32[32,48]{{1,0}})->{result}}}\n" + (
        f"ENTRY main {{\n  x = f32[32,48]{{1,0}} parameter(0)\n{body}}}\n"
    )


def _same_values(text: str, changed) -> None:
    original = parse_module(text)
    for seed in range(2):
        arguments = random_arguments(original, np.random.default_rng(seed))
        expected, got = evaluate_module(original, arguments), evaluate_module(changed, arguments)
        for a, b in zip(
            expected if isinstance(expected, tuple) else (expected,),
            got if isinstance(got, tuple) else (got,),
            strict=True,
        ):
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


OUTPUT = _module("  ROOT t = f32[48,32]{0,1} transpose(x), dimensions={1,0}\n", "f32[48,32]{0,1}")
IN_A_TUPLE = _module(
    "  t = f32[48,32]{0,1} transpose(x), dimensions={1,0}\n"
    "  n = f32[32,48]{1,0} negate(x)\n"
    "  ROOT r = (f32[48,32]{0,1}, f32[32,48]{1,0}) tuple(t, n)\n",
    "(f32[48,32]{0,1}, f32[32,48]{1,0})",
)
READ_BY_A_KERNEL = _module(
    "  t = f32[48,32]{0,1} transpose(x), dimensions={1,0}\n  ROOT n = f32[48,32]{1,0} negate(t)\n",
    "f32[48,32]{1,0}",
)
MOVES_BYTES = _module(
    "  ROOT t = f32[48,32]{1,0} transpose(x), dimensions={1,0}\n", "f32[48,32]{1,0}"
)


@pytest.mark.parametrize(
    ("text", "becomes_a_bitcast"),
    [(OUTPUT, True), (IN_A_TUPLE, True), (READ_BY_A_KERNEL, False), (MOVES_BYTES, False)],
    ids=["output", "in-a-tuple", "read-by-a-kernel", "moves-bytes"],
)
def test_which_transposes_become_bitcasts(text: str, becomes_a_bitcast: bool) -> None:
    module = parse_module(text)
    assert transposes_as_bitcasts(module) is becomes_a_bitcast
    opcodes = {i.opcode for i in module.entry.instructions}
    assert ("transpose" not in opcodes) is becomes_a_bitcast
    assert ("bitcast" in opcodes) is becomes_a_bitcast
    _same_values(text, module)


def test_an_output_transpose_moving_no_byte_needs_no_kernel() -> None:
    """XLA compiles jax's ``x.T`` laid out ``{0,1}`` as a copy of the buffer: so does heron
    (programs/transpose_2d), and the executable gives the transposed values."""
    module = parse_module(OUTPUT)
    run_pipeline(module, fusion_pipeline(Target.preset("h100")))
    assert [i.opcode for i in module.entry.instructions] == ["parameter", "bitcast"]
    compiled = compile_program(parse_module(OUTPUT), Target.preset("h100"), ("interpreter",))
    assert not compiled.artefact.kernels


def test_a_transpose_a_kernel_reads_is_fused_into_it() -> None:
    module = parse_module(READ_BY_A_KERNEL)
    run_pipeline(module, fusion_pipeline(Target.preset("h100")))
    fusions = [i for i in module.entry.instructions if i.opcode == "fusion"]
    assert len(fusions) == 1
    assert "transpose" in {i.opcode for i in fusions[0].called("calls").instructions}
