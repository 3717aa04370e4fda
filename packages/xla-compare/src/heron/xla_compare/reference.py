"""The XLA reference table: every corpus file compiled by XLA:GPU and by heron, side by side.

``python -m heron.xla_compare.reference --corpus DIR --output FILE`` (what
``nox -s xla-reference`` runs) compiles each ``*/*/*.hlo`` of the corpus with
XLA (deviceless) and with heron for the target, and writes, per file and
fusion, both sides' launch (grid, block), shared memory, registers, spills,
PTX instruction counts and memory-access measures, with XLA's plugin and
jaxlib versions, the ptxas used and the date. The table is committed
(tests/data/xla_reference.json), so the tests need no XLA install.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

from heron.xla_compare.compare import compare_file
from heron.xla_compare.install import XlaInstallation, find_xla
from heron.xla_compare.report import comparison_record

#: The corpus files the table covers: <group>/<hero>/<name>.hlo (common/ and gpu/).
CORPUS_GLOB = "*/*/*.hlo"


def corpus_files(corpus: Path) -> list[Path]:
    return sorted(corpus.glob(CORPUS_GLOB))


def _ptxas_version(ptxas: str | None) -> str | None:
    if not ptxas:
        return None
    try:
        out = subprocess.run([ptxas, "--version"], capture_output=True, text=True, check=False)
    except OSError:
        return None
    lines = [line for line in out.stdout.splitlines() if "release" in line]
    return lines[0].strip() if lines else None


def file_entry(record: dict, relative: str) -> dict:
    """What the table keeps of one file's comparison."""
    return {
        "hero": relative.split("/")[1],
        "xla_error": record["xla_error"],
        # XLA's PJRT_Compile of the whole module, in its worker process.
        "xla_seconds": record["xla"]["seconds"] if record["xla"] else None,
        "kernels": record["pairs"],
    }


def build_reference(
    corpus: Path,
    target: str = "h100",
    installation: XlaInstallation | None = None,
    progress=None,
) -> dict:
    """The reference table (a JSON-ready dict) for every corpus file."""
    installation = installation or find_xla()
    files: dict[str, dict] = {}
    header: dict = {}
    for path in corpus_files(corpus):
        relative = path.relative_to(corpus).as_posix()
        start = time.perf_counter()
        record = comparison_record(compare_file(path, target, installation=installation))
        files[relative] = file_entry(record, relative)
        if record["xla"] is not None and not header:
            header = dict(record["xla"])
            header.pop("seconds", None)
            header["ptxas"] = _ptxas_version(record["ptxas"])
        if progress is not None:
            launches = [
                f"{(p['heron'] or {}).get('launch')} vs {(p['xla'] or {}).get('launch')}"
                for p in record["pairs"]
            ]
            progress(f"{relative}: {'; '.join(launches)} ({time.perf_counter() - start:.1f} s)")
    return {
        "about": "XLA:GPU (deviceless) and heron on every corpus file; regenerate with"
        " `nox -s xla-reference` (python -m heron.xla_compare.reference)",
        "date": datetime.date.today().isoformat(),
        "target": target,
        "xla": header,
        "files": files,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m heron.xla_compare.reference")
    parser.add_argument("--corpus", required=True, type=Path, help="the HLO corpus folder")
    parser.add_argument("--output", required=True, type=Path, help="the JSON table to write")
    parser.add_argument("--target", default="h100")
    args = parser.parse_args(argv)
    table = build_reference(args.corpus, args.target, progress=lambda line: print(line, flush=True))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(table, indent=1, sort_keys=False) + "\n")
    print(f"wrote {args.output} ({len(table['files'])} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
