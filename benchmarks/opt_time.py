"""heron's HLO pipeline time per program, beside XLA:GPU's deviceless compile of the same module.

For every program of the program corpus (``programs/*/module.hlo``, as JAX
printed it) and for a generated module of about 10,000 instructions, it times
``--runs`` times (median): parsing the text, then heron's HLO pipeline on it
(``heron opt --target h100``'s: :func:`heron.compiler.fusion.gpu_pipeline`,
the target-independent passes then the GPU fusion passes). With ``--xla`` (needs
``heron[xla]`` or ``HERON_XLA_PYTHON``, docs/xla.md) it also compiles each
module with XLA:GPU, deviceless, for an H100 in the same run and reports XLA's
own ``PJRT_Compile`` time, the median of ``--runs`` workers. The two are not
the same work: XLA's figure includes its code generation and LLVM; heron's
stops at the optimized HLO. Both are given so that the passes' share can be
judged, not as a race.

Both sides are timed warm: before any timed compile heron compiles another
module once in this process, and each XLA worker compiles one before the timed
module (:data:`heron.xla_compare.xla_side.WARM_UP_MODULE`, the same module for
both), so neither figure holds what its compiler pays once per process. (Until
the eighteenth session XLA's figure was a fresh worker's first compile, 40-60 ms
of start-up included: docs/benchmarks.md, "Warm against warm".)

A program whose top-k launches heron's top-k library kernel (docs/emitters.md) is timed
with that kernel built, as XLA's ``__gpu$TopK`` is built with XLA: the kernel is built
once per Target and backend, by the first run that needs it unless an earlier process
left it in the store (``HERON_KERNEL_STORE``), and the line after the table says how
many this run built.

With ``--full`` heron's figure is the whole compile XLA's is compared with:
parsing, then :func:`heron.compiler.executable.compile_program` for the h100
preset and the CUDA backend alone (the pipeline, scheduling, buffer
assignment, thunks, every kernel emitted, lowered and compiled to PTX, and to
a cubin where ptxas is installed, as XLA's compile ends in one).

Run: ``python benchmarks/opt_time.py [--runs N] [--xla] [--full [--library-fallbacks]]
[--only NAME,...] [--slowest N] [--models] [--stages]`` (``--models``: the model corpus,
flax/equinox/haiku programs, instead of the program corpus; ``--stages`` with ``--full``:
the HLO passes and kernel stages summed over the modules, where the time goes);
single top-k and sort fusions of GPU size (``--heavy``: issue 32 asks each under 1 s):
``python benchmarks/opt_time.py --heavy --full --xla``;
the generated module alone, at another size:
``python benchmarks/opt_time.py --only generated --instructions 2000 --runs 1 --slowest 3``
(priority fusion keeps a queue of producers updated around each rewrite and
multi-output fusion a worklist, so the 10,000-instruction module takes minutes,
not hours).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from benchlib.progress import tracked
from benchlib.selection import selected

from heron.hlo.builder import ModuleBuilder
from heron.hlo.ir import Module
from heron.hlo.parser import parse_module
from heron.hlo.passes import run_pipeline
from heron.hlo.printer import print_module
from heron.hlo.shapes import array_shape

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "programs"
MODELS = ROOT / "models"


def heron_pipeline():
    """The pipeline ``heron opt`` runs for the h100 preset (the GPU one when it exists)."""
    from heron.compiler import Target
    from heron.compiler.fusion import gpu_pipeline

    return "gpu (h100): simplification + fusion", gpu_pipeline(Target.preset("h100"))


def generated_module(instructions: int = 10_000, seed: int = 0) -> Module:
    """A JAX-like module of about ``instructions`` instructions: layers of elementwise
    ops, broadcasts of repeated constants, row reductions and their broadcasts back."""
    rng = np.random.default_rng(seed)
    shape = array_shape("f32", (64, 256))
    mb = ModuleBuilder(f"generated_{instructions}")
    add = mb.computation("add")
    add.add(add.parameter(array_shape("f32", ())), add.parameter(array_shape("f32", ())))
    add_fn = add.build()
    main = mb.computation("main")
    x = main.parameter(shape)
    w = main.parameter(shape)
    zero = main.constant(np.float32(0))
    while len(main.instructions) < instructions:
        scale = main.broadcast(main.constant(np.float32(rng.uniform(0.5, 2))), shape.dims, ())
        y = main.tanh(main.add(main.multiply(x, w), scale))
        total = main.reduce([y], [zero], dimensions=(1,), to_apply=add_fn)
        mean = main.broadcast(total, shape.dims, (0,))
        centred = main.subtract(y, mean)
        x = main.add(main.multiply(centred, centred), x)
    main.build(x)
    return mb.build(entry=main)


def time_heron(
    text: str, runs: int, pipeline_factory, full: bool = False, library_fallbacks: bool = False
) -> tuple[float, float, int, list[tuple[str, float]], object | None]:
    """Median seconds to parse, median seconds for the pipeline (``full``: the whole
    compile), instructions after it (``full``: kernels), the passes of the last run by
    the seconds they took (slowest first; none with ``full``), and with ``full`` the
    median run's :class:`~heron.compiler.executable.CompileProfile` (else None)."""
    parse_times, pipeline_times = [], []
    module = None
    passes: list[tuple[str, float]] = []
    profiles = []
    count = 0
    for _ in tracked(range(runs), "runs"):
        start = time.perf_counter()
        module = parse_module(text)
        parse_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        if full:
            compiled = compile_for_h100(module, library_fallbacks)
            pipeline_times.append(time.perf_counter() - start)
            count = len(compiled.artefact.kernels)
            profiles.append(compiled.profile)
            continue
        report = run_pipeline(module, pipeline_factory())
        pipeline_times.append(time.perf_counter() - start)
        passes = sorted(
            ((record.path, record.seconds) for record in report.records),
            key=lambda entry: -entry[1],
        )
        count = sum(len(c.instructions) for c in module.computations)
    profile = sorted(profiles, key=lambda p: p.seconds)[len(profiles) // 2] if profiles else None
    return (
        statistics.median(parse_times),
        statistics.median(pipeline_times),
        count,
        passes,
        profile,
    )


def print_stages(profiles: list) -> None:
    """The HLO passes and kernel stages of ``profiles`` (each module's median run), summed
    over the modules, the slowest first: where the whole compile's time goes."""
    passes: dict[str, float] = {}
    stages: dict[str, float] = {}
    for profile in profiles:
        for record in profile.passes.records:
            name = record.path.rsplit("/", 1)[-1]
            passes[name] = passes.get(name, 0.0) + record.seconds
        for name, _, seconds in profile.stages:
            stages[name] = stages.get(name, 0.0) + seconds
    whole = sum(p.seconds for p in profiles)
    hlo = sum(p.passes.seconds for p in profiles)
    print(
        f"\nsummed over {len(profiles)} modules (each module's median run): whole {whole:.2f} s,"
        f" HLO passes {hlo:.2f} s, kernel stages {sum(stages.values()):.2f} s"
        " (LLVM and ptxas on workers, beside emission)"
    )
    for title, table in (("HLO pass", passes), ("kernel stage", stages)):
        for name, seconds in sorted(table.items(), key=lambda item: -item[1])[:15]:
            print(f"  {title:12} {name:40} {seconds:8.3f}")


#: Single-fusion modules of GPU size whose kernels were the slowest to compile (issue 32:
#: "top-k and sort fusions under 1 s"): name, jax function, shape.
HEAVY = (
    ("top_k_16_f32_1024x32768", "top_k", 16, (1024, 32768)),
    ("top_k_8_f32_32768x4096", "top_k", 8, (32768, 4096)),
    ("sort_f32_256x16384", "sort", 0, (256, 16384)),
    ("sort_f32_16384x1024", "sort", 0, (16384, 1024)),
    ("argsort_f32_256x16384", "argsort", 0, (256, 16384)),
)


def heavy_modules() -> list[tuple[str, str]]:
    """The :data:`HEAVY` functions as jax lowers them for the CPU (one sort or top-k each)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    from heron.jax.lowering import lower

    functions = {
        "top_k": lambda k: lambda x: lax.top_k(x, k),
        "sort": lambda k: lambda x: jnp.sort(x, axis=-1),
        "argsort": lambda k: lambda x: jnp.argsort(x, axis=-1),
    }
    return [
        (name, lower(functions[kind](k), jax.ShapeDtypeStruct(shape, jnp.float32)).hlo_text)
        for name, kind, k, shape in HEAVY
    ]


def compile_for_h100(module: Module, library_fallbacks: bool = False):
    """heron's whole compile of ``module`` for the h100 preset, CUDA kernels only
    (``library_fallbacks``: heron's GEMM kernel beside each library call too, as every
    compile made it before the twelfth session): the CompiledExecutable."""
    from heron.compiler import Target
    from heron.compiler.executable import compile_program
    from heron.indexing import forget_memos

    forget_memos()  # each run compiles cold: no indexing map remembered from the previous run
    return compile_program(
        module, Target.preset("h100"), backends=("cuda",), library_fallbacks=library_fallbacks
    )


def time_xla(text: str, installation, runs: int) -> float | None:
    """The median of ``runs`` warm XLA:GPU compiles of ``text`` (one worker each)."""
    from heron.xla_compare.targets import target_config
    from heron.xla_compare.xla_side import XlaCompileError, time_xla_compile

    seconds = []
    for _ in range(runs):
        try:
            seconds.append(time_xla_compile(text, target_config("h100"), installation))
        except XlaCompileError as exc:
            print(f"  XLA refused it: {exc}", file=sys.stderr)
            return None
    return statistics.median(seconds)


def xla_columns(text: str, installation, runs: int, heron_seconds: float) -> str:
    """A table row's XLA columns (its seconds and heron's ratio to them), empty without an
    installation or where XLA refuses the module."""
    if installation is None:
        return ""
    xla_s = time_xla(text, installation, runs)
    return f" {xla_s:>8.2f} {heron_seconds / xla_s:>9.2f}" if xla_s else ""


def warm_up_heron(full: bool) -> None:
    """Compile the XLA timing's warm-up module once, untimed: the imports and what heron
    sets up once per process are not the first timed module's."""
    from heron.xla_compare.xla_side import WARM_UP_MODULE

    module = parse_module(WARM_UP_MODULE)
    if full:
        compile_for_h100(module)
        compile_for_h100(parse_module(WARM_UP_MODULE))  # each kernel worker served once
    else:
        run_pipeline(module, heron_pipeline()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--xla", action="store_true", help="also time XLA:GPU's compile")
    parser.add_argument("--only", help="comma-separated programs (or 'generated')")
    parser.add_argument("--instructions", type=int, default=10_000)
    parser.add_argument("--no-generated", action="store_true", help="the corpus programs only")
    parser.add_argument(
        "--heavy",
        action="store_true",
        help="instead of the corpus: single top-k and sort fusions of GPU size (HEAVY)",
    )
    parser.add_argument(
        "--models",
        action="store_true",
        help="instead of the program corpus: the model corpus (models/*/module.hlo)",
    )
    parser.add_argument(
        "--full", action="store_true", help="time heron's whole compile to kernels, not its passes"
    )
    parser.add_argument(
        "--library-fallbacks",
        action="store_true",
        help="with --full: compile heron's GEMM kernel beside each library call too",
    )
    parser.add_argument(
        "--slowest", type=int, default=0, metavar="N", help="print each module's N slowest passes"
    )
    parser.add_argument(
        "--stages",
        action="store_true",
        help="with --full: the HLO passes and kernel stages summed over the modules",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="with --full: heron's passes of programs with several kernels on N worker"
        " processes (HERON_COMPILE_WORKERS; default: the environment's, else none)",
    )
    args = parser.parse_args(argv)
    if args.workers is not None:
        from heron.compiler.kernel_workers import WORKERS_ENV

        os.environ[WORKERS_ENV] = str(args.workers)
    label, _ = heron_pipeline()
    installation = None
    if args.xla:
        from heron.xla_compare import find_xla

        installation = find_xla()
    cases = [(p.name, (p / "module.hlo").read_text()) for p in sorted(PROGRAMS.iterdir())
             if (p / "module.hlo").exists()]  # fmt: skip
    if args.heavy:
        cases = heavy_modules()
    elif args.models:
        cases = [(p.name, (p / "module.hlo").read_text()) for p in sorted(MODELS.iterdir())
                 if (p / "module.hlo").exists()]  # fmt: skip
    elif not args.no_generated:
        cases.append(("generated", print_module(generated_module(args.instructions))))
    if args.only:
        by_name = dict(cases)
        cases = [(name, by_name[name]) for name in selected(parser, args.only, by_name, "module")]
    if args.full:
        label = "the whole compile for h100 (CUDA kernels)"
    print(f"heron: {label}; median of {args.runs} runs; 2-core machine, no GPU")
    work, after = ("compile s", "kernels") if args.full else ("passes s", "instr. after")
    header = f"{'module':30} {'lines':>7} {'parse s':>8} {work:>9} {after:>12}"
    print(header + (f" {'XLA compile s':>13} {'heron/XLA':>9}" if args.xla else ""))
    ratios, totals, profiles = [], [], []
    warm_up_heron(args.full)
    for name, text in tracked(cases, "modules"):
        parse_s, passes_s, count, passes, profile = time_heron(
            text,
            args.runs,
            lambda: heron_pipeline()[1],
            full=args.full,
            library_fallbacks=args.library_fallbacks,
        )
        line = f"{name:30} {text.count(chr(10)):>7} {parse_s:>8.3f} {passes_s:>9.3f} {count:>12}"
        totals.append(parse_s + passes_s)
        if installation is not None:
            xla_s = time_xla(text, installation, args.runs)
            if xla_s:
                ratios.append((parse_s + passes_s) / xla_s)
                line += f" {xla_s:>13.3f} {(parse_s + passes_s) / xla_s:>9.2f}"
        print(line, flush=True)
        for path, seconds in passes[: args.slowest]:
            print(f"    {path:60} {seconds:>8.3f}")
        if profile is not None:
            profiles.append(profile)
    median = statistics.median(totals)
    print(f"median heron (parse + {work.split()[0]}) over {len(totals)} modules: {median:.3f} s")
    if ratios:
        print(f"median heron/XLA: {statistics.median(ratios):.2f}")
    if args.full:
        from heron.compiler.library_kernels import default_store

        store = default_store()
        print(
            f"library kernels built by this run: {store.built} (kept in"
            f" {store.folder or 'this process only'}: a module's later runs launch what its"
            " first built)"
        )
    if args.stages and profiles:
        print_stages(profiles)
    return 0


if __name__ == "__main__":
    sys.exit(main())
