"""Compile time and interpreter time per hero emitter.

Compile time: every corpus file, grouped by the hero its folder names; each
fusion is compiled for the h100 preset (sm_90) to PTX, through
``heron.compiler.compile_fusion`` up to its ``ptx`` stage (no ptxas),
``--runs`` times, the file's figure being the median. Per hero the table gives
the median file and the worst file. The baseline, in the same run, is the loop
emitter (alone in the emitter registry) on the same fusions (the naive
code every hero replaces): the ratio is what the hero's structure (shared
memory, shuffles, atomics, several loops) costs the compiler.

Interpreter time: one mid-size fusion per hero (about 1M elements read),
compiled once, then run ``--runs`` times on the interpreter device with
``run_on_device``; median, and the elements read per second (the inputs'
elements over the interpreter's time; issue 14 asks for at least 5M/s on a
2-core machine). Baselines measured in the same process: the reference
evaluator on the same inputs, and the loop emitter's kernel for the same
fusion on the interpreter (where the loop emitter can express it). A last row,
``long thread loop``, is the interpreter's pathological case: a reduction the
loop emitter computes inside each of its few threads (a reduce to a scalar
broadcast to f32[4]: 4 threads, each looping over all 30,000 inputs with a
pairwise-summation tree), so that the cost is per operation per iteration on
4 lanes, not per element; its time grows linearly with the input.

Run: ``python benchmarks/heroes.py [--runs N] [--only compile|interpreter]``.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections import defaultdict
from collections.abc import Callable

from benchlib.progress import tracked

from heron.compiler import Target, compile_fusion, fusions_of, run_on_device
from heron.emitters import selection
from heron.emitters.registry import EmitterRegistry
from heron.harness.corpus import corpus_files, default_corpus, expected_emitter
from heron.hlo.evaluator import evaluate_module, random_arguments
from heron.hlo.parser import parse_module, parse_module_file
from heron.runtime.core.registry import default_backends

#: The device every figure is for (sm_90; the interpreter emulates its 32-lane warps).
TARGET = Target.preset("h100")

ADD = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"

#: One mid-size fusion per hero: (hero, HLO text).
MID_SIZE = (
    ("loop", "f {\n  p = f32[1024,1024] parameter(0)\n  ROOT e = f32[1024,1024] exponential(p)\n}"),
    (
        "transpose",
        "f {\n  p = f32[1024,1024] parameter(0)\n"
        "  ROOT t = f32[1024,1024] transpose(p), dimensions={1,0}\n}",
    ),
    (
        "reduce_row",
        ADD + "f {\n  p = f32[1024,1024] parameter(0)\n  z = f32[] constant(0)\n"
        "  ROOT r = f32[1024] reduce(p, z), dimensions={1}, to_apply=add\n}",
    ),
    (
        "reduce_multirow",
        ADD + "f {\n  p = f32[262144,4] parameter(0)\n  z = f32[] constant(0)\n"
        "  ROOT r = f32[262144] reduce(p, z), dimensions={1}, to_apply=add\n}",
    ),
    (
        "reduce_column",
        ADD + "f {\n  p = f32[1024,1024] parameter(0)\n  z = f32[] constant(0)\n"
        "  ROOT r = f32[1024] reduce(p, z), dimensions={0}, to_apply=add\n}",
    ),
    (
        "reduce_column_small",
        ADD + "f {\n  p = f32[1024,128,8] parameter(0)\n  z = f32[] constant(0)\n"
        "  ROOT r = f32[1024,8] reduce(p, z), dimensions={1}, to_apply=add\n}",
    ),
    (
        "concatenate",
        "f {\n  a = f32[512,1024] parameter(0)\n  b = f32[512,1024] parameter(1)\n"
        "  ROOT c = f32[1024,1024] concatenate(a, b), dimensions={0}\n}",
    ),
    (
        "dynamic_update_slice",
        "f {\n  p = f32[1024,1024] parameter(0)\n  u = f32[512,1024] parameter(1)\n"
        "  i = s32[] parameter(2)\n  j = s32[] parameter(3)\n"
        "  ROOT d = f32[1024,1024] dynamic-update-slice(p, u, i, j)\n}",
    ),
    (
        "scatter",
        ADD + "f {\n  p = f32[1024,1024] parameter(0)\n  i = s32[1024,1] parameter(1)\n"
        "  u = f32[1024,1024] parameter(2)\n"
        "  ROOT s = f32[1024,1024] scatter(p, i, u), update_window_dims={1},"
        " inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1,"
        " to_apply=add\n}",
    ),
)


#: The pathological case: few threads, each looping over the whole input (see the docstring).
LONG_LOOP = (
    "long thread loop",
    ADD + "f {\n  p = f32[30000] parameter(0)\n  z = f32[] constant(0)\n"
    "  r = f32[] reduce(p, z), dimensions={0}, to_apply=add\n"
    "  ROOT b = f32[4] broadcast(r), dimensions={}\n}",
)


def _rate(per_second: float) -> str:
    """Elements per second, in millions (thousands below 100,000)."""
    if per_second >= 1e5:
        return f"{per_second / 1e6:.1f}M"
    return f"{per_second / 1e3:.1f}k"


def _median(action: Callable[[], object], runs: int) -> float:
    times = []
    for _ in tracked(range(runs), "runs"):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@functools.cache
def _loop_only() -> EmitterRegistry:
    """The installed emitters with only the loop emitter left (the baseline's registry)."""
    full = selection.default_registry()
    return EmitterRegistry([(s, None) for s in full.specs if s.name == "loop"])


def _compile_all(fusions, emitters: EmitterRegistry | None = None) -> None:
    for fusion in fusions:
        compile_fusion(fusion, TARGET, stop_after="ptx", emitters=emitters)


def _time_or_none(action: Callable[[], object], runs: int) -> float | None:
    try:
        return _median(action, runs)
    except Exception:
        return None


def compile_table(runs: int) -> None:
    per_hero: dict[str, list[tuple[float, float | None, str]]] = defaultdict(list)
    for path in corpus_files(default_corpus()):
        fusions = fusions_of(parse_module_file(path))
        hero_time = _median(lambda f=fusions: _compile_all(f), runs)
        loop_time = _time_or_none(lambda f=fusions: _compile_all(f, _loop_only()), runs)
        per_hero[expected_emitter(path)].append((hero_time, loop_time, path.name))
    print(f"compile time per hero (emit + passes + PTX for sm_90; median of {runs} per file)")
    print(
        f"{'hero':<22}{'files':>6}{'median s':>10}{'worst s':>9}  {'worst file':<38}"
        f"{'loop-emitter median s':>22}{'ratio':>7}"
    )
    for hero, rows in sorted(per_hero.items()):
        times = [t for t, _, _ in rows]
        worst = max(rows)
        baselines = [b for _, b, _ in rows if b is not None]
        paired = [t / b for t, b, _ in rows if b]
        base = f"{statistics.median(baselines):.3f}" if baselines else "-"
        ratio = f"{statistics.median(paired):.2f}" if paired else "-"
        print(
            f"{hero:<22}{len(rows):>6}{statistics.median(times):>10.3f}{worst[0]:>9.3f}"
            f"  {worst[2]:<38}{base:>22}{ratio:>7}"
        )


def _interpreter_run(fusion, arguments, runs: int, emitters=None) -> float:
    kernel = compile_fusion(fusion, TARGET, "interpreter", emitters=emitters)
    device = default_backends().create_device("interpreter", TARGET)
    loaded = device.load_kernel(kernel.image)
    return _median(lambda: run_on_device(device, kernel, arguments, loaded=loaded), runs)


def interpreter_table(runs: int) -> None:
    print(f"\ninterpreter time per hero (mid-size fusion; median of {runs} runs)")
    print(
        f"{'hero':<22}{'chosen':<22}{'elements':>10}{'hero s':>9}{'elements/s':>12}{'loop s':>9}"
        f"{'reference s':>13}{'hero/ref':>10}"
    )
    for hero, text in (*MID_SIZE, LONG_LOOP):
        module = parse_module(text, source=f"{hero}.hlo")
        (fusion,) = fusions_of(module)
        arguments = random_arguments(module, seed=0)
        if hero == "scatter":  # in-bounds row indices
            arguments[1] = (arguments[1].astype("int64") % 1024).astype(arguments[1].dtype)
        if hero == "dynamic_update_slice":
            arguments[2] = arguments[2] * 0 + 100
            arguments[3] = arguments[3] * 0
        elements = sum(a.size for a in arguments)
        chosen = selection.select_emitter(selection.analyse_fusion(fusion, TARGET)).name
        reference = _median(lambda m=module, a=arguments: evaluate_module(m, a), runs)
        try:
            measured = _interpreter_run(fusion, arguments, runs)
            seconds = f"{measured:.3f}"
            rate = _rate(elements / measured)
            ratio = f"{measured / reference:.1f}"
        except Exception as exc:
            seconds, rate, ratio = f"({type(exc).__name__})", "-", "-"
        loop: float | None = None
        if chosen != "loop":  # the loop emitter's own kernel is the row itself
            try:
                loop = _interpreter_run(fusion, arguments, runs, _loop_only())
            except Exception:
                loop = None
        loop_text = f"{loop:.3f}" if loop is not None else "-"
        print(
            f"{hero:<22}{chosen:<22}{elements:>10}{seconds:>9}{rate:>12}{loop_text:>9}"
            f"{reference:>13.3f}{ratio:>10}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=("compile", "interpreter"))
    options = parser.parse_args()
    if options.only != "interpreter":
        compile_table(options.runs)
    if options.only != "compile":
        interpreter_table(options.runs)


if __name__ == "__main__":
    main()
