"""The fused module heron's HLO pipeline makes of every corpus file, for proving a
change to the fusion passes leaves their decisions alone.

A change meant to make the fusion passes faster (issue 32: priority fusion's
pair keys, composed prices and bounded queue) must fuse exactly as before.
This writes, for every program of ``programs/``, every model of ``models/``,
every file of the XLA corpus (``$HERON_CORPUS``, else ``../shared/corpus/xla``
beside the repository) and a generated module (:func:`opt_time.generated_module`),
for each target, the module after ``heron opt --target``'s pipeline
(:func:`heron.compiler.fusion.program_pipeline`) as text, one file each, and
``times.tsv`` (the pipeline's seconds per file). Run it before and after the
change into two folders and compare them (``diff -r``): the files must be
byte-identical (``times.tsv`` aside).

Run: ``python benchmarks/fusion_dumps.py OUT [--targets h100,mi300x]
[--only SUBSTRING] [--generated 2000]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

from opt_time import generated_module

from heron.cli.common import load_module
from heron.compiler import Target
from heron.compiler.fusion import program_pipeline
from heron.hlo.passes import run_pipeline
from heron.hlo.printer import print_module

ROOT = Path(__file__).resolve().parent.parent


def _corpus() -> Path:
    override = os.environ.get("HERON_CORPUS")
    return Path(override) if override else ROOT.parent / "shared" / "corpus" / "xla"


def cases(generated: int) -> list[tuple[str, Path | None]]:
    """(file name of the dump, HLO file or None for the generated module)."""
    corpus = _corpus()
    found = [
        *sorted(ROOT.glob("programs/*/module.hlo")),
        *sorted(ROOT.glob("models/*/module.hlo")),
        *sorted(corpus.rglob("*.hlo")),
    ]
    named: list[tuple[str, Path | None]] = []
    for path in found:
        base = corpus.parent if path.is_relative_to(corpus) else ROOT
        named.append((str(path.relative_to(base)).replace("/", "__"), path))
    if generated:
        named.append((f"generated_{generated}", None))
    return named


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--targets", default="h100,mi300x")
    parser.add_argument("--only", help="only the files whose dump name holds this")
    parser.add_argument("--generated", type=int, default=2000, help="0: none")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    todo = [c for c in cases(args.generated) if not args.only or args.only in c[0]]
    with (args.out / "times.tsv").open("a") as times:
        for name in args.targets.split(","):
            target = Target.preset(name)
            for dump, path in todo:
                try:
                    module = (
                        generated_module(args.generated) if path is None else load_module(str(path))
                    )
                    start = time.perf_counter()
                    run_pipeline(module, program_pipeline(module, target))
                    seconds = time.perf_counter() - start
                    text = print_module(module)
                except Exception:  # noqa: BLE001 - a refusal is a decision too: dump it
                    text, seconds = "ERROR\n" + traceback.format_exc(limit=3), -1.0
                (args.out / f"{name}__{dump}.txt").write_text(text)
                times.write(f"{name}\t{dump}\t{seconds:.3f}\n")
                times.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
