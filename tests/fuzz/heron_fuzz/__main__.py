"""``python -m heron_fuzz`` (from tests/fuzz): the fuzzer's command line.

    python -m heron_fuzz --cases 300 --seed 1            # a run; findings in ./fuzz-findings
    python -m heron_fuzz --seed 1 --first 17 --cases 1   # case 17 of seed 1 alone
    python -m heron_fuzz --replay fuzz-findings/npz-s1-17/case.json

Exit status 0 without findings, 1 with findings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from heron.cli.progress import ProgressDisplay, set_quiet
from heron_fuzz.cases import KINDS, Case
from heron_fuzz.runner import DEFAULT_CORPUS, Options, run, summary


def parse_args(argv: list[str] | None) -> tuple[Options, Path | None]:
    parser = argparse.ArgumentParser(
        prog="python -m heron_fuzz", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--cases", type=int, default=300, help="number of cases (default 300)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--first", type=int, default=0, help="index of the first case")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {KINDS}")
    parser.add_argument("--jobs", type=int, default=max(1, os.cpu_count() or 1))
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    parser.add_argument("--budget", default="256M", help="heron --memory-budget per command")
    parser.add_argument("--address-space", default="4G", help="RLIMIT_AS of each worker")
    parser.add_argument(
        "--work-limit",
        default="3e8",
        help="HERON_INTERPRETER_MAX_WORK for each command (lane-operations per launch;"
        " 0: none). A launch past it is a note, not a finding",
    )
    parser.add_argument(
        "--corpus",
        type=Path,
        default=Path(os.environ["HERON_CORPUS"])
        if os.environ.get("HERON_CORPUS")
        else DEFAULT_CORPUS,
    )
    parser.add_argument(
        "--findings", type=Path, default=Path("fuzz-findings"), help="findings directory"
    )
    parser.add_argument("--replay", type=Path, help="run one saved case.json instead")
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bar (drawn only when stdout and stderr are terminals anyway)",
    )
    args = parser.parse_args(argv)
    set_quiet(args.quiet)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown kinds {sorted(unknown)}")
    options = Options(
        seed=args.seed,
        cases=args.cases,
        first=args.first,
        kinds=kinds,
        jobs=args.jobs,
        timeout=args.timeout,
        budget=args.budget,
        address_space=args.address_space,
        work_limit=None if args.work_limit in ("", "0") else args.work_limit,
        corpus=args.corpus,
        findings_dir=args.findings,
    )
    return options, args.replay


def main(argv: list[str] | None = None) -> int:
    options, replay = parse_args(argv)
    cases = None
    if replay is not None:
        cases = [Case.from_json(json.loads(replay.read_text()))]
        options.findings_dir = None
    started = time.monotonic()
    with ProgressDisplay() as display:
        bar = display.task("fuzz cases", options.cases if cases is None else len(cases))

        def told(done: int, total: int, outcome) -> None:
            bar.update(done, total, f"fuzz cases ({outcome.case.name})")

        outcomes = run(options, cases, progress=None if bar is None else told)
    print(summary(outcomes, time.monotonic() - started))
    if replay is not None:
        for outcome in outcomes:
            for finding in outcome.findings:
                print(f"--- {finding.kind} (command {finding.command}):\n{finding.message}")
    elif options.findings_dir is not None and any(o.findings for o in outcomes):
        print(f"findings written to {options.findings_dir / 'findings.jsonl'}")
    return 1 if any(o.findings for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
