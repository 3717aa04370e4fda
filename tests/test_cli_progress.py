"""Progress on long work: drawn on a terminal only, fed by the packages' plain callbacks.

Without a terminal (pipes, files, pytest's capture) nothing is drawn and the
commands' output is exactly the report; with one, rich draws bars. The
callbacks the packages expose (the interpreter's blocks, the executor's
thunks) are told of the work in order.
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from heron.cli import progress
from heron.cli.main import main
from heron.cli.progress import ProgressDisplay

ROOT = Path(__file__).resolve().parents[1]

#: A loop kernel over 64 Ki elements: 512 blocks of 128 threads.
WIDE = """\
HloModule wide

neg {
  p = f32[65536]{0} parameter(0)
  ROOT r = f32[65536]{0} negate(p)
}

ENTRY main {
  x = f32[65536]{0} parameter(0)
  ROOT y = f32[65536]{0} fusion(x), kind=kLoop, calls=neg
}
"""


#: Three loop fusions in a chain, as XLA prints a fused module (kept as they are).
CHAIN = """\
HloModule chain

neg1 {
  p = f32[64]{0} parameter(0)
  ROOT r = f32[64]{0} negate(p)
}

abs2 {
  p = f32[64]{0} parameter(0)
  ROOT r = f32[64]{0} abs(p)
}

twice3 {
  p = f32[64]{0} parameter(0)
  ROOT r = f32[64]{0} add(p, p)
}

ENTRY main {
  x = f32[64]{0} parameter(0)
  a = f32[64]{0} fusion(x), kind=kLoop, calls=neg1
  b = f32[64]{0} fusion(a), kind=kLoop, calls=abs2
  ROOT c = f32[64]{0} fusion(b), kind=kLoop, calls=twice3
}
"""


def heron(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- quiet without a terminal -----------------------------------------------------------


def test_nothing_is_drawn_without_a_terminal(capsys):
    assert not progress.enabled()  # pytest captures stdout and stderr
    with ProgressDisplay() as display:
        assert not display.active
        assert display.task("work", 3) is None
        assert display.launches() is None and display.thunks(4) is None

        def compile_one(x: int) -> int:
            return x + 1

        assert ProgressDisplay.counting(compile_one, None) is compile_one
    assert capsys.readouterr() == ("", "")


def test_quiet_wins_over_a_terminal(monkeypatch):
    monkeypatch.setattr(progress, "_is_terminal", lambda stream: True)
    assert progress.enabled()
    progress.set_quiet(True)
    try:
        assert not progress.enabled() and not ProgressDisplay().active
    finally:
        progress.set_quiet(False)


def test_check_output_without_a_terminal_is_the_report_byte_for_byte(corpus_dir, capsys):
    """What ``heron check`` printed before progress existed: the report's text, nothing else."""
    from heron.harness import CheckOptions, check_file

    path = corpus_dir / "common" / "loop" / "vectorize_x4.hlo"
    expected = check_file(path, CheckOptions(seed=3)).text() + "\n"
    for quiet in ((), ("--quiet",)):
        code, out, err = heron(capsys, *quiet, "check", str(path), "--seed", "3")
        assert (code, out, err) == (0, expected, "")


def test_piped_output_has_no_progress(tmp_path):
    """A real process with pipes (not terminals): no escape codes, no bars, stderr empty."""
    path = tmp_path / "wide.hlo"
    path.write_text(WIDE)
    command = [sys.executable, "-m", "heron.cli.main", "run", str(path), "--backend"]
    piped = subprocess.run([*command, "interpreter"], capture_output=True, text=True, check=False)
    assert piped.returncode == 0, piped.stderr
    assert piped.stderr == ""
    assert "\x1b" not in piped.stdout and "━" not in piped.stdout
    quiet = subprocess.run(
        [*command, "interpreter", "--quiet"], capture_output=True, text=True, check=False
    )
    assert _timeless(quiet.stdout) == _timeless(piped.stdout)


def _timeless(text: str) -> list[str]:
    """The report without its timings (the only thing two runs may differ in)."""
    return [
        line.split("  compile ")[0].split(" in ")[0]
        for line in text.splitlines()
        if not line.startswith("  command buffer")
    ]


@pytest.mark.skipif(shutil.which("script") is None, reason="util-linux 'script' (a pty) absent")
def test_on_a_terminal_the_bars_are_drawn_and_erased(tmp_path):
    """Under a pseudo-terminal (``script``): the launch's bar counts blocks, then is erased."""
    path = tmp_path / "wide.hlo"
    path.write_text(WIDE)
    command = f"{sys.executable} -m heron.cli.main run {path} --backend interpreter"
    shown = subprocess.run(
        ["script", "-qec", command, "/dev/null"], capture_output=True, text=True, check=False
    )
    assert shown.returncode == 0, shown.stdout[-2000:]
    assert "kernel y: blocks" in shown.stdout  # the launch of fusion y's kernel
    assert "512/512" in shown.stdout  # over its blocks, to the last (drawn when it stops)
    assert "ran 1 kernel(s)" in shown.stdout
    quiet = subprocess.run(
        ["script", "-qec", command + " --quiet", "/dev/null"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert quiet.returncode == 0 and "━" not in quiet.stdout and "\x1b" not in quiet.stdout


# -- the callbacks ------------------------------------------------------------------------


def _wide_kernel():
    from heron.compiler import Target
    from heron.compiler.driver import compile_fusion
    from heron.hlo.parser import parse_module
    from heron.runtime.interpreter.device import InterpreterDevice

    module = parse_module(WIDE)
    kernel = compile_fusion(module.entry.root_instruction, Target.preset("h100"), "interpreter")
    device = InterpreterDevice(max_lanes=128 * 96)  # 96 blocks a batch: 6 batches
    return device, device.load_kernel(kernel.image), kernel


def test_the_interpreter_tells_each_batch_of_blocks_in_order():
    device, loaded, kernel = _wide_kernel()
    x = np.arange(65536, dtype=np.float32)
    source, result = device.allocate(x.nbytes), device.allocate(x.nbytes)
    device.copy_to_device(source, x.tobytes())
    told: list[tuple[str, int, int]] = []
    device.progress = lambda name, done, total: told.append((name, done, total))
    device.launch(loaded, kernel.grid, kernel.block, [source, result])
    assert [t[1] for t in told] == [96, 192, 288, 384, 480, 512]  # increasing, to the grid
    assert {t[2] for t in told} == {512} and {t[0] for t in told} == {kernel.kernel_name}
    assert np.array_equal(device.copy_from_device(result).view(np.float32), -x)
    device.progress = None  # and without a callback nothing is called
    device.launch(loaded, kernel.grid, kernel.block, [source, result])
    assert len(told) == 6


def test_the_executor_tells_each_thunk_as_it_runs():
    from heron.compiler import Target
    from heron.compiler.executable import compile_program
    from heron.hlo.parser import parse_module
    from heron.runtime.core.executor import Executable
    from heron.runtime.interpreter.device import InterpreterDevice

    compiled = compile_program(parse_module(CHAIN), Target.preset("h100"), ("interpreter",))
    executable = Executable(
        compiled.artefact, InterpreterDevice(), "interpreter", command_buffers=False
    )
    told = []
    executable.on_thunk = lambda thunk, record: told.append((thunk.kind, record.path))
    executable.run([np.linspace(-1, 1, 64, dtype=np.float32)])
    assert told == [("kernel", "0"), ("kernel", "1"), ("kernel", "2")]  # in program order
    assert len(told) == len(executable.stats.records)


# -- rendering ----------------------------------------------------------------------------


def test_rich_renders_the_bars_on_a_terminal_console():
    file = io.StringIO()
    console = Console(force_terminal=True, file=file, width=100, color_system=None)
    with ProgressDisplay(console) as display:
        assert display.active
        files = display.task("checking", 4)
        files.advance()
        files.advance(description="checking b.hlo")
        launches = display.launches()
        launches("fusion_3", 256, 1024)
        thunks = display.thunks(None)
        thunks(
            type("T", (), {"kind": "kernel"})(), type("R", (), {"kind": "kernel", "path": "0"})()
        )
    drawn = file.getvalue()
    assert "checking b.hlo" in drawn and "2/4" in drawn
    assert "kernel fusion_3: blocks" in drawn and "256/1024" in drawn
    assert "thunks (kernel 0)" in drawn and "1/?" in drawn
    assert "━" in drawn  # the bar itself


def test_counting_advances_once_per_call():
    file = io.StringIO()
    console = Console(force_terminal=True, file=file, width=100, color_system=None)
    with ProgressDisplay(console) as display:
        bar = display.task("compiling kernels")
        counted = ProgressDisplay.counting(lambda x: x * 2, bar)
        assert [counted(i) for i in range(3)] == [0, 2, 4]
    assert "compiling kernels" in file.getvalue() and "3/?" in file.getvalue()
