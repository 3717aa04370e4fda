"""XLA's limit on the evaluations a fused kernel makes, on programs nobody here wrote.

jax's ``associative_scan`` is split into kernels as XLA splits it, and runs; and
XLA:GPU's own fusions of the program and model corpora keep within the count
heron makes of them (a count that overstated XLA's would show as one of them past
the limit XLA itself keeps to).

``tests/data/associative_scan_logaddexp.hlo`` is what JAX 0.10.2 prints for

    def f(x, w):
        c = jax.lax.associative_scan(jnp.logaddexp, x)
        return jnp.sum(jnp.exp(c - c[-1]) * w)

with ``x`` and ``w`` f32[256]: the scan's up-sweep halves the array by strided
slices level after level, its down-sweep reads every level back. Fused into one
kernel (heron before, as in jaxns's evidence sampler: seventeenth sweep), each
element evaluated the leaves along every level: 1.5 million evaluations, 20 s on
the interpreter for 256 elements, hours for jaxns's 1,300 in f64. XLA refuses a
fusion past 10,000 (its "IR size", :mod:`heron.compiler.fusion.emissions`) and
makes seven kernels of it.
"""

from __future__ import annotations

from pathlib import Path

from heron.cli.main import main
from heron.compiler import Target
from heron.compiler.executable import PipelineReport, prepare_module
from heron.compiler.fusion.context import count_kernels
from heron.compiler.fusion.emissions import MAX_EMISSIONS, count_emissions
from heron.hlo.parser import parse_module

SCAN = Path(__file__).parent / "data" / "associative_scan_logaddexp.hlo"
ROOT = Path(__file__).resolve().parents[1]


def test_no_kernel_of_the_scan_counts_more_evaluations_than_xla_allows() -> None:
    module, _ = prepare_module(
        parse_module(SCAN.read_text()), Target.preset("h100"), report=PipelineReport()
    )
    fusions = [i for c in module.computations for i in c.instructions if i.opcode == "fusion"]
    assert count_kernels(module) >= 3  # XLA: 7 (heron: 5)
    for fusion in fusions:
        assert count_emissions(fusion.called("calls")).total <= MAX_EMISSIONS, fusion.name


def test_the_scan_runs_on_the_interpreter_and_agrees_with_the_reference(capsys) -> None:
    status = main(["run", str(SCAN), "--backend", "interpreter", "--check", "--quiet"])
    assert status == 0, capsys.readouterr().out
    assert "agree: every output within the tolerance" in capsys.readouterr().out


def test_xla_gpus_fusions_of_the_corpora_keep_within_the_limit_by_herons_count() -> None:
    optimized = sorted(ROOT.glob("programs/*/xla_gpu_optimized.hlo")) + sorted(
        ROOT.glob("models/*/xla_gpu_optimized.hlo")
    )
    assert len(optimized) > 150
    counted = 0
    for path in optimized:
        for computation in parse_module(path.read_text()).computations:
            for inst in computation.instructions:
                if inst.opcode != "fusion":
                    continue
                body = inst.called("calls")
                if any(i.opcode == "fusion" for i in body.instructions):
                    continue  # a Triton GEMM's nest: not an emitter's elemental body
                counted += 1
                total = count_emissions(body).total
                assert total <= MAX_EMISSIONS, (path.parent.name, inst.name, total)
    assert counted > 1500
