"""The program corpora (programs/, issue 15; models/, issue 26): JAX programs and library models,
XLA:CPU's outputs, XLA:GPU's facts.

For every program of ``programs/index.json`` and ``models/index.json``
(``heron_test_support.programs``: one parameter per program, ``corpus/name``):

- ``module.hlo`` (JAX's pre-optimization HLO) parses and verifies, and heron's
  reference evaluator on ``inputs.npz`` gives XLA:CPU's ``outputs.npz``:
  bitwise for integer and pred outputs; for floats within ``FLOAT_ULPS``
  (see ``assert_close``). A program the evaluator cannot run is a row of
  :data:`EXPECTED_FAILURES` with the error it gives, checked to still fail
  that way, so that the table only shrinks.
- heron's target-independent pipeline leaves no ``call`` and changes no bit of
  the evaluator's result.
- ``xla_gpu.json`` agrees with itself, with XLA's thunk sequence it quotes and
  with ``xla_gpu_optimized.hlo``.
- ``heron run MODULE --inputs INPUTS --check`` compiles it into an executable,
  runs it on the interpreter, agrees with the reference evaluator and writes
  XLA:CPU's outputs (tests/test_executables.py checks the executable itself,
  its buffers and its kernel count).

A program heron refuses or gets wrong today is a row of
``heron_test_support.programs.KNOWN_FAILURES``: the ``heron run`` test checks
that one with wrong results still disagrees (tests/test_executables.py that a
refused one is still refused).

Needs neither jax nor XLA: everything is read from the committed files.
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
from heron_test_support.programs import (
    CORPORA,
    FILES,
    FLOAT_ULPS,  # noqa: F401 - shared
    KNOWN_FAILURES,
    ROOT,
    CorpusProgram,
    KnownFailure,
    assert_close,
    corpus_programs,
    expect_known_failure,
    index,
    parameters,
)

from heron.hlo.element_types import ElementType
from heron.hlo.evaluator import evaluate_module, flatten_literal
from heron.hlo.ir import Module
from heron.hlo.npz_io import load_outputs
from heron.hlo.parser import parse_module_file
from heron.hlo.passes import run_pipeline
from heron.hlo.passes.pipelines import simplification_pipeline
from heron.hlo.verifier import verify_module

#: ``corpus/name`` -> (exception type, regular expression of its message) for programs
#: heron's evaluator cannot run yet. Empty: the evaluator runs all of them.
EXPECTED_FAILURES: dict[str, tuple[type[Exception], str]] = {}

#: What each corpus's size may not exceed: the files are committed, and CI reads them all.
#: The models grew to 6.1 MB with the eleventh session's eighteen (the L-BFGS line search's
#: and the Dirichlet sampler's loops alone take 0.9 MB: MODEL_BYTES), to 6.58 MB with the
#: twenty-first session's U-Net training step (XLA's cuDNN backward-input call), to 8.01 MB
#: with the thirty-ninth session's three Hugging Face models (1.43 MB: MODEL_BYTES), to
#: 8.48 MB with the forty-first session's pgx and gymnax environments.
CORPUS_BYTES = {"programs": 3_000_000, "models": 8_750_000}


def _evaluate(module: Module, arguments: list[np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in flatten_literal(evaluate_module(module, arguments))]


@pytest.mark.parametrize("corpus", CORPORA)
def test_the_corpus_folder_holds_what_its_index_lists(corpus: str) -> None:
    folder = ROOT / corpus
    names = [p.name for p in corpus_programs(corpus)]
    folders = sorted(p.name for p in folder.iterdir() if (p / "module.hlo").exists())
    assert folders == sorted(names), f"{corpus}/ and {corpus}/index.json list different programs"
    versions = set()
    for program in corpus_programs(corpus):
        facts = program.xla_facts()
        versions.add((facts["target"], facts["plugin_version"], facts["jaxlib_version"]))
    assert len(versions) == 1, f"programs compiled by different XLAs: {sorted(versions)}"
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    assert size < CORPUS_BYTES[corpus], f"the {corpus} corpus takes {size} bytes"


def _tags(corpus: str) -> set[str]:
    return {tag for entry in index(corpus)["programs"] for tag in entry["tags"]}


def test_the_program_corpus_is_what_issue_15_asks_for():
    assert len(corpus_programs("programs")) >= 40
    wanted = {"mlp", "attention", "normalization", "softmax", "optimizer", "embedding", "gather"}
    wanted |= {"scatter", "loop", "conditional", "sort", "cumulative", "reduction", "transpose"}
    wanted |= {"pad", "slice", "concatenate", "dot", "control-flow", "call"}
    assert wanted <= _tags("programs"), f"no program tagged {sorted(wanted - _tags('programs'))}"
    types = {t for entry in index("programs")["programs"] for t in entry["element_types"]}
    assert {"f32", "bf16", "f16", "s32", "s8", "u8", "pred"} <= types


#: What issue 26 asks the model corpus to cover: the libraries, the layer families, the
#: optimizers, clipping, schedules and mixed precision (tags of models/definitions.py).
MODEL_COVERAGE = {
    "libraries": {"flax", "equinox", "haiku", "optax"},
    "layers": {"mlp", "cnn", "batchnorm", "groupnorm", "layernorm", "rmsnorm", "dropout"},
    "blocks": {"transformer", "resnet", "attention", "embedding", "pooling"},
    "recurrent": {"gru", "lstm", "scan", "fori_loop"},
    "optimizers": {"adam", "adamw", "lamb", "adafactor", "sgd-momentum"},
    "training": {"training", "forward", "gradient-clipping", "schedule", "mixed-precision"},
}


def test_the_model_corpus_is_what_issue_26_asks_for():
    models = index("models")
    assert len(models["programs"]) >= 40
    for what, wanted in MODEL_COVERAGE.items():
        assert wanted <= _tags("models"), (
            f"{what}: no model tagged {sorted(wanted - _tags('models'))}"
        )
    assert set(models["library_versions"]) == {
        "flax",
        "equinox",
        "dm-haiku",
        "optax",
        "transformers",
        "pgx",
        "gymnax",
    }
    training = [e for e in models["programs"] if "training" in e["tags"]]
    assert len(training) >= 12, "full training steps, not only forward passes"
    assert {"f32", "bf16", "s32", "u32"} <= {
        t for e in models["programs"] for t in e["element_types"]
    }
    readme = (ROOT / "models" / "README.md").read_text()
    pins = dict(re.findall(r'"([\w-]+)==([\w.]+)"', _model_libraries_in_the_noxfile()))
    assert pins == models["library_versions"], "noxfile's MODEL_LIBRARIES are not the versions used"
    for program in corpus_programs("models"):
        assert f"| {program.name} |" in readme, f"models/README.md has no row for {program.name}"
        # Tiny: CI compiles and runs every model on the interpreter.
        size = sum(f.stat().st_size for f in program.folder.iterdir())
        assert size < MODEL_BYTES.get(program.name, 100_000), f"{program.id} takes {size} bytes"


#: The models allowed more than 100 KB of files: the transformer's AdamW step (forward,
#: backward and the update of 8 parameters: XLA's optimized module alone is 100 KB); the
#: bf16 attention's AdamW step (XLA's optimized module about 50 KB, its inputs and
#: outputs the parameters and both moments).
#: The training steps through loops are alike (XLA's optimized module 60 to 120 KB of
#: their files): the remat'd LayerNorm stack under nn.scan and its backward loop, CTC's
#: alignment scan and its gradient, and the VAE, nnx and DP-SGD steps (an MLP's forward
#: and backward with threefry's rounds inline, per-example gradients under vmap).
MODEL_BYTES = {
    # flax's fp8 dots in a training step: each dot's quantization of its input, kernel and
    # output gradient (scale, clip, convert) and each amax history's update, for two
    # layers (XLA's optimized module 73 KB).
    "flax_fp8_dense_sgd_step": 140_000,
    # jax.experimental.sparse's BCOO products and their gradients: gathers, scatter-adds and
    # BCOO.fromdense's nonzero bookkeeping written out as HLO (XLA's optimized module 84 KB).
    "haiku_sparse_bcoo_gcn_sgd_step": 160_000,
    # The normalizing flow's slogdet (LU), QR and solve, and their gradients.
    "equinox_normalizing_flow_slogdet_qr_adam_step": 190_000,
    # The Gaussian process's gradient through its Cholesky factor and triangular solves.
    "optax_gaussian_process_adam_step": 120_000,
    "flax_transformer_adamw_step": 200_000,
    "flax_bf16_attention_adamw_step": 150_000,
    "flax_scan_remat_layers_sgd_step": 200_000,
    "haiku_ctc_lion_step": 210_000,
    "equinox_vae_adabelief_step": 170_000,
    "flax_nnx_cnn_sgd_step": 120_000,
    # The U-Net's training step: three convolutions, a transposed one, a resize and their
    # gradients (XLA's optimized module 53 KB with its eleven cuDNN calls).
    "flax_unet_sgd_step": 120_000,
    "equinox_dp_sgd_per_example_clipping": 115_000,
    # One L-BFGS iteration: the zoom line search's while loops of conds carry a state of
    # about 20 values beside the parameters, the loss and its gradient inlined in each
    # (XLA's optimized module 235 KB, JAX's 84 KB).
    "optax_lbfgs_zoom_linesearch": 370_000,
    # jax.random.dirichlet's gamma variates: the rejection sampler's while loops with
    # threefry inline, their implicit gradient (random_gamma_grad's series), lgamma and
    # digamma and their derivatives in the KL (XLA's optimized module 290 KB, JAX's 170 KB).
    "haiku_dirichlet_vae_adamax_step": 550_000,
    # The scan of RK4 steps (4 MLP evaluations each) and its backward scan; the graph
    # network's two rounds of gathers, segment sums and maxes and their gradients (XLA's
    # optimized modules 115 and 111 KB).
    "equinox_neural_ode_rk4_nadam_step": 220_000,
    "haiku_graph_network_adamw_step": 205_000,
    # Five convolutions (a separable pair, depthwise, pointwise, strided and dilated), each
    # with its input and kernel gradients, and AdamW's moments of their kernels (XLA's
    # optimized module 84 KB, the inputs and outputs 39 KB).
    "haiku_separable_strided_dilated_conv_adamw_step": 190_000,
    # Hugging Face's models as its Flax classes write them: generate()'s while loops hold
    # the whole decoder with its cache updates (XLA's optimized modules 104 KB and 291 KB
    # for greedy GPT-2 and BART's beam search), and BERT's step every layer's gradient
    # (XLA's optimized module 271 KB).
    "transformers_gpt2_greedy_generate": 300_000,
    "transformers_bert_mlm_sgd_step": 500_000,
    "transformers_bart_beam_search": 640_000,
    # Environments played at random: pgx's connect four (its win detection over the board's
    # 69 lines of four; XLA's optimized module 71 KB, JAX's 67 KB) and gymnax's Acrobot
    # (RK4's four evaluations of the pendulum's dynamics in every step of the scan, the
    # reset when done; XLA's optimized module 182 KB, JAX's 98 KB).
    "pgx_connect_four_random_play": 170_000,
    "gymnax_acrobot_random_rollout": 330_000,
}


def _model_libraries_in_the_noxfile() -> str:
    """The noxfile's MODEL_LIBRARIES line: the versions `nox -s models` installs."""
    (line,) = re.findall(
        r"^MODEL_LIBRARIES = \(.*?\)", (ROOT / "noxfile.py").read_text(), re.M | re.S
    )
    return line


#: The most elements a floating-point constant of a model may have: parameters are
#: arguments (as a training loop passes them), never constants folded into the module.
#: An integer constant is a library's table, not a parameter (pgx's connect four: the
#: board's 69 lines of four, s32[69,4]).
MODEL_CONSTANT_ELEMENTS = 16


@pytest.mark.parametrize("program", parameters("models"))
def test_a_models_parameters_are_arguments_not_constants(program: CorpusProgram) -> None:
    module = program.module()
    constants = [
        (inst.name, str(inst.shape))
        for computation in module.computations
        for inst in computation.instructions
        if inst.opcode == "constant"
        and inst.shape.element_type.is_floating
        and inst.shape.num_elements > MODEL_CONSTANT_ELEMENTS
    ]
    assert not constants, f"{program.id} closes over arrays: {constants}"
    arguments = program.inputs(module)
    assert len(arguments) == len(module.entry.parameters) >= 2


@pytest.mark.parametrize("program", parameters())
def test_the_files_and_the_index_agree(program: CorpusProgram) -> None:
    for file in FILES:
        assert (program.folder / file).is_file(), f"{program.id}/{file} is missing"
    module = program.module()
    types = {
        str(leaf.element_type)
        for computation in module.computations
        for inst in computation.instructions
        for leaf in inst.shape.leaves()
        if not leaf.is_token
    }
    assert sorted(types) == program.entry["element_types"]


@pytest.mark.parametrize("program", parameters())
def test_the_evaluator_gives_xla_cpus_outputs(program: CorpusProgram) -> None:
    module = program.module()
    arguments = program.inputs(module)
    if program.id in EXPECTED_FAILURES:
        error, message = EXPECTED_FAILURES[program.id]
        with pytest.raises(error, match=message):
            _evaluate(module, arguments)
        return
    program.assert_outputs(_evaluate(module, arguments), "the evaluator")


def test_a_known_failure_must_fail_as_recorded(monkeypatch):
    """expect_known_failure: a row of KNOWN_FAILURES that passes fails the test (the table
    only shrinks), and so does one failing another way; failing as recorded is an xfail.
    A program that gives wrong results is not expected to fail to compile."""
    from heron.hlo.errors import UnsupportedError

    program = CorpusProgram("models", "flax_mlp")
    refused = KnownFailure("a test", refusal=r"\(concatenate,")
    monkeypatch.setitem(KNOWN_FAILURES, program.id, refused)
    with pytest.raises(AssertionError, match="now passes: remove it from KNOWN_FAILURES"):
        with expect_known_failure(program, "compile"):
            pass
    with pytest.raises(AssertionError, match="fails, but not as KNOWN_FAILURES says"):
        with expect_known_failure(program, "compile"):
            raise UnsupportedError("cannot run instruction 'c' (fft, c64[2,8])")
    with pytest.raises(pytest.xfail.Exception, match="fails as recorded"):
        with expect_known_failure(program, "compile"):
            raise UnsupportedError("cannot run instruction 'p' (concatenate, f32[3,100])")
    monkeypatch.setitem(KNOWN_FAILURES, program.id, KnownFailure("a test"))
    with expect_known_failure(program, "compile"):
        pass
    with pytest.raises(pytest.xfail.Exception):
        with expect_known_failure(program, "results"):
            raise AssertionError("models/flax_mlp out0: max error 0.3 > 16 eps")


def test_the_failure_tables_name_programs():
    ids = {program.id for program in corpus_programs()}
    assert set(EXPECTED_FAILURES) <= ids
    assert set(KNOWN_FAILURES) <= ids
    assert set(REASSOCIATED) <= ids


#: Programs whose pipeline reassociates a floating-point sum, so that bits may change
#: within assert_close's bound: ``corpus/name`` -> the pass and why.
_CONVOLUTION = "convolution-to-dot: the dot sums window x features in its own order"
_GRADIENTS = "convolution-to-dot, for the forward convolution and its gradients"
REASSOCIATED = {
    "programs/conv1d": _CONVOLUTION,
    "programs/cnn_train_grad": _GRADIENTS,
    **{
        f"models/{name}": _CONVOLUTION
        for name in (
            "flax_cnn",
            "flax_conv_groupnorm",
            "flax_resnet_block",
            "equinox_cnn",
            "equinox_conv_groupnorm",
            "haiku_conv_batchnorm",
            "flax_unet_convtranspose",
            "flax_vit_patch_embedding",
            "equinox_conv1d_conv3d_transpose",
            "haiku_reflect_pad_cubic_resize",
        )
    },
    "models/flax_cnn_adam_step": _GRADIENTS,
    "models/equinox_cnn_sgd_step": _GRADIENTS,
    "models/flax_nnx_cnn_sgd_step": _GRADIENTS,
    "models/haiku_conv_variants_rmsprop_step": _GRADIENTS,
    "models/haiku_separable_strided_dilated_conv_adamw_step": _GRADIENTS,
    "models/flax_unet_sgd_step": _GRADIENTS,
}


@pytest.mark.parametrize(
    "program", [p for p in parameters() if p.values[0].id not in EXPECTED_FAILURES]
)
def test_the_simplification_pipeline_inlines_calls_and_keeps_every_bit(program) -> None:
    module = program.module()
    arguments = program.inputs(module)
    before = _evaluate(module, arguments)
    run_pipeline(module, simplification_pipeline())
    calls = [i.name for c in module.computations for i in c.instructions if i.opcode == "call"]
    assert not calls, f"calls left after the pipeline: {calls}"
    after = _evaluate(module, arguments)
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        assert a.dtype == b.dtype and a.shape == b.shape
        if program.id in REASSOCIATED:
            assert_close(a, b, f"{program.id} out{i} after the pipeline")
        else:
            assert a.tobytes() == b.tobytes(), f"{program.id} out{i} changed in the pipeline"


def _kernel_symbol(instruction_name: str) -> str:
    return re.sub(r"[^\w$]", "_", instruction_name)


@pytest.mark.parametrize("program", parameters())
def test_the_xla_gpu_facts_are_consistent(program: CorpusProgram) -> None:
    facts = program.xla_facts()
    optimized = (program.folder / "xla_gpu_optimized.hlo").read_text()
    kernels = facts["kernels"]
    launches = [line for line in facts["thunk_sequence"] if re.search(r"\bgrid:\s*\[", line)]
    assert facts["kernel_count"] == len(kernels) == len(launches)
    kernel_thunks = sum(
        n for kind, n in facts["thunk_kinds"].items() if kind in ("kKernel", "kCustomKernel")
    )
    assert kernel_thunks == len(kernels)
    assert sum(facts["fusion_kinds"].values()) == len(kernels)
    symbols = {
        _kernel_symbol(m.group(1))
        for m in re.finditer(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=", optimized, re.MULTILINE)
    }
    for kernel, line in zip(kernels, launches, strict=True):
        assert re.search(rf"\b{re.escape(kernel['name'])}\s+grid:", line)
        assert kernel["name"] in symbols, f"kernel {kernel['name']} is no instruction of XLA's"
        assert kernel["triton"] == bool(
            kernel["backend_kind"] and "triton" in kernel["backend_kind"]
        )
    assert facts["triton"] == any(k["triton"] for k in kernels)
    assert facts["triton"] == ('"kind":"__triton' in optimized)
    for target in facts["custom_calls"]:
        assert f'custom_call_target="{target}"' in optimized
    assert facts["buffers"]["total_bytes"] > 0 and facts["buffers"]["peak_bytes"] > 0
    header = optimized.splitlines()[0]
    assert header.startswith("HloModule ") and "is_scheduled=true" in header
    entry_layout = header[header.index("entry_computation_layout={") :]
    for dims, layout in re.findall(r"\[([\d,]*)\]\{([\d,]*)\}", entry_layout):
        rank = len([d for d in dims.split(",") if d])
        assert layout == ",".join(str(i) for i in range(rank - 1, -1, -1)), (
            f"XLA compiled {program.id} with an entry layout other than JAX's major-to-minor:"
            f" {header}"
        )


@pytest.mark.parametrize("program", parameters())
def test_heron_reads_xla_gpus_optimized_module(program: CorpusProgram) -> None:
    """XLA 0.12 prints tuple elements as ``%t#k`` operands; heron's parser reads them."""
    module = parse_module_file(program.folder / "xla_gpu_optimized.hlo")
    verify_module(module)
    facts = program.xla_facts()
    fusions = [i for i in module.instructions() if i.opcode == "fusion"]
    kinds: dict[str, int] = {}
    for fusion in fusions:
        if fusion.parent is not None and fusion.parent.name.startswith("fused"):
            continue
        kinds[str(fusion.attr("kind"))] = kinds.get(str(fusion.attr("kind")), 0) + 1
    for kind, count in facts["fusion_kinds"].items():
        if kind.startswith("k"):
            assert kinds.get(kind, 0) >= count, (kind, kinds)


def test_the_tolerance_rejects_a_wrong_float():
    expected = np.array([1.0, -2.0, np.inf], np.float32)
    assert_close(expected.copy(), expected, "same")
    wrong = expected.copy()
    wrong[1] = np.nextafter(np.float32(-2.0), np.float32(0), dtype=np.float32) + np.float32(1e-5)
    with pytest.raises(AssertionError, match="max error"):
        assert_close(wrong, expected, "wrong")
    with pytest.raises(AssertionError, match="inf or NaN"):
        assert_close(np.array([1.0, -2.0, -np.inf], np.float32), expected, "inf")
    assert ElementType.from_numpy(np.dtype(ml_dtypes.bfloat16)) is ElementType.BF16


# -- the programs on the interpreter device ---------------------------------------------
#
# The whole program path as a user meets it: ``heron run`` on the module as JAX printed
# it, with its inputs and --check: heron's HLO pipeline, an executable whose kernels run
# on the interpreter (heron.compiler.program_run), loops and conditionals included, the
# reference evaluator's agreement, and each output written against XLA:CPU's with
# assert_close's bound.


@pytest.mark.parametrize("program", parameters())
def test_heron_run_check_runs_the_program_and_gives_xla_cpus_outputs(
    program: CorpusProgram, capsys, tmp_path
) -> None:
    failure = KNOWN_FAILURES.get(program.id)
    if failure is not None and failure.refused:
        # Compiling it until the refusal costs as much as a compile: it is checked once,
        # by tests/test_executables.py, which fails as soon as it compiles.
        pytest.skip(f"refused ({failure.reason}); tests/test_executables.py checks that it is")
    with expect_known_failure(program, "results"):
        outputs = _heron_run_check(program, "module.hlo", capsys, tmp_path)
        program.assert_outputs(outputs, "heron run on the interpreter")


def _heron_run_check(program: CorpusProgram, file: str, capsys, tmp_path) -> list[np.ndarray]:
    """``heron run FILE --check`` on the interpreter with the program's inputs: its outputs,
    once the run exited 0 agreeing with the reference evaluator."""
    from heron.cli.main import main

    output = tmp_path / "out.npz"
    code = main(
        [
            "run",
            str(program.folder / file),
            "--backend",
            "interpreter",
            "--inputs",
            str(program.folder / "inputs.npz"),
            "--output",
            str(output),
            "--check",
        ]
    )
    captured = capsys.readouterr()
    report = f"heron run exited {code}:\n{captured.out[-4000:]}\n{captured.err}"
    assert code == 0 and "agree: every output within the tolerance" in captured.out, report
    return load_outputs(output)


#: Programs whose XLA:GPU optimized module heron runs as it is (its fusions, XLA's), and
#: what each exercises: asynchronous dynamic-slice fusions in a loop (``fusion-start``/
#: ``fusion-done`` under control edges), an in-place update of a parameter through a
#: bitcast of another layout, an FFT XLA leaves an instruction of its own, XLA's loop
#: bodies, scatters, variadic reductions and sorts, and XLA's library calls heron
#: computes (docs/programs.md, "XLA's optimized modules through heron"). XLA:CPU's
#: outputs are the oracle: the reference evaluator reads XLA's calls as heron does.
XLA_OPTIMIZED = (
    "programs/scan_rnn",
    "programs/scan_cumulative_max",
    "programs/while_loop_collatz",
    "programs/adam_step",
    "programs/argmax_argmin",
    "programs/embedding_scatter_add_grad",
    "programs/sort",
    "models/flax_gru_scan",
    "models/flax_lstm_rnn",
    "models/flax_fft_long_convolution_associative_scan",
    # XLA's library calls as heron computes them (the xla-library-calls pass): cuDNN
    # convolutions with and without their bias epilogue, cuBLAS triangular solves, TopK
    "programs/top_k",
    "programs/conv1d",
    "models/flax_cnn",
    "models/flax_unet_convtranspose",
    "models/haiku_conv_batchnorm",
    "models/optax_gaussian_process_adam_step",
    "programs/cnn_train_grad",  # the weight gradient: a cuDNN backward-filter call
    "models/flax_cnn_adam_step",
    # backward filters of grouped (depthwise, separable) and strided convolutions whose
    # stride leaves the input's last rows unread
    "models/haiku_conv_variants_rmsprop_step",
    "models/haiku_separable_strided_dilated_conv_adamw_step",
    # a strided convolution's input gradient (cuDNN's backward input) and an SGD update
    # folded into the weight gradients' calls (a result scale of -lr, the weights as the
    # side input)
    "models/flax_unet_sgd_step",
    # a complex GEMM with alpha 2 and beta 1 (one cuBLASLt call): the dot and its epilogue
    "programs/matmul_complex64_axpby",
    # cuBLASLt GEMMs as dots, XLA's control edges to them kept through fusion
    "models/equinox_lstm_fori_loop",
    "models/flax_mixed_precision_adam_step",
)


@pytest.mark.parametrize("program", [p for p in parameters() if p.id in XLA_OPTIMIZED])
def test_heron_runs_xla_gpus_optimized_module_and_gives_xla_cpus_outputs(
    program: CorpusProgram, capsys, tmp_path
) -> None:
    """Code heron did not fuse: XLA's own fusion decisions, emitted by heron's emitters."""
    outputs = _heron_run_check(program, "xla_gpu_optimized.hlo", capsys, tmp_path)
    program.assert_outputs(outputs, "heron run of XLA's optimized module")
