"""Run inside a fresh environment by `nox -s isolation`: is this install self-sufficient?

    python -I tests/isolation_check.py --import heron.indexing \
        --expect heron-hlo-ir,heron-indexing [--forbid jax,llvmlite] \
        [--compile-side 'heron.runtime.*.compiler*']

Checks that every listed module and all its submodules import (a submodule
importing an undeclared dependency fails here, not on a user's machine), that
the heron distributions installed are exactly the expected ones (a package
pulling in one it must not depend on fails), that the forbidden distributions
are absent (the test-only ones among them: heron-test-support,
heron-example-plugin), that no test code (a ``testing`` or ``tests``
subpackage) was shipped, and that ``heron`` (and ``heron.runtime``) are
namespaces. ``--compile-side`` names (fnmatch patterns) the modules a runtime's
``[compile]`` extra serves: installed without it, they may fail to import with
ModuleNotFoundError (reported, not a failure); any other error still fails.
Not a pytest file: it must run with nothing but the package installed.
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib
import importlib.metadata
import pkgutil
import re
import sys


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _split(text: str) -> list[str]:
    return [item for item in text.split(",") if item]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--import", dest="imports", required=True, type=_split)
    parser.add_argument("--expect", required=True, type=_split)
    parser.add_argument("--forbid", default=[], type=_split)
    parser.add_argument("--compile-side", dest="compile_side", default=[], type=_split)
    args = parser.parse_args()
    problems: list[str] = []

    imported = []
    needs_extra = []
    for name in args.imports:
        module = importlib.import_module(name)
        imported.append(name)
        if hasattr(module, "__path__"):
            for info in pkgutil.walk_packages(module.__path__, name + "."):
                if {"testing", "tests"} & set(info.name.split(".")):
                    problems.append(f"{info.name} is test code in a shipped package")
                try:
                    importlib.import_module(info.name)
                except ModuleNotFoundError as exc:
                    if any(fnmatch.fnmatchcase(info.name, p) for p in args.compile_side):
                        needs_extra.append(f"{info.name} ({exc})")
                    else:
                        problems.append(f"importing {info.name} failed: ModuleNotFoundError: {exc}")
                    continue
                except Exception as exc:
                    problems.append(f"importing {info.name} failed: {type(exc).__name__}: {exc}")
                    continue
                imported.append(info.name)

    installed = {_canonical(d.metadata["Name"]) for d in importlib.metadata.distributions()}
    heron = {d for d in installed if d == "heron" or d.startswith("heron-")}
    expected = {_canonical(d) for d in args.expect}
    if heron != expected:
        if heron - expected:
            problems.append(f"unexpected heron distributions installed: {sorted(heron - expected)}")
        if expected - heron:
            problems.append(f"expected heron distributions missing: {sorted(expected - heron)}")
    present = sorted(installed & {_canonical(d) for d in args.forbid})
    if present:
        problems.append(f"distributions that must not be pulled in are installed: {present}")

    import heron as namespace

    if getattr(namespace, "__file__", None) is not None:
        problems.append(f"heron is a regular package ({namespace.__file__}), not a namespace")
    runtime = sys.modules.get("heron.runtime")
    if runtime is not None and getattr(runtime, "__file__", None) is not None:
        problems.append(f"heron.runtime is a regular package ({runtime.__file__})")

    for line in problems:
        print(f"FAIL: {line}")
    if problems:
        return 1
    print(f"OK: imported {len(imported)} modules: {', '.join(imported)}")
    for line in needs_extra:
        print(f"NOTE: compile side, not importable without its [compile] extra: {line}")
    print(f"OK: heron distributions installed: {', '.join(sorted(heron))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
