"""Decisions that were once made twice stay made once (docs/architecture.md, "One
owner for each decision").

Each check reads the source with ``ast`` (nothing is imported): the places
that used to decide on their own must ask the owner, and the owner's idiom
must not reappear elsewhere. Behaviour tests beside each owner hold what it
answers; these hold that nobody answers again.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: heron's shipped modules: each distribution's src folder and the meta distribution's.
SOURCE_ROOTS = (*sorted(ROOT.glob("packages/*/src")), ROOT / "src")


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _sources() -> list[Path]:
    return sorted(p for root in SOURCE_ROOTS for p in root.rglob("*.py"))


def _function(relative: str, name: str) -> ast.FunctionDef:
    path = ROOT / relative
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError(f"{relative} has no function {name}")


def _names_used(node: ast.AST) -> set[str]:
    """Every name and attribute ``node`` reads (``f(x)``, ``m.f(x)``: ``f``)."""
    used: set[str] = set()
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name):
            used.add(inner.id)
        elif isinstance(inner, ast.Attribute):
            used.add(inner.attr)
    return used


def _compares_opcode_to(node: ast.AST, opcode: str) -> bool:
    """Whether ``node`` holds ``<something>.opcode == "<opcode>"``."""
    for inner in ast.walk(node):
        if (
            isinstance(inner, ast.Compare)
            and isinstance(inner.left, ast.Attribute)
            and inner.left.attr == "opcode"
            and any(isinstance(c, ast.Constant) and c.value == opcode for c in inner.comparators)
        ):
            return True
    return False


# -- the roots of a fusion: heron.hlo.fusion_outputs ------------------------------------------

FUSION_OUTPUTS = "packages/hlo-ir/src/heron/hlo/fusion_outputs.py"


def test_only_the_owner_spells_a_fusions_roots():
    """``root.operands if root.opcode == "tuple" else [root]`` is fusion_roots' body:
    written anywhere else, it is a second answer to "the roots of a fusion"."""
    offenders = []
    for path in _sources():
        if path == ROOT / FUSION_OUTPUTS:
            continue
        for node in ast.walk(_tree(path)):
            if (
                isinstance(node, ast.IfExp)
                and _compares_opcode_to(node.test, "tuple")
                and "operands" in _names_used(node.body)
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.FunctionDef) and node.name in {
                "fusion_roots",
                "output_positions",
                "output_roots",
            }:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} defines {node.name}")
    assert not offenders, f"a fusion's roots decided outside {FUSION_OUTPUTS}: {offenders}"


def test_the_places_that_once_decided_a_fusions_roots_ask_the_owner():
    places = [
        # the fusion indexing maps, from each root (and each result of a tuple-shaped one)
        ("packages/indexing/src/heron/indexing/fusion_indexing.py", "_roots", "fusion_roots"),
        # buffer assignment's in-place fusions
        ("packages/hlo-ir/src/heron/hlo/buffers/dataflow.py", "in_place_operands", "fusion_roots"),
        # heron check's outputs and their tolerance; heron run --check's
        ("src/heron/harness/check.py", "check_fusion", "output_roots"),
        ("src/heron/harness/agreement.py", "output_tolerances", "output_roots"),
    ]
    for relative, name, owner in places:
        function = _function(relative, name)
        assert owner in _names_used(function), f"{relative}:{name} no longer asks {owner}"
        assert not _compares_opcode_to(function, "tuple"), (
            f"{relative}:{name} looks at the root tuple itself again"
        )


# -- what a GEMM library computes: heron.runtime.core.gemm.LIBRARY_FEATURES -------------------

GEMM_CONTRACT = "packages/runtime-core/src/heron/runtime/core/gemm.py"


def test_only_the_gemm_contract_says_what_a_library_computes():
    """The table is assigned in the contract alone; the compiler and the hipBLAS binding
    import it (tests/test_library_gemm.py checks that both follow it)."""
    assigned = []
    for path in _sources():
        for node in ast.walk(_tree(path)):
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AnnAssign):
                targets = [node.target]
            if any(isinstance(t, ast.Name) and t.id == "LIBRARY_FEATURES" for t in targets):
                assigned.append(str(path.relative_to(ROOT)))
    assert assigned == [GEMM_CONTRACT]
    expressible = _function(
        "packages/runtime-rocm/src/heron/runtime/rocm/hipblas.py", "expressible"
    )
    assert "library_computes" in _names_used(expressible)
    assert not {"bias", "residual", "activation", "lhs_transposed"} & _names_used(expressible)


# -- a dot's contraction length: heron.hlo.dot_precision.contraction_length -----------------

DOT_PRECISION = "packages/hlo-ir/src/heron/hlo/dot_precision.py"


def test_only_contraction_length_multiplies_a_dots_contracting_dimensions():
    """A product over ``lhs_contracting_dims`` (or ``rhs_``) is a dot's contraction
    length: outside heron.hlo.dot_precision.contraction_length it is a second answer."""
    # the owner's own nodes (the trees are cached: the same objects as walked below)
    allowed = {id(node) for node in ast.walk(_function(DOT_PRECISION, "contraction_length"))}
    offenders = []
    for path in _sources():
        for node in ast.walk(_tree(path)):
            if not isinstance(node, ast.Call) or id(node) in allowed:
                continue
            called = node.func.attr if isinstance(node.func, ast.Attribute) else None
            called = called or (node.func.id if isinstance(node.func, ast.Name) else None)
            if called != "prod":
                continue
            strings = {c.value for c in ast.walk(node) if isinstance(c, ast.Constant)}
            if strings & {"lhs_contracting_dims", "rhs_contracting_dims"}:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, f"a contraction length computed again: {offenders}"
    multiply_adds = _function(
        "packages/compiler/src/heron/compiler/fusion/cost_model.py", "dot_multiply_adds"
    )
    assert "contraction_length" in _names_used(multiply_adds)


# -- the kernel image formats a backend's devices load: one declaration per backend -----------

#: backend -> (its backend module, its device module)
BACKENDS = {
    name: (
        f"packages/runtime-{name}/src/heron/runtime/{name}/backend.py",
        f"packages/runtime-{name}/src/heron/runtime/{name}/device.py",
    )
    for name in ("cuda", "rocm", "interpreter")
}


def _imported_from(relative: str) -> dict[str, str]:
    """name -> the module ``relative`` imports it from (``from M import name``)."""
    return {
        alias.asname or alias.name: node.module or ""
        for node in ast.walk(_tree(ROOT / relative))
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def test_a_backends_spec_and_its_device_read_one_declaration_of_its_image_formats():
    """``BackendSpec.image_formats`` is built from a name, not a literal, and the device's
    ``load_kernel`` checks an image against that same name, imported from the same
    device-side module: a literal in either would be the second declaration."""
    for backend, (backend_module, device_module) in BACKENDS.items():
        (spec,) = [
            keyword.value
            for node in ast.walk(_tree(ROOT / backend_module))
            if isinstance(node, ast.Call)
            for keyword in node.keywords
            if keyword.arg == "image_formats"
        ]
        literals = [n.value for n in ast.walk(spec) if isinstance(n, ast.Constant)]
        assert not literals, f"{backend_module} declares image formats {literals} in place"
        declared = _names_used(spec) & set(_imported_from(backend_module))
        assert len(declared) == 1, f"{backend}: image_formats={ast.unparse(spec)}"
        (name,) = declared
        source = _imported_from(backend_module)[name]
        assert _imported_from(device_module).get(name) == source, (
            f"{device_module} does not import {name} from {source}"
        )
        assert name in _names_used(_function(device_module, "load_kernel")), (
            f"{device_module}'s load_kernel checks formats of its own, not {name}"
        )


# -- the threads of a top-k row: heron.emitters.library_kernels.topk_row_threads ---------------


def test_the_per_shape_and_the_library_top_k_take_their_threads_from_one_rule():
    """The library kernel a fusion launches is keyed by the threads of its rows; the
    per-shape kernel must choose the same, or a program would launch a kernel of other
    threads than the one compiled for its shape."""
    places = [
        ("packages/emitter-plugins/src/heron/plugins/topk.py", "plan_topk"),
        ("packages/compiler/src/heron/compiler/topk_library.py", "library_topk_of"),
    ]
    for relative, name in places:
        function = _function(relative, name)
        assert "topk_row_threads" in _names_used(function), f"{relative}:{name}"
        assert "bit_length" not in _names_used(function), f"{relative}:{name} rounds again"


# -- a fingerprint of heron's code: heron.compiler.fingerprint ---------------------------------


def test_the_kept_compiles_name_heron_by_one_fingerprint():
    for relative, name in [
        ("packages/compiler/src/heron/compiler/library_kernels.py", "code_fingerprint"),
        ("packages/jax/src/heron/jax/jit.py", "_compile"),
    ]:
        assert "heron_fingerprint" in _names_used(_function(relative, name)), relative
    definers = [
        path.relative_to(ROOT)
        for path in _sources()
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.FunctionDef)
        and node.name in {"heron_fingerprint", "source_fingerprint"}
    ]
    assert [str(p) for p in definers] == ["packages/compiler/src/heron/compiler/fingerprint.py"] * 2
