"""Fail when modules of heron import each other in a cycle (``nox -s lint`` runs it).

A cycle makes import order matter and hides which module owns what. grimp
(import-linter's graph) reads every module of the ``heron`` namespace, imports
inside functions included, ``if TYPE_CHECKING:`` imports excluded (they never
run); each strongly connected component of more than one module is a cycle,
printed with the lines that close it.

Run: ``python tests/import_cycles.py`` (exit 1 and the cycles, or 0 and a count).
"""

from __future__ import annotations

import sys

import grimp


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every group of modules that import one another (Tarjan's components of size > 1)."""
    modules = sorted(graph.modules)
    imports = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, iter(imports[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(imports[child])))
                elif child in on_stack:
                    low[module] = min(low[module], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def main() -> int:
    graph = grimp.build_graph("heron", exclude_type_checking_imports=True)
    found = cycles(graph)
    for component in found:
        print(f"import cycle among {len(component)} modules:")
        for importer in component:
            for imported in component:
                if imported in graph.find_modules_directly_imported_by(importer):
                    lines = graph.get_import_details(importer=importer, imported=imported)
                    where = ", ".join(str(d["line_number"]) for d in lines)
                    print(f"  {importer} imports {imported} (line {where})")
    if found:
        return 1
    print(f"no import cycles among {len(graph.modules)} heron modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
