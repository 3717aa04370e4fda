"""docs/architecture.md against the code: the layers, the decision owners, the packages.

The page is a map of the repository; these checks fail when the map drifts:

- its `layers` bullet names the layers of pyproject.toml's import-linter
  `layers` contract, in the same order, and its package graph names each;
- every ``heron.`` dotted name in its "One owner for each decision" section
  exists: the module as a file under ``packages/*/src`` (or ``src`` for the
  meta distribution's heron.cli and heron.harness), and an attribute after it
  as a ``def``, ``class`` or assignment in that module's source (read with
  ``ast``, never imported: no heavy import, no MLIR);
- every distribution in ``packages/`` is named in its package table.
"""

from __future__ import annotations

import ast
import re
import tomllib
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"
#: Where heron's modules live: each distribution's src folder, and the meta distribution's.
SOURCE_ROOTS = (*sorted(ROOT.glob("packages/*/src")), ROOT / "src")


def _page() -> str:
    return PAGE.read_text()


def _section(title: str) -> str:
    """The text of the ``## title`` section, up to the next ``## `` heading."""
    text = _page()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _layers(spec: list[str]) -> list[list[str]]:
    return [sorted(part.strip() for part in layer.split("|")) for layer in spec]


def test_layers_bullet_matches_the_contract() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["id"] == "layers"]
    expected = _layers(contract["layers"])

    section = _section("The packages and what each may import")
    match = re.search(r"^- `layers`:(.*?)(?=^- |^\s*$)", section, re.MULTILINE | re.DOTALL)
    assert match, "docs/architecture.md has no '- `layers`:' bullet"
    chain = " ".join(match.group(1).split()).split(";")[0]
    written = _layers([layer.strip(" ()") for layer in chain.split(">")])
    assert written == expected, (
        f"docs/architecture.md's `layers` bullet {written} differs from pyproject.toml's"
        f" layers contract {expected}"
    )

    graph = section[section.index("```") : section.index("```", section.index("```") + 3)]
    named = set(re.findall(r"heron\.[a-z_]+(?:\.[a-z_]+)?", graph))
    # The graph writes the two GPU runtimes as one box: "heron.runtime.cuda, .rocm".
    named |= {"heron.runtime.rocm"} if "heron.runtime.cuda, .rocm" in graph else set()
    missing = sorted({p for layer in expected for p in layer} - named)
    assert not missing, f"the package graph does not show {missing}"


def _module_file(dotted: str) -> Path | None:
    parts = dotted.split(".")
    for root in SOURCE_ROOTS:
        base = root.joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _defined(body: list[ast.stmt], name: str) -> ast.stmt | None:
    """The ``def``, ``class`` or assignment of ``name`` among ``body``'s statements."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == name:
                return node
        elif isinstance(node, ast.Assign):
            if any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return node
        elif isinstance(node, ast.AnnAssign):
            if isinstance(node.target, ast.Name) and node.target.id == name:
                return node
    return None


def _resolves(dotted: str) -> str:
    """Why ``dotted`` does not resolve ("" when it does): the longest prefix that is a
    module, then each remaining name defined in the module, or in the class before it."""
    parts = dotted.split(".")
    for split in range(len(parts), 1, -1):
        path = _module_file(".".join(parts[:split]))
        if path is None:
            continue
        scope: ast.stmt | ast.Module = _tree(path)
        for name in parts[split:]:
            found = _defined(getattr(scope, "body", []), name)
            if found is None:
                return f"{name!r} is not defined in {path.relative_to(ROOT)}"
            scope = found
        return ""
    return "no module of it under packages/*/src or src"


def test_decision_owners_exist() -> None:
    section = _section("One owner for each decision")
    names = sorted(set(re.findall(r"`(heron\.[A-Za-z_][\w.]*)`", section)))
    assert len(names) > 20, "the decision table names too few owners"
    broken = [f"{name}: {why}" for name in names if (why := _resolves(name))]
    assert not broken, "docs/architecture.md names what the code lacks:\n" + "\n".join(broken)


def test_every_distribution_is_in_the_package_table() -> None:
    section = _section("The packages and what each may import")
    table = "\n".join(line for line in section.splitlines() if line.startswith("|"))
    missing = []
    for pyproject in sorted(ROOT.glob("packages/*/pyproject.toml")):
        name = tomllib.loads(pyproject.read_text())["project"]["name"]
        if name not in table:
            missing.append(f"{pyproject.parent.name} ({name})")
    assert not missing, f"docs/architecture.md's package table lacks {missing}"
