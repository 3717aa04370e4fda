"""No Python exception crosses the boundary into MLIR (heron.emitters.callbacks).

Rewrite patterns, Python passes and walk visitors that raise fail cleanly and
the exception comes back as heron's ``UnsupportedError`` naming the callback
and the op; the bindings' attribute caster no longer aborts the process on a
complex dense attribute; the complex-constant fusions that used to abort pass
``heron check`` (run in a subprocess, so that a regression shows as a signal
instead of killing the test run).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from mlir import ir, passmanager, rewrite

from heron.emitters import callbacks
from heron.emitters.callbacks import CallbackError, CallbackGuard
from heron.emitters.ir_utils import walk_ops
from heron.emitters.pipeline import PipelineOptions, inline, run_passes
from heron.emitters.pipeline.manager import Pass
from heron.hlo.errors import UnsupportedError

ROOT = Path(__file__).resolve().parents[3]
RELIABILITY = ROOT / "tests" / "data" / "reliability"

ADD = """
func.func @f(%a: i32) -> i32 {
  %b = arith.addi %a, %a : i32 loc("adder")
  return %b : i32
}
"""

COMPLEX_CONSTANT = """
func.func @f() -> tensor<2xcomplex<f32>> {
  %c = arith.constant dense<[(2.0, 0.0), (0.0, 1.0)]> : tensor<2xcomplex<f32>>
  return %c : tensor<2xcomplex<f32>>
}
"""


class Boom(Exception):
    pass


def test_raising_pattern_is_a_clean_heron_error(ctx):
    module = ir.Module.parse(ADD)
    calls = []

    def explode(op, rewriter):
        calls.append(op)
        raise Boom("pattern went off")

    guard = CallbackGuard()
    patterns = rewrite.RewritePatternSet()
    callbacks.add_pattern(patterns, "arith.addi", explode, guard, name="explode-addi")
    with pytest.raises(CallbackError) as caught:
        callbacks.apply_patterns(module, patterns, guard)
    error = caught.value
    assert isinstance(error, UnsupportedError)
    assert error.callback == "pattern 'explode-addi'"
    assert "op 'arith.addi'" in error.op and "adder" in error.op
    assert "Boom: pattern went off" in str(error)
    assert isinstance(error.__cause__, Boom)
    assert len(calls) == 1  # once failed, the pattern fails at once: no retries
    assert not guard.failed  # reported, and cleared
    module.operation.verify()  # the IR is left valid


def test_raising_python_pass_is_a_clean_heron_error(ctx):
    module = ir.Module.parse(ADD)

    def explode(op, pass_):
        raise Boom("pass went off")

    guard = CallbackGuard()
    manager = passmanager.PassManager("builtin.module")
    callbacks.add_pass(manager, explode, guard, name="explode-pass")
    with pytest.raises(CallbackError) as caught, guard:
        manager.run(module.operation)
    error = caught.value
    assert error.callback == "pass 'explode-pass'"
    assert "op 'builtin.module'" in error.op
    assert "pass went off" in str(error)
    assert isinstance(error.__cause__, Boom)


def test_pass_that_signals_failure_and_then_succeeds_in_python(ctx):
    """A guarded pass that fails as MLIR expects (signal_pass_failure) stays MLIR's error."""
    module = ir.Module.parse(ADD)
    guard = CallbackGuard()
    manager = passmanager.PassManager("builtin.module")
    callbacks.add_pass(manager, lambda op, p: p.signal_pass_failure(), guard, name="quiet")
    with pytest.raises(ir.MLIRError), guard:
        manager.run(module.operation)


def test_raising_walk_visitor_keeps_the_exception(ctx):
    module = ir.Module.parse(ADD)

    def visit(op):
        if op.name == "arith.addi":
            raise UnsupportedError("no adds today")
        return ir.WalkResult.ADVANCE

    with pytest.raises(CallbackError) as caught:
        callbacks.walk(module.operation, visit, name="no-adds")
    error = caught.value
    assert error.callback == "walk 'no-adds'"
    assert "no adds today" in str(error) and "UnsupportedError" not in str(error)
    assert isinstance(error.original, UnsupportedError)


def test_keyboard_interrupt_is_not_turned_into_a_heron_error(ctx):
    module = ir.Module.parse(ADD)

    def visit(op):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        callbacks.walk(module.operation, visit, name="interrupted")


def test_a_raising_pass_in_the_pipeline_names_itself(ctx):
    module = ir.Module.parse(ADD)

    def run(module, options):
        callbacks.walk(module.operation, lambda op: 1 / 0, name="divide")

    with pytest.raises(UnsupportedError, match="pass 'divider': walk 'divide' failed on op"):
        run_passes(module, [Pass("divider", run)], PipelineOptions())


def test_named_attribute_of_a_complex_dense_constant_reads_in_process(ctx):
    """``NamedAttribute.attr`` used to abort here; the caster now hands a DenseElementsAttr."""
    module = ir.Module.parse(COMPLEX_CONSTANT)
    (constant,) = walk_ops(module.operation, "arith.constant")
    value = constant.attributes[0].attr
    assert isinstance(value, ir.DenseElementsAttr)
    assert str(value.type) == "tensor<2xcomplex<f32>>"
    assert isinstance(constant.attributes["value"], ir.DenseElementsAttr)
    # The caster still gives the specific classes where they exist.
    assert isinstance(ir.Attribute.parse("dense<[1.0]> : tensor<1xf32>"), ir.DenseFPElementsAttr)
    assert isinstance(ir.Attribute.parse("dense<[1]> : tensor<1xi4>"), ir.DenseIntElementsAttr)
    # The pass that read it first (its symbol-reference scan) runs.
    inline.run(module, PipelineOptions())


def _run_python(code: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def _assert_no_signal(result: subprocess.CompletedProcess) -> None:
    assert result.returncode >= 0, (
        f"killed by {signal.Signals(-result.returncode).name}:\n{result.stderr[-2000:]}"
    )
    assert "terminate called" not in result.stderr, result.stderr[-2000:]


def test_named_attribute_cast_does_not_abort_in_a_fresh_process():
    result = _run_python(
        """
        import sys
        import heron.emitters.callbacks
        from mlir import ir
        with ir.Context():
            module = ir.Module.parse(sys.argv[1])
            op = module.body.operations[0].regions[0].blocks[0].operations[0]
            print(type(op.attributes[0].attr).__name__)
        """,
        COMPLEX_CONSTANT,
    )
    _assert_no_signal(result)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "DenseElementsAttr"


@pytest.mark.parametrize(
    "name",
    [
        "mlir_complex_constant_c64.hlo",
        "mlir_complex_constant_c128.hlo",
        "mlir_array_constant_f32_1d.hlo",
    ],
)
def test_array_constant_fusions_pass_heron_check(name):
    pytest.importorskip("heron.cli.main")
    pytest.importorskip("heron.runtime.interpreter")
    path = RELIABILITY / name
    result = _run_python(
        f"""
        from heron.cli.main import main
        raise SystemExit(main(["check", {str(path)!r}, "--backend", "interpreter"]))
        """
    )
    _assert_no_signal(result)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all agree" in result.stdout


@pytest.mark.parametrize("et", ["c64", "c128"])
def test_complex_array_constant_on_the_host_matches_the_evaluator(et):
    """Emitted as two float constants and a complex.create: bit-exact through an add."""
    from heron_test_support.elemental_cases import run_both

    text = (
        f"%f (p0: {et}[2,3]) -> {et}[2,3] {{\n"
        f"  %p0 = {et}[2,3] parameter(0)\n"
        f"  %c = {et}[2,3] constant({{{{(1.5, -2), (0, 1), (-0.25, 3)}}, "
        f"{{(7, 0), (1e-30, -1e30), (-0, 0.5)}}}})\n"
        f"  ROOT %r = {et}[2,3] add(%p0, %c)\n}}\n"
    )
    x = (np.arange(6) - 2.5 + 1j * (np.arange(6) * 0.75 - 1)).reshape(2, 3)
    x = x.astype(np.complex64 if et == "c64" else np.complex128)
    (got,), (want,) = run_both(text, [x])
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert np.signbit(np.asarray(got).real).tolist() == np.signbit(np.asarray(want).real).tolist()


def test_complex_constant_lowers_to_float_globals():
    """After lower-tensors: two f32 globals, no global of complex elements."""
    pytest.importorskip("heron.cli.main")
    result = _run_python(
        f"""
        from heron.cli.main import main
        path = {str(RELIABILITY / "mlir_complex_constant_c64.hlo")!r}
        raise SystemExit(main(["emit", path, "--after", "lower-tensors"]))
        """
    )
    _assert_no_signal(result)
    assert result.returncode == 0, result.stderr
    globals_ = [line for line in result.stdout.splitlines() if "memref.global" in line]
    assert len(globals_) == 2, result.stdout
    assert all("xf32>" in line and "complex" not in line for line in globals_), globals_
    assert "complex.create" in result.stdout


#: Ways of handing MLIR a Python callback; only heron.emitters.callbacks may use them directly.
RAW_REGISTRATIONS = re.compile(
    r"\.walk\((?!\))|RewritePatternSet|apply_patterns_and_fold_greedily|walk_and_apply_patterns"
    r"|register_type_caster|register_value_caster|PassManager\([^)]*\)\s*\.add\(|\bpm\.add\("
)


def test_every_callback_registration_goes_through_the_guard():
    """A new raw ``walk``/pattern/pass/caster registration in shipped code fails here."""
    offenders = []
    for path in sorted((ROOT / "packages").glob("*/src/heron/**/*.py")):
        if path.name == "callbacks.py" and path.parent.name == "emitters":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if RAW_REGISTRATIONS.search(code):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "use heron.emitters.callbacks:\n" + "\n".join(offenders)


def test_collect_ops_finds_every_op_or_those_of_one_name_or_of_a_set():
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(
            "func.func @f(%a: i32) -> i32 {\n"
            "  %b = arith.addi %a, %a : i32\n"
            "  %c = arith.addi %b, %a : i32\n"
            "  return %c : i32\n}"
        )
        every = callbacks.collect_ops(module.operation, label="test")
        assert [op.name for op in every] == [
            "builtin.module",
            "func.func",
            "arith.addi",
            "arith.addi",
            "func.return",
        ]
        assert len(callbacks.collect_ops(module.operation, "arith.addi", label="test")) == 2
        names = frozenset({"arith.addi", "func.return"})
        assert [op.name for op in callbacks.collect_ops(module.operation, names, label="t")] == [
            "arith.addi",
            "arith.addi",
            "func.return",
        ]


def test_collect_ops_reraises_what_its_visitor_raised_naming_the_walk():
    class Unequal:
        def __eq__(self, other):
            raise ValueError("cannot compare")

    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse("func.func @f() {\n  return\n}")
        with pytest.raises(callbacks.CallbackError, match="walk 'probe' failed on op") as info:
            callbacks.collect_ops(module.operation, Unequal(), label="probe")  # type: ignore[arg-type]
        assert isinstance(info.value.original, ValueError)
