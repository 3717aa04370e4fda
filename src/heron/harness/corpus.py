"""The XLA corpus as an acceptance suite: hero choice, device code, and agreement, per file.

Every ``.hlo`` file under the corpus (``../shared/corpus/xla``) sits in a folder
named after the hero XLA picks for it. For each file this module answers the
three questions of the acceptance criteria, and never drops a file: a failure
is a row with the reason, not a missing row.

1. hero: the emitter heron selects for each fusion, against the folder's;
2. device code: for each of :data:`CORPUS_TARGETS` (the a100, h100 and
   mi300x presets: sm_80, sm_90, gfx942), a full compile
   (:func:`heron.compiler.compile_fusion`): PTX that ptxas accepts, as a
   cubin, and an HSACO (an AMDGPU ELF);
3. agreement: ``heron check`` on the interpreter against the reference
   evaluator. A fusion too large for the host (``--max-elements``) is refused
   at full size and checked on a shrunk copy; the row says so.

``python -m heron.harness.corpus docs/corpus.md`` regenerates the table in the
docs; tests/test_corpus_*.py assert the same three results file by file in CI.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import attrs

__all__ = [
    "CORPUS_TARGETS",
    "FOLDER_EMITTER",
    "CorpusResult",
    "Outcome",
    "check_corpus_file",
    "compile_corpus_file",
    "corpus_files",
    "corpus_targets",
    "default_corpus",
    "evaluate",
    "expected_emitter",
    "markdown_table",
]

#: The hero emitter each corpus folder stands for (the folder's last component).
FOLDER_EMITTER = {
    "loop": "loop",
    "convert": "loop",
    "transpose": "transpose",
    "reduce_row": "reduce_row",
    "reduce_multirow": "reduce_multirow",
    "reduce_column": "reduce_column",
    "reduce_column_small": "reduce_column_small",
    "scatter": "scatter",
    "concatenate": "concatenate",
    "dynamic_update_slice": "dynamic_update_slice",
}

#: Files whose folder does not name XLA's choice (the folders follow XLA's test
#: files). XLA:GPU itself emits reduction_groups_two_in_same_group, a column
#: reduction [128, 288, 32], with its small-column emitter (checked with the real
#: compiler for an H100: 128 blocks of 128 threads, ``shuffle_reduce ... to 4``).
#: XLA 0.12 (tests/data/xla_reference.json) emits reduce_column/small (a kept
#: minor dimension of 4, which divides the warp) with its small-column emitter,
#: reduce_row/inefficient_codegen (rows of 4) with its multi-row emitter (as the
#: file's CHECK line, ``shuffle_reduce ... to 2``, says), and the 4-bit
#: transposes of the minor dimension and the multi-root concatenate fusions
#: with its loop emitter, as those transposes' own CHECK lines say.
XLA_EMITTER_OF_FILE = {
    "reduce_row/reduction_groups_two_in_same_group.hlo": "reduce_column_small",
    "reduce_column/small.hlo": "reduce_column_small",
    "reduce_row/inefficient_codegen.hlo": "reduce_multirow",
    "transpose/partial_tile_s4.hlo": "loop",
    "transpose/transpose_10_s4.hlo": "loop",
    "concatenate/multiple_roots_epilogue.hlo": "loop",
    "concatenate/multiple_roots_shared_hero.hlo": "loop",
}

#: The Target presets every corpus file is compiled for, in order: sm_80, sm_90, gfx942.
CORPUS_TARGETS = ("a100", "h100", "mi300x")


def corpus_targets():
    """The :data:`CORPUS_TARGETS` as ``heron.compiler.Target`` presets."""
    from heron.target import Target

    return tuple(Target.preset(name) for name in CORPUS_TARGETS)


@attrs.frozen
class Outcome:
    """One check's result: ``ok``, and a one-line detail (the reason when not ok)."""

    ok: bool
    detail: str = "ok"

    def cell(self) -> str:
        return self.detail if self.ok else f"FAIL: {self.detail}"


@attrs.frozen
class CorpusResult:
    """The acceptance results of one corpus file."""

    name: str  # relative to the corpus root, e.g. "gpu/transpose/epilogue.hlo"
    expected: str
    chosen: tuple[str, ...]  # the emitter heron picked, per fusion
    device_code: Outcome
    check: Outcome
    compile_seconds: float
    check_seconds: float

    @property
    def hero(self) -> Outcome:
        if self.chosen and all(c == self.expected for c in self.chosen):
            return Outcome(True, self.expected)
        return Outcome(False, f"expected {self.expected}, chose {', '.join(self.chosen) or '-'}")

    @property
    def ok(self) -> bool:
        return self.hero.ok and self.device_code.ok and self.check.ok


def default_corpus() -> Path:
    """``$HERON_CORPUS``, else ``shared/corpus/xla`` beside the repository (as in CI)."""
    override = os.environ.get("HERON_CORPUS")
    if override:
        return Path(override).resolve()
    repository = Path(__file__).resolve().parents[3]
    return repository.parent / "shared" / "corpus" / "xla"


def corpus_files(root: Path) -> list[Path]:
    """Every ``.hlo`` file under ``root``, sorted by path."""
    return sorted(root.rglob("*.hlo"))


def expected_emitter(path: Path) -> str:
    """The emitter XLA chooses: the file's folder's, but for :data:`XLA_EMITTER_OF_FILE`.

    ``ValueError`` for an unknown folder.
    """
    folder = path.parent.name
    if f"{folder}/{path.name}" in XLA_EMITTER_OF_FILE:
        return XLA_EMITTER_OF_FILE[f"{folder}/{path.name}"]
    if folder not in FOLDER_EMITTER:
        raise ValueError(
            f"{path}: folder '{folder}' names no known hero (known: {', '.join(FOLDER_EMITTER)})"
        )
    return FOLDER_EMITTER[folder]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


def compile_corpus_file(path: Path) -> tuple[tuple[str, ...], list[str]]:
    """Compile every fusion for each of :data:`CORPUS_TARGETS`, through every backend stage.

    Returns the emitter chosen for each fusion (for the first target) and the
    arch of each compile, in order. The backends check their own products
    (the kernel they hold, ptxas accepting the PTX, the HSACO being AMDGPU);
    a skipped stage fails here, since ptxas is the judge of the PTX. Raises the
    compiler's own error (which names the fusion and the op) on the first failure.
    """
    from heron.compiler import compile_fusion, fusions_of
    from heron.hlo.parser import parse_module_file

    module = parse_module_file(path)
    chosen, produced = [], []
    for fusion in fusions_of(module):
        for number, target in enumerate(corpus_targets()):
            compiled = compile_fusion(fusion, target)
            if number == 0:
                chosen.append(compiled.emitter)
            for record in compiled.skipped:
                raise RuntimeError(
                    f"{target.arch}: stage {record.name} did not run: {record.skipped}"
                )
            produced.append(target.arch)
    return tuple(chosen), produced


def check_corpus_file(path: Path):
    """``heron check`` of the file on the interpreter: (report, note).

    A fusion refused as too large for the host is checked again on its
    shrunk copy (``heron.harness.shrunk_fusion``); the note says so.
    """
    from heron.compiler import fusions_of
    from heron.harness.check import check_file, check_fusions, shrunk_fusion
    from heron.hlo.parser import parse_module_file

    report = check_file(path)
    module = parse_module_file(path)
    fusions = fusions_of(module)
    if len(fusions) != len(report.fusions):
        return report, ""

    def refused(f) -> bool:
        return bool(f.findings) and all(x.kind == "refused" for x in f.findings)

    if any(not f.ok and not refused(f) for f in report.fusions) or report.ok:
        return report, ""
    try:
        small = [
            shrunk_fusion(module, fusion)
            for fusion, checked in zip(fusions, report.fusions, strict=True)
            if refused(checked)
        ]
    except ValueError as exc:  # refused at full size (the host's memory budget), not shrinkable
        return report, f"refused at full size, and {exc}"
    shrunk = check_fusions(small, f"{path.name} (shrunk)")
    count = f"{len(small)} fusion" + ("s" if len(small) > 1 else "")
    return shrunk, f"agrees on a shrunk copy ({count} too large for the host at full size)"


def evaluate(path: Path, root: Path, *, check: bool = True) -> CorpusResult:
    """All three acceptance results for one file; failures become rows, never exceptions."""
    name = str(path.relative_to(root))
    expected = expected_emitter(path)
    start = time.perf_counter()
    try:
        chosen, produced = compile_corpus_file(path)
        device_code = Outcome(True, "ok: " + ", ".join(dict.fromkeys(produced)))
    except Exception as exc:  # a row, not a crash: the table must list every file
        chosen, device_code = (), Outcome(False, _first_line(exc))
    compiled = time.perf_counter() - start
    start = time.perf_counter()
    if not check:
        outcome = Outcome(False, "not run")
    else:
        try:
            report, note = check_corpus_file(path)
            last = report.text().splitlines()[-1] if report.text() else ""
            outcome = Outcome(True, note or "agrees") if report.ok else Outcome(False, last[:300])
        except Exception as exc:
            outcome = Outcome(False, _first_line(exc))
    return CorpusResult(
        name=name,
        expected=expected,
        chosen=chosen,
        device_code=device_code,
        check=outcome,
        compile_seconds=compiled,
        check_seconds=time.perf_counter() - start,
    )


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(results: Sequence[CorpusResult]) -> str:
    """The docs table: one row per file, the three results and the times."""
    lines = [
        "| file | hero (folder) | PTX sm_80, sm_90 (ptxas) + HSACO gfx942 | heron check"
        " (interpreter) | compile s | check s |",
        "|---|---|---|---|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {_cell(r.name)} | {_cell(r.hero.cell())} | {_cell(r.device_code.cell())}"
            f" | {_cell(r.check.cell())} | {r.compile_seconds:.1f} | {r.check_seconds:.1f} |"
        )
    return "\n".join(lines) + "\n"


_BEGIN = "<!-- corpus table: begin (python -m heron.harness.corpus docs/corpus.md) -->"
_END = "<!-- corpus table: end -->"


def _write_table(document: Path, table: str, summary: str) -> None:
    text = document.read_text() if document.exists() else f"# Corpus\n\n{_BEGIN}\n{_END}\n"
    if _BEGIN not in text or _END not in text:
        raise ValueError(f"{document} has no '{_BEGIN}' ... '{_END}' markers")
    head, rest = text.split(_BEGIN, 1)
    _, tail = rest.split(_END, 1)
    document.write_text(f"{head}{_BEGIN}\n{summary}\n\n{table}{_END}{tail}")


def _evaluate_named(args: tuple[str, str]) -> CorpusResult:
    path, root = args
    return evaluate(Path(path), Path(root))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m heron.harness.corpus",
        description="Run the corpus acceptance (hero, device code, heron check) on every file"
        " and write the table into a markdown document between its markers.",
    )
    parser.add_argument("document", type=Path, help="the markdown file to update")
    parser.add_argument("--corpus", type=Path, default=None, help="corpus root")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    options = parser.parse_args(argv)
    root = options.corpus or default_corpus()
    files = corpus_files(root)
    if not files:
        print(f"no .hlo files under {root}", file=sys.stderr)
        return 2
    with concurrent.futures.ProcessPoolExecutor(max_workers=options.jobs) as pool:
        results = list(pool.map(_evaluate_named, [(str(f), str(root)) for f in files]))
    passed = sum(r.ok for r in results)
    summary = (
        f"{len(results)} files: {passed} pass all three;"
        f" hero {sum(r.hero.ok for r in results)},"
        f" device code {sum(r.device_code.ok for r in results)},"
        f" heron check {sum(r.check.ok for r in results)}."
    )
    _write_table(options.document, markdown_table(results), summary)
    print(summary)
    for r in results:
        if not r.ok:
            print(f"  {r.name}: {r.hero.cell()} | {r.device_code.cell()} | {r.check.cell()}")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
