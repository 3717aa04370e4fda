"""The corpus's loop fusions through the elemental emitter on the host, vs the evaluator.

Every ``common/loop/*.hlo`` and ``gpu/convert/*.hlo`` file is a small loop
fusion: each is parsed, its fused computation run element by element through
:func:`heron_test_support.elemental_jit.run_computation` on random
inputs, and every output leaf compared with the reference evaluator run on
the same computation -- bit for bit (any NaN matching any NaN), except for
the files whose results go through libm functions or a dot's summation order
(relative 1e-5 there).

The harness needs every output leaf to have the root's dimensions; a tuple
root whose leaves differ (``tuple_heterogeneous``, ``mof_reshapes``) is run
one leaf at a time (a computation rooted at that leaf).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from heron_test_support.elemental_jit import run_computation

from heron.hlo import parse_module
from heron.hlo.attributes import SliceRange
from heron.hlo.evaluator import EvaluatorOptions, evaluate_computation
from heron.hlo.evaluator.random_inputs import random_literal
from heron.hlo.ir import Computation, Instruction
from heron.hlo.shapes import ArrayShape, TupleShape

CORPUS_DIRS = ("common/loop", "gpu/convert")

#: Files whose results may differ from the evaluator by rounding (libm, summation order).
APPROXIMATE = {
    "acos_f64",
    "acosh_f32",
    "acosh_f64",
    "asin_f64",
    "asinh_f32",
    "asinh_f64",
    "atanh_f64",
    "cosh_f32",
    "cosh_f64",
    "sinh_f64",
    "dot_fp8",
}


def _corpus_files(corpus: Path) -> list[Path]:
    files: list[Path] = []
    for sub in CORPUS_DIRS:
        files += sorted((corpus / sub).glob("*.hlo"))
    return files


def _find_corpus(config: pytest.Config) -> Path:
    """The corpus, found (or failed for) by the repository's conftest.py, the one place that knows.

    Its ``corpus_dir`` fixture comes too late for parametrizing, so its
    ``find_corpus`` is called through the plugin manager (tests cannot import
    conftest modules under ``--import-mode=importlib``).
    """
    conftest = (config.rootpath / "conftest.py").resolve()
    for plugin in config.pluginmanager.get_plugins():
        if Path(getattr(plugin, "__file__", "") or "").resolve() == conftest:
            return plugin.find_corpus()
    raise LookupError(f"{conftest} is not loaded: cannot find heron's corpus")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``path`` over the corpus files of :data:`CORPUS_DIRS`."""
    if "path" in metafunc.fixturenames:
        files = _corpus_files(_find_corpus(metafunc.config))
        metafunc.parametrize("path", files, ids=[f"{p.parent.name}/{p.stem}" for p in files])


# -- the harness's missing piece: tensor constants --------------------------------------------


# -- the test ----------------------------------------------------------------------------------


def _fusion_computation(module) -> Computation:
    """The computation a corpus file is about (its fused computation)."""
    if module.fusion_under_test is not None:
        return module.computation(module.fusion_under_test)
    root = module.entry.root_instruction
    if root.opcode == "fusion":
        return root.called("calls")
    return module.entry


def _leaf_runs(computation: Computation) -> list[tuple[Computation, list[int]]]:
    """(computation to run, leaf numbers of the full result it yields).

    Leaves are grouped by dimensions: one run per group, rooted at a tuple of
    the group's root operands (the harness needs one iteration space per run).
    """
    root = computation.root_instruction
    if not isinstance(root.shape, TupleShape):
        return [(computation, [0])]
    leaves = list(root.shape.leaves())
    if len({leaf.dims for leaf in leaves}) == 1:
        return [(computation, list(range(len(leaves))))]
    groups: dict[tuple[int, ...], list[tuple[Instruction, list[int]]]] = {}
    first = 0
    for operand in root.operands:
        operand_leaves = list(operand.shape.leaves())
        numbers = list(range(first, first + len(operand_leaves)))
        first += len(numbers)
        if len({leaf.dims for leaf in operand_leaves}) != 1:
            raise AssertionError(f"{operand.name}: a nested tuple with mixed dimensions")
        groups.setdefault(operand_leaves[0].dims, []).append((operand, numbers))
    runs = []
    for k, members in enumerate(groups.values()):
        operands = [operand for operand, _ in members]
        group_root = Instruction(
            name=f"group_{k}",
            opcode="tuple",
            shape=TupleShape(tuple(operand.shape for operand in operands)),
            operands=operands,
        )
        sub = Computation(
            f"{computation.name}_{k}", [*computation.instructions, group_root], root=group_root
        )
        runs.append((sub, [n for _, numbers in members for n in numbers]))
    return runs


#: Results larger than this are checked on a corner (a slice of at most 4 per dimension).
MAX_HOST_ELEMENTS = 1 << 20


def _corner(computation: Computation) -> Computation:
    """``computation`` with its (array) root replaced by a small slice of it."""
    root = computation.root_instruction
    shape = root.array_shape
    dims = tuple(min(d, 4) for d in shape.dims)
    corner = Instruction(
        name="corner",
        opcode="slice",
        shape=ArrayShape(shape.element_type, dims),
        operands=[root],
        attributes={"slice": tuple(SliceRange(0, d, 1) for d in dims)},
    )
    return Computation(
        f"{computation.name}_corner", [*computation.instructions, corner], root=corner
    )


def _flatten(value) -> list[np.ndarray]:
    if isinstance(value, tuple):
        return [leaf for item in value for leaf in _flatten(item)]
    return [np.asarray(value)]


def assert_same(actual: np.ndarray, expected: np.ndarray, rtol: float, name: str) -> None:
    """Bitwise equality (any NaN equals any NaN), or within ``rtol`` for floats."""
    expected = np.asarray(expected)
    actual = np.asarray(actual)
    assert actual.shape == expected.shape, f"{name}: shape {actual.shape} != {expected.shape}"
    kind = expected.dtype.kind
    if (
        kind in "biu"
        or expected.dtype.name.startswith("int")
        or expected.dtype.name.startswith("uint")
    ):
        np.testing.assert_array_equal(actual, expected, err_msg=name)
        return
    wide_dtype = np.complex128 if kind == "c" else np.float64
    got = np.asarray(actual, dtype=wide_dtype).reshape(-1)
    want = np.asarray(expected, dtype=wide_dtype).reshape(-1)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), f"{name}: NaN positions differ"
    if rtol:
        np.testing.assert_allclose(got[~nan], want[~nan], rtol=rtol, atol=0, err_msg=name)
        return
    same = actual.reshape(-1).view(np.uint8).reshape(actual.size, -1)
    ref = expected.reshape(-1).view(np.uint8).reshape(expected.size, -1)
    equal = np.all(same == ref, axis=1) | nan
    assert np.all(equal), f"{name}: {got[~equal][:8]} != {want[~equal][:8]}"


def test_corpus_loop_fusion(path: Path) -> None:
    module = parse_module(path.read_text())
    computation = _fusion_computation(module)
    root_shape = computation.root_instruction.shape
    if not isinstance(root_shape, TupleShape) and root_shape.num_elements > MAX_HOST_ELEMENTS:
        computation = _corner(computation)
    rng = np.random.default_rng(0)
    inputs = [random_literal(p.shape, rng) for p in computation.parameters]
    options = EvaluatorOptions(max_bytes=1 << 62)  # broadcasts of huge shapes are numpy views
    expected = _flatten(evaluate_computation(computation, inputs, options=options))
    rtol = 1e-5 if path.stem in APPROXIMATE else 0.0
    for sub, leaves in _leaf_runs(computation):
        actual = run_computation(sub, inputs)
        assert len(actual) == len(leaves)
        for k, value in zip(leaves, actual, strict=True):
            assert_same(value, expected[k], rtol, f"{path.stem} output {k}")


def test_corpus_is_present(corpus_dir: Path) -> None:
    assert len(_corpus_files(corpus_dir)) >= 30
