"""``--deterministic``: order-dependent scatters become sorted scatters (issue 26).

A scatter whose updates may meet and whose combiner is not exactly
commutative and associative (a float add, an overwrite) is compiled with
atomics that combine in arrival order: on a GPU its bits may change from run
to run (the H200 showed it on segment sums and an embedding gradient). The
compile records it on the kernel (``KernelThunk.order_dependence``, printed by
heron run, heron-run and heron compile); ``deterministic=True`` instead runs
``scatter-determinism-expander`` (sort, segmented scan, a scatter with one
update per element, XLA's ``--xla_gpu_deterministic_ops``), whose kernels
need no atomics, or, where it does not apply, the scatter emitter's serial
path.

Here: which scatters are order-dependent; the expansion equals the scatter on
the evaluator; deterministic programs equal jax on the CPU and have no
order-dependent kernel and no atomic in their kernels, while the default
compile has and says so.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from heron_test_support.hlo_modules import SCATTER_KINDS
from heron_test_support.programs import assert_close

import heron.jax as heron_jax
from heron.hlo.determinism import order_dependence, serial_updates_requested
from heron.hlo.evaluator import evaluate_module, flatten_literal
from heron.hlo.passes import pass_named, run_pipeline
from heron.hlo.passes.manager import pipeline_of
from heron.runtime.core.thunks import KernelThunk, order_dependent_kernels, walk

pytestmark = pytest.mark.usefixtures("jax_32_bit")


RNG = np.random.default_rng(26)


def segment_sum(data, ids):
    return jax.ops.segment_sum(data, ids, num_segments=7)


def embedding_gradient(table, ids, grads):
    return jnp.zeros_like(table).at[ids].add(grads)


def overwrite_duplicates(x, ids, values):
    return x.at[ids].set(values)


def two_index_add(x, rows, cols, values):
    return x.at[rows, cols].add(values)


def bf16_rows(table, ids, grads):
    return table.at[ids].add(grads)


def apply_to_duplicates(x, ids):
    """``.at[].apply(g)``: the combiner ignores the update (g(x)), so each duplicate applies
    g once more; a scan of the updates would apply it once (serial fallback)."""
    return x.at[ids].apply(lambda v: v * 2 + 1)


def overlapping_windows(x, starts, values):
    """Windows of 3 along the indexed dimension: distinct starts overlap (serial fallback)."""
    dnums = jax.lax.ScatterDimensionNumbers(
        update_window_dims=(1,), inserted_window_dims=(), scatter_dims_to_operand_dims=(0,)
    )
    return jax.lax.scatter_add(x, starts[:, None], values, dnums)


CASES = {
    "segment_sum": (
        segment_sum,
        (RNG.standard_normal(40).astype(np.float32), RNG.integers(-1, 9, 40).astype(np.int32)),
    ),
    "embedding_gradient": (
        embedding_gradient,
        (
            np.zeros((6, 5), np.float32),
            RNG.integers(0, 6, 23).astype(np.int32),
            RNG.standard_normal((23, 5)).astype(np.float32),
        ),
    ),
    "overwrite_duplicates": (
        overwrite_duplicates,
        (
            np.zeros(5, np.float32),
            np.array([1, 3, 1, 1, 4, 3, 0], np.int32),
            np.arange(7, dtype=np.float32),
        ),
    ),
    "two_index_add": (
        two_index_add,
        (
            np.zeros((3, 4), np.float32),
            RNG.integers(0, 3, 17).astype(np.int32),
            RNG.integers(0, 4, 17).astype(np.int32),
            RNG.standard_normal(17).astype(np.float32),
        ),
    ),
    "bf16_rows": (
        bf16_rows,
        (
            jnp.asarray(RNG.standard_normal((4, 3)), jnp.bfloat16),
            RNG.integers(0, 4, 9).astype(np.int32),
            jnp.asarray(RNG.standard_normal((9, 3)), jnp.bfloat16),
        ),
    ),
    "apply_to_duplicates": (
        apply_to_duplicates,
        (np.arange(6, dtype=np.float32), np.array([1, 3, 1, 1, 4, 3, 0, 1], np.int32)),
    ),
    "overlapping_windows": (
        overlapping_windows,
        (
            np.zeros(8, np.float32),
            np.array([0, 2, 1, 2, 5], np.int32),
            RNG.standard_normal((5, 3)).astype(np.float32),
        ),
    ),
}


def _scatters(module):
    return [i for i in module.instructions() if i.opcode == "scatter"]


def test_which_scatters_depend_on_the_order_of_their_updates() -> None:
    def integer_add(x, ids, v):
        return x.at[ids].add(v)

    def float_max(x, ids, v):
        return x.at[ids].max(v)

    def unique(x, ids, v):
        return x.at[ids].add(v, unique_indices=True)

    ids = np.array([0, 1, 0], np.int32)
    floats, ints = np.zeros(2, np.float32), np.zeros(2, np.int32)
    fv, iv = np.ones(3, np.float32), np.ones(3, np.int32)
    dependent = {
        name: [order_dependence(s) for s in _scatters(heron_jax.lower(f, *a).module)]
        for name, (f, a) in {
            "float add": (integer_add, (floats, ids, fv)),
            "integer add": (integer_add, (ints, ids, iv)),
            "float max": (float_max, (floats, ids, fv)),
            "unique": (unique, (floats, ids, fv)),
            "overwrite": (overwrite_duplicates, (floats, ids, fv)),
        }.items()
    }
    assert dependent["float add"][0] is not None and "add (f32)" in dependent["float add"][0]
    assert dependent["overwrite"][0] is not None and "overwrite" in dependent["overwrite"][0]
    assert dependent["integer add"] == [None]
    assert dependent["float max"] == [None]
    assert dependent["unique"] == [None]


def test_a_variadic_scatter_s_combiner_is_no_single_order_free_op() -> None:
    """A combiner of two values per side (an argmax) folds no op of its own: asked
    whether it is order-free, the answer is no, not an error on its tuple."""
    from heron.hlo.determinism import order_independent_combiner
    from heron.hlo.parser import parse_module

    module = parse_module(SCATTER_KINDS)
    (scatter,) = [s for s in _scatters(module) if s.name == "pair"]
    assert not order_independent_combiner(scatter.called("to_apply"))
    assert order_dependence(scatter) is not None


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_expansion_computes_what_the_scatter_computes(name: str) -> None:
    function, arguments = CASES[name]
    lowered = heron_jax.lower(function, *arguments)
    leaves = lowered.flatten_arguments(arguments, {})
    expected = flatten_literal(evaluate_module(lowered.module, leaves))
    module = heron_jax.lower(function, *arguments).module
    run_pipeline(module, pipeline_of([pass_named("scatter-determinism-expander")]))
    scatters = _scatters(module)
    if name in ("overlapping_windows", "apply_to_duplicates"):  # the emitter: serially
        assert [serial_updates_requested(s) for s in scatters] == [True]
    else:
        assert scatters and all(s.attr("unique_indices") for s in scatters)
        assert all(order_dependence(s) is None for s in scatters)
    got = flatten_literal(evaluate_module(module, leaves))
    for a, b in zip(got, expected, strict=True):
        if name == "overwrite_duplicates":  # the last update wins, as in update order
            assert np.array_equal(np.asarray(a), np.asarray(b))
        else:
            assert_close(np.asarray(a), np.asarray(b), name)


def _kernel_thunks(jitted, arguments) -> list[KernelThunk]:
    return [t for t in walk(jitted.artefact(*arguments).program) if isinstance(t, KernelThunk)]


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_deterministic_program_equals_jax_and_has_no_order_dependent_kernel(name: str) -> None:
    function, arguments = CASES[name]
    default = heron_jax.jit(function, backend="interpreter", cache_dir=False)
    deterministic = heron_jax.jit(
        function, backend="interpreter", cache_dir=False, deterministic=True
    )
    expected = jax.jit(function)(*arguments)
    for jitted in (default, deterministic):
        got = jitted(*arguments)
        assert_close(np.asarray(got), np.asarray(expected), name)
    # The default compile says which kernel may differ from run to run; --deterministic has none.
    dependent = order_dependent_kernels(default.artefact(*arguments).program)
    assert len(dependent) == 1 and "scatter" in dependent[0][1], dependent
    assert order_dependent_kernels(deterministic.artefact(*arguments).program) == []
    assert all(t.order_dependence is None for t in _kernel_thunks(deterministic, arguments))


def test_the_deterministic_kernels_use_no_atomics() -> None:
    """The PTX of the deterministic embedding gradient has no atom.* instruction; the
    default one does (the proof that the default's order dependence is real)."""
    from heron.compiler import Target
    from heron.compiler.executable import compile_program

    function, arguments = CASES["embedding_gradient"]
    target = Target.preset("h100")
    module = heron_jax.lower(function, *arguments).module
    ptx = {}
    for deterministic in (False, True):
        compiled = compile_program(module, target, ("cuda",), deterministic=deterministic)
        ptx[deterministic] = "\n".join(
            artefact.data.decode()
            for kernel in compiled.program.kernels
            for artefact in kernel.compiled["cuda"].artefacts
            if artefact.extension == "ptx"
        )
    assert "atom.global" in ptx[False]
    assert ptx[True] and "atom." not in ptx[True]


def test_the_scan_of_a_float_sum_is_marked_regrouped_and_an_overwrite_s_is_not() -> None:
    """A float scatter-add's (or -multiply's) colliding updates are combined by the scan's
    tree, not in order: its combining maps say so (what the check's reassociation bounds
    read); an overwrite keeps the last update exactly, and is unmarked."""
    from heron.hlo.determinism import regrouped

    ids = np.array([0, 1, 0, 0], np.int32)

    def marks(function, *arguments):
        module = heron_jax.lower(function, *arguments).module
        run_pipeline(module, pipeline_of([pass_named("scatter-determinism-expander")]))
        maps = [i for i in module.instructions() if i.opcode == "map"]
        assert maps
        return {regrouped(m) for m in maps}

    def product(x, ids, values):
        return x.at[ids].multiply(values)

    floats, values = np.zeros(2, np.float32), np.ones(4, np.float32)
    assert marks(embedding_gradient, floats, ids, values) == {True}
    assert marks(product, floats, ids, values) == {True}
    assert marks(overwrite_duplicates, floats, ids, values) == {False}


def test_heron_run_check_accepts_a_deterministic_float_scatter_add(tmp_path, capsys) -> None:
    """``heron run --check --deterministic`` on the embedding gradient of the program
    corpus: the scan sums colliding rows in its own order (1 ulp from the evaluator's
    sequential sum on this input), which the check allows as it allows a reduction's."""
    from pathlib import Path

    from heron.cli.main import main

    program = Path(__file__).resolve().parent.parent / "programs/embedding_scatter_add_grad"
    argv = ["run", str(program / "module.hlo"), "--backend", "interpreter"]
    code = main([*argv, "--check", "--deterministic", "--quiet"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "allowed: reassociation bounds" in out and "agree:" in out
