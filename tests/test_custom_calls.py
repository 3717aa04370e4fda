"""Custom calls end to end: the example plugin's target through the evaluator, the
compiler, the artefact and heron-run, and every refusal on the way.

The example plugin (tests/plugin_fixture, ``heron_example.cumulative_logsumexp``)
is found through its ``heron.custom_calls`` entry point where the fixture is
installed with it; otherwise its specs are registered in code (the registry's
direct API), which is the same registry the evaluator, the compiler and the
executor ask.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from heron_example_plugin import custom_calls as example

from heron.compiler.executable import compile_program
from heron.hlo.custom_calls.call import CustomCallError, custom_call_of
from heron.hlo.custom_calls.hookspecs import GROUP, CustomCallSpec
from heron.hlo.custom_calls.registry import default_custom_calls, load_custom_calls, registered
from heron.hlo.errors import HloEvaluationError, UnsupportedError
from heron.hlo.evaluator import evaluate_module
from heron.hlo.npz_io import load_outputs, save_inputs
from heron.hlo.parser import parse_module
from heron.runtime.core import heron_run
from heron.runtime.core.executor import load_executable
from heron.runtime.core.registry import default_backends
from heron.runtime.core.thunks import CustomCallThunk, walk
from heron.target import Target

FIXTURE = Path(__file__).parent / "plugin_fixture"
H100 = Target.preset("h100")

#: The scan of the example target between two kernels: add, then negate (both exact,
#: so the whole program equals numpy bit for bit).
SCAN = """HloModule scan
ENTRY main {
  a = f32[4,8] parameter(0)
  b = f32[4,8] parameter(1)
  s = f32[4,8] add(a, b)
  cc = f32[4,8] custom-call(s), custom_call_target="heron_example.cumulative_logsumexp",
    backend_config="{\\"axis\\": 1}", api_version=API_VERSION_STATUS_RETURNING
  ROOT n = f32[4,8] negate(cc)
}
"""

#: The example target in a loop body: x <- 0.5 * cumulative_logsumexp(x), three times.
LOOP = """HloModule loop
body {
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[8] get-tuple-element(p), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  cc = f32[8] custom-call(x), custom_call_target="heron_example.cumulative_logsumexp"
  half = f32[] constant(0.5)
  h = f32[8] broadcast(half), dimensions={}
  y = f32[8] multiply(cc, h)
  ROOT t = (s32[], f32[8]) tuple(j, y)
}
cond {
  p = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  x = f32[8] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[8]) tuple(z, x)
  w = (s32[], f32[8]) while(t), condition=cond, body=body
  ROOT r = f32[8] get-tuple-element(w), index=1
}
"""

#: A call with two operands and a tuple result (a test-local target).
PAIR = """HloModule pair
ENTRY main {
  a = f32[6] parameter(0)
  b = s32[6] parameter(1)
  cc = (f32[6], s32[6]) custom-call(a, b), custom_call_target="test.running_extrema"
  hi = f32[6] get-tuple-element(cc), index=0
  lo = s32[6] get-tuple-element(cc), index=1
  ROOT r = (f32[6], s32[6]) tuple(hi, lo)
}
"""


def running_extrema(operands, call):
    a, b = operands
    return np.maximum.accumulate(a), np.minimum.accumulate(b)


def _rng_inputs(*shapes):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(shape).astype(np.float32) for shape in shapes]


@pytest.fixture
def example_calls():
    """The default registry, holding the example plugin's target (see the module docstring)."""
    registry = default_custom_calls()
    if example.TARGET in registry:  # installed with its heron.custom_calls entry point
        yield registry
        return
    with registered(*example.heron_custom_call_specs()) as registry:
        yield registry


def _compile(text: str, name: str):
    return compile_program(parse_module(text, name), H100, ("interpreter",))


def _device(artefact):
    return default_backends().create_device("interpreter", artefact.target)


def _heron_run(capsys, *argv: str) -> tuple[int, str, str]:
    code = heron_run.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- the example plugin ----------------------------------------------------------------


def test_the_fixture_declares_its_target_through_the_entry_point_group(tmp_path):
    """The fixture's pyproject entry point, loaded as installed metadata would give it."""
    project = tomllib.loads((FIXTURE / "pyproject.toml").read_text())["project"]
    declared = project["entry-points"][GROUP]
    assert declared == {"example": "heron_example_plugin.custom_calls"}
    info = tmp_path / "heron_example_plugin-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: heron-example-plugin\nVersion: 0.1.0\n"
    )
    (info / "entry_points.txt").write_text(
        f"[{GROUP}]\n" + "".join(f"{k} = {v}\n" for k, v in declared.items())
    )
    registry = load_custom_calls(path=[str(tmp_path)])
    assert registry.targets() == [example.TARGET]
    assert registry.origin(example.TARGET).distribution == "heron-example-plugin"
    x = _rng_inputs((3, 5))[0]
    scan = custom_call_of(
        parse_module(SCAN.replace("4,8", "3,5")).entry.root_instruction.operands[0]
    )
    (got,) = registry.invoke(scan, [x])
    np.testing.assert_array_equal(got, np.logaddexp.accumulate(x, axis=1))


def test_the_example_target_refuses_what_it_cannot_compute(example_calls):
    text = SCAN.replace('{\\"axis\\": 1}', '{\\"axis\\": 2}')
    with pytest.raises(
        HloEvaluationError, match=r"raised ValueError: axis 2 is not an axis of f32\[4,8\]"
    ):
        evaluate_module(parse_module(text), _rng_inputs((4, 8), (4, 8)))


# -- compile, artefact, heron-run ------------------------------------------------------


def test_a_custom_call_runs_through_compile_artefact_and_heron_run(example_calls, tmp_path, capsys):
    a, b = _rng_inputs((4, 8), (4, 8))
    expected = -np.logaddexp.accumulate(a + b, axis=1)
    module = parse_module(SCAN, "scan.hlo")
    np.testing.assert_array_equal(evaluate_module(module, [a, b]), expected)

    compiled = _compile(SCAN, "scan.hlo")
    (thunk,) = [t for t in walk(compiled.artefact.program) if isinstance(t, CustomCallThunk)]
    assert (thunk.target, thunk.name, thunk.computation) == (example.TARGET, "cc", "main")
    assert thunk.backend_config == '{"axis": 1}'
    assert thunk.api_version == "API_VERSION_STATUS_RETURNING"
    path = tmp_path / "scan.heron"
    compiled.artefact.save(path)
    inputs, out = tmp_path / "in.npz", tmp_path / "out.npz"
    save_inputs(inputs, [a, b])
    for extra in ([], ["--no-command-buffers"]):
        code, text, err = _heron_run(
            capsys, str(path), "--inputs", str(inputs), "--output", str(out), *extra
        )
        assert code == 0, err
        assert f"custom_call     custom call {example.TARGET} ('cc') (host)" in text
        (got,) = load_outputs(out)
        np.testing.assert_array_equal(got, expected)


def test_heron_run_check_runs_the_call_on_the_host_between_kernels(example_calls, tmp_path, capsys):
    """``heron run FILE.hlo --check``: the executable's custom-call thunk beside the evaluator."""
    from heron.cli.main import main

    source = tmp_path / "scan.hlo"
    # The call's result is an output too, so --check compares it directly.
    source.write_text(
        SCAN.replace(
            "ROOT n = f32[4,8] negate(cc)",
            "n = f32[4,8] negate(cc)\n  ROOT t = (f32[4,8], f32[4,8]) tuple(n, cc)",
        )
    )
    code = main(["run", str(source), "--check"])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "out1  max 0 ulp, max |difference| 0 (allowed: bitwise)" in text
    assert "agree: every output within the tolerance" in text


def test_a_custom_call_ends_a_command_buffer_and_the_results_still_agree(example_calls):
    a, b = _rng_inputs((4, 8), (4, 8))
    artefact = _compile(SCAN, "scan.hlo").artefact
    executable = load_executable(artefact, _device(artefact), min_graph_size=1)
    assert [t.kind for t in executable.program] == [
        "command_buffer",
        "custom_call",
        "command_buffer",
    ]
    for _ in range(2):  # recorded, then replayed around the host call
        (got,) = executable.run([a, b])
        np.testing.assert_array_equal(got, -np.logaddexp.accumulate(a + b, axis=1))
    records = [r for r in executable.stats.records if r.kind == "custom_call"]
    assert [(r.path, r.launch) for r in records] == [("1", "host")]
    assert executable.stats.command_buffers_replayed == 2


def test_a_custom_call_in_a_loop_body_runs_every_iteration(example_calls):
    (x,) = _rng_inputs((8,))
    expected = x
    for _ in range(3):
        expected = np.logaddexp.accumulate(expected) * np.float32(0.5)
    np.testing.assert_array_equal(evaluate_module(parse_module(LOOP), [x]), expected)
    artefact = _compile(LOOP, "loop.hlo").artefact
    executable = load_executable(artefact, _device(artefact))
    (got,) = executable.run([x])
    np.testing.assert_array_equal(got, expected)
    calls = [r for r in executable.stats.records if r.kind == "custom_call"]
    assert len(calls) == 3


def test_a_tuple_result_and_two_operands_reach_the_host_as_leaves():
    a = _rng_inputs((6,))[0]
    b = np.asarray([5, 3, 4, -2, 7, -9], np.int32)
    expected = (np.maximum.accumulate(a), np.minimum.accumulate(b))
    with registered(CustomCallSpec("test.running_extrema", running_extrema)):
        evaluated = evaluate_module(parse_module(PAIR), [a, b])
        artefact = _compile(PAIR, "pair.hlo").artefact
        got = load_executable(artefact, _device(artefact)).run([a, b])
    for value in (evaluated, got):
        np.testing.assert_array_equal(value[0], expected[0])
        np.testing.assert_array_equal(value[1], expected[1])


def test_operands_and_results_are_logical_whatever_the_layout():
    text = """HloModule lay, entry_computation_layout={(f32[4,8]{0,1})->f32[4,8]{0,1}}
ENTRY main {
  a = f32[4,8]{0,1} parameter(0)
  ROOT cc = f32[4,8]{0,1} custom-call(a), custom_call_target="test.row_sums"
}
"""
    seen = []

    def row_sums(operands, call):
        seen.append(np.array(operands[0]))
        return np.cumsum(operands[0], axis=1, dtype=np.float32)

    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    with registered(CustomCallSpec("test.row_sums", row_sums)):
        artefact = _compile(text, "layout.hlo").artefact
        (thunk,) = [t for t in walk(artefact.program) if isinstance(t, CustomCallThunk)]
        assert thunk.operand_shapes == ("f32[4,8]{0,1}",)  # column-major bytes on the device
        (got,) = load_executable(artefact, _device(artefact)).run([x])
    np.testing.assert_array_equal(seen[0], x)
    np.testing.assert_array_equal(got, np.cumsum(x, axis=1))


# -- refusals --------------------------------------------------------------------------


def test_an_unknown_target_is_refused_at_compile_time_by_name_and_place():
    text = SCAN.replace(example.TARGET, "nobody.provides_this")
    with pytest.raises(UnsupportedError) as info:
        _compile(text, "unknown.hlo")
    message = str(info.value)
    assert message.startswith(
        "unknown.hlo:6:3: error: custom-call 'cc' in computation 'main': custom_call_target"
        " 'nobody.provides_this' is provided by no installed plugin"
    )


def test_the_heron_command_refuses_an_unknown_target_with_status_2(tmp_path, capsys):
    from heron.cli.main import main

    source = tmp_path / "unknown.hlo"
    source.write_text(SCAN.replace(example.TARGET, "nobody.provides_this"))
    for argv in (
        ["run", str(source), "--backend", "reference"],
        ["run", str(source), "--check"],
        ["compile", str(source), "--executable", str(tmp_path / "x.heron")],
    ):
        code = main(argv)
        out, err = capsys.readouterr()
        assert code == 2, err
        assert "loop_add_fusion" not in out  # refused before any kernel ran
        assert (
            f"{source}:6:3: error: custom-call 'cc' in computation 'main': custom_call_target"
            in err
        )
        assert "'nobody.provides_this' is provided by no installed plugin" in err
        assert "Traceback" not in err


def test_heron_run_refuses_an_artefact_whose_target_is_not_installed(tmp_path, capsys):
    """Compiled where a target is registered; run where no plugin provides it: status 2."""
    target = "test.only_in_the_compiling_process"
    with registered(CustomCallSpec(target, example.cumulative_logsumexp)):
        artefact = _compile(SCAN.replace(example.TARGET, target), "scan.hlo").artefact
    path, inputs = tmp_path / "scan.heron", tmp_path / "in.npz"
    artefact.save(path)
    save_inputs(inputs, _rng_inputs((4, 8), (4, 8)))
    code, _, err = _heron_run(capsys, str(path), "--inputs", str(inputs))
    assert code == 2
    assert (
        f"heron-run: refused: custom-call 'cc' in computation 'main': custom_call_target '{target}'"
        in err
    )
    # The same in a fresh process, where only installed entry points can provide it.
    ran = subprocess.run(
        [sys.executable, "-m", "heron.runtime.core.heron_run", str(path), "--inputs", str(inputs)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 2, ran.stderr
    assert f"custom_call_target '{target}' is provided by no installed plugin" in ran.stderr
    assert "Traceback" not in ran.stderr


def test_a_plugin_returning_the_wrong_shape_at_run_time_is_named(tmp_path, capsys):
    target = "test.truncating"
    with registered(CustomCallSpec(target, lambda operands, call: operands[0][:, :4])):
        artefact = _compile(SCAN.replace(example.TARGET, target), "scan.hlo").artefact
        executable = load_executable(artefact, _device(artefact))
        with pytest.raises(CustomCallError) as info:
            executable.run(_rng_inputs((4, 8), (4, 8)))
        path, inputs = tmp_path / "scan.heron", tmp_path / "in.npz"
        artefact.save(path)
        save_inputs(inputs, _rng_inputs((4, 8), (4, 8)))
        code, _, err = _heron_run(capsys, str(path), "--inputs", str(inputs))
    assert str(info.value) == (
        f"custom-call 'cc' in computation 'main' (custom_call_target '{target}'): its host"
        " implementation (registered in code) returned a wrong result 0: float32[4, 4] where"
        " f32[4,8]{1,0} (numpy float32[4, 8]) is declared"
    )
    assert code == 2 and str(info.value) in err


def test_the_example_target_cannot_be_registered_twice(example_calls):
    (spec,) = example.heron_custom_call_specs()
    with pytest.raises(CustomCallError, match=f"'{example.TARGET}' is registered twice"):
        example_calls.register(spec)
    assert example.TARGET in example_calls  # the refused registration removed nothing


def test_heron_plugins_lists_the_installed_targets(tmp_path, monkeypatch, capsys):
    from heron.cli.main import main

    info = tmp_path / "heron_cli_calls-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: heron-cli-calls\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\ncalls = heron_cli_calls\n")
    (tmp_path / "heron_cli_calls.py").write_text(
        "from heron.hlo.custom_calls.hookspecs import CustomCallSpec, hookimpl\n"
        "@hookimpl\n"
        "def heron_custom_call_specs():\n"
        "    return CustomCallSpec('cli.copy', lambda operands, call: operands[0])\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    _, calls = out.split("custom-call targets (entry-point group heron.custom_calls")
    assert "  cli.copy  host  from heron-cli-calls 0.1 (calls = heron_cli_calls)" in calls
