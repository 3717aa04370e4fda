"""Build ``build/gpu-bundle/``: everything one GPU window needs, compiled here, without a GPU.

    python gpu_bundle/build.py OUT [--targets h100,a100,mi300x] [--programs NAME ...]
                               [--program-speed NAME ... | none]
                               [--fusions GLOB ...] [--workloads NAME ...] [--no-wheels]
                               [--jobs N] [--cache DIR] [--max-mib 40] [--pythons 312,311,313]

(``nox -s gpu-bundle`` runs it with the defaults.) The bundle holds

- ``run.py`` and the modules it loads (``bundle_*.py``; ``bundle_programs.py`` is
  ``programs/definitions.py``, the programs' jax functions): the one command on the GPU machine;
- ``bundle.json``: the cases, the artefact of each per Target, the wheels, the devices' peaks;
- ``artefacts/TARGET/CASE.heron``: every corpus program (and each scatter program again with
  ``deterministic=True``), every small XLA-corpus fusion, every workload at its small size
  (correctness) and at its GPU size (speed), every control-flow program again as a speed
  case (``--program-speed``: heron against ``jax.jit`` of its function on its own inputs),
  compiled for the h100 (sm_90, with interpreter images beside the cubins so that every
  case can be checked on a CPU), a100 (sm_80) and mi300x (gfx942) Targets;
- ``data/``: the correctness cases' inputs, XLA:CPU's outputs (programs: the corpus's own;
  workloads: jax on the CPU, here) and heron's interpreter outputs; the workloads' speed
  cases' inputs are drawn on the GPU machine from a seed (``bundle_workloads.make_inputs``),
  the programs' speed cases take their correctness cases' inputs;
- ``wheels/``: heron's runtime wheels and what a CUDA image with jax and torch lacks
  (nvmath-python for cp311-cp313, cuda-python, cuda-pathfinder; cuda-bindings,
  cuda-core and the cuDNN frontend only for the Python versions that still fit under
  ``--max-mib``).

Compiles run in a process pool and are cached (``--cache``, default
``build/gpu-bundle-cache``) by the HLO text, the Target, the backends, the
determinism flag and a digest of heron's sources, so a rebuild after a change
elsewhere recompiles nothing.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import fnmatch
import hashlib
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bundle_workloads  # noqa: E402

#: Target preset -> the backends its artefacts carry images for.
TARGETS = {"h100": ("cuda", "interpreter"), "a100": ("cuda",), "mi300x": ("rocm",)}
#: The Target whose artefacts carry interpreter images (the CPU dry run's and the references').
REFERENCE_TARGET = "h100"
#: The presets whose peaks the report compares against (the device is matched by name).
PEAK_PRESETS = ("h100", "h200", "a100", "mi250x", "mi300x")
#: Room kept in the size limit for the manifest's wheel entries and left-out lines.
WHEEL_ENTRIES_BYTES = 16 * 1024

#: A corpus fusion is "small" when its inputs and outputs take at most this many bytes
#: (both are stored: 1 MiB let the fusions' data alone take 26 MB of the 40 MiB).
SMALL_FUSION_BYTES = 256 * 1024
#: The files of the run side, copied to the bundle's root.
RUN_FILES = (
    "run.py",
    "bundle_worker.py",
    "bundle_compare.py",
    "bundle_workloads.py",
    "bundle_autotune.py",
)
#: Files of the repository copied to the bundle's root under another name: the programs'
#: jax functions, which the worker times as ``jax.jit`` for the program speed cases.
RENAMED_RUN_FILES = {"bundle_programs.py": ROOT / "programs" / "definitions.py"}
#: The tag of the programs that get a speed case by default (issue 30: every control-flow
#: program at most 1.0x XLA's time).
PROGRAM_SPEED_TAG = "control-flow"
#: heron's runtime packages, each one wheel (runtime-only: no [compile] extra).
HERON_WHEELS = (
    "target",
    "hlo-ir",
    "runtime-core",
    "runtime-interpreter",
    "runtime-cuda",
    "runtime-rocm",
)
#: The CPython versions the bundle has binary wheels for, in the order optional wheels are
#: taken while they fit (3.12 first: the GPU images this project sees run it).
PYTHONS = ("312", "311", "313")
#: Third-party wheels: (requirement, per Python version?, minimum a machine's own copy must
#: have to be used instead, required?). Optional ones go in, in this order, while they fit.
THIRD_PARTY = (
    ("nvmath-python==1.0.0", True, "1.0", True),
    ("cuda-python==13.4.4", False, "12.6", True),
    ("cuda-pathfinder==1.9.1", False, "1.5.1", True),
    ("cuda-bindings==13.4.4", True, "12.6", False),
    ("cuda-core==1.2.2", True, "0.5", False),
    # cuDNN's graph API for convolutions (libcudnn itself comes with the image's torch or jax)
    ("nvidia-cudnn-frontend==1.32.0", True, "1.8", False),
)
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
)


# -- compile jobs (run in a process pool) -------------------------------------------------------


def _heron_digest() -> str:
    """A digest of heron's sources: a cached artefact is reused only by the same compiler."""
    digest = hashlib.sha256()
    for path in sorted((ROOT / "packages").glob("*/src/**/*.py")):
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _compile_job(job: dict[str, Any]) -> dict[str, Any]:
    """Compile one case for one Target (cached); with interpreter images, also run it there.

    Never raises: a refusal is returned as ``error`` so that the bundle still says what
    did not compile (the run reports it).
    """
    from heron.compiler import Target
    from heron.compiler.executable import compile_program
    from heron.hlo.parser import parse_module

    cache = Path(job["cache"])
    key = hashlib.sha256(
        json.dumps(
            [job["hlo"], job["target"], job["backends"], job["deterministic"], job["digest"]]
        ).encode()
    ).hexdigest()[:24]
    artefact_path = cache / f"{key}.heron"
    error_path = cache / f"{key}.error"
    start = time.perf_counter()
    if error_path.exists():
        return {"id": job["id"], "target": job["target"], "error": error_path.read_text()}
    if not artefact_path.exists():
        try:
            module = parse_module(job["hlo"], source=job["id"])
            compiled = compile_program(
                module,
                Target.preset(job["target"]),
                tuple(job["backends"]),
                deterministic=job["deterministic"],
                # heron's GEMM kernel beside every library call, so that a GPU whose
                # cuBLASLt refuses a call (or is missing) still runs the case; where
                # cuBLASLt runs it the kernel is dropped at load, as without it.
                library_fallbacks=True,
            )
            temporary = cache / f".{key}.{os.getpid()}.heron"
            compiled.artefact.save(temporary)
            os.replace(temporary, artefact_path)
        except Exception as error:  # noqa: BLE001 - any refusal is the case's result
            text = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            error_path.write_text(text[:500])
            return {"id": job["id"], "target": job["target"], "error": text[:500]}
    result: dict[str, Any] = {
        "id": job["id"],
        "target": job["target"],
        "artefact": str(artefact_path),
        "seconds": time.perf_counter() - start,
    }
    if job.get("inputs") and "interpreter" in job["backends"]:
        result.update(_interpreter_outputs(artefact_path, Path(job["inputs"]), cache))
    return result


def _interpreter_outputs(artefact_path: Path, inputs: Path, cache: Path) -> dict[str, Any]:
    """The interpreter's outputs for ``inputs`` (cached by artefact and inputs)."""
    from heron.hlo.npz_io import load_inputs, save_outputs
    from heron.hlo.parser import parse_shape
    from heron.runtime.core.artefact import load
    from heron.runtime.core.executor import Executable
    from heron.runtime.interpreter import InterpreterDevice

    key = hashlib.sha256(artefact_path.read_bytes() + inputs.read_bytes()).hexdigest()[:24]
    out = cache / f"{key}.interp.npz"
    if not out.exists():
        artefact = load(artefact_path)
        arrays = load_inputs(inputs, [parse_shape(s) for s in artefact.signature.parameters])
        device = InterpreterDevice(warp_size=artefact.target.warp_size)
        try:
            results = Executable(artefact, device, "interpreter").run(arrays)
        except Exception as error:  # noqa: BLE001
            return {"interpreter_error": f"{type(error).__name__}: {error}"[:500]}
        temporary = cache / f".{key}.{os.getpid()}.npz"
        save_outputs(temporary, [r for r in results])
        os.replace(temporary, out)
    return {"interpreter_outputs": str(out)}


# -- the cases --------------------------------------------------------------------------------


def _narrowed_product_ulps(hlo: str, floor: int | None = None) -> int | None:
    """The float bound, in f32 epsilons, a device may need for the module's dots: a
    CUDA device multiplies f32 dots at default precision in TF32 (issue 28;
    :func:`heron.harness.tolerance.narrowed_product_tolerance`), which XLA:CPU and
    heron's interpreter do not. None where no dot narrows (the corpus rule holds)."""
    import math

    import numpy as np

    from heron.harness.tolerance import narrowed_product_tolerance
    from heron.hlo.parser import parse_module

    module = parse_module(hlo)
    widest = narrowed_product_tolerance(module.entry.root_instruction, tf32=True)
    if not widest:
        return floor
    ulps = math.ceil(widest / float(np.finfo(np.float32).eps))
    return max(ulps, floor or 0)


#: What lies between an fp8 GEMM's operand and its f8 source in jax's scaled matmul
#: (``dot(convert(a) * scale, ...)``): the chain heron's fp8 GEMM rewrite looks through.
_OPERAND_CHAIN = ("convert", "multiply", "broadcast", "bitcast", "copy", "transpose", "reshape")


def _source_types(operand: Any, depth: int = 4) -> set[str]:
    """Element types of ``operand`` and of what it is made from through
    :data:`_OPERAND_CHAIN`, ``depth`` steps at most (an f8 matrix widened and scaled)."""
    types = {operand.array_shape.element_type.value}
    if depth and operand.opcode in _OPERAND_CHAIN:
        for source in operand.operands:
            types |= _source_types(source, depth - 1)
    return types


def _flops_unit(hlo: str) -> str:
    """The unit a workload's FLOPs are rated against: ``fp8``, ``mma`` (16-bit tensor
    cores), ``tf32`` or ``fp32`` (the lanes), by its dots and convolutions: the narrowest
    type any of them multiplies in (:func:`heron.hlo.dot_precision.dot_compute`: TF32 for
    f32 at default precision, as on a CUDA device since sm_80; an operand widened from f8
    counts as f8, :func:`_source_types`)."""
    from heron.hlo.dot_precision import dot_compute
    from heron.hlo.parser import parse_module

    units = set()
    for computation in parse_module(hlo).computations:
        for instruction in computation.instructions:
            if instruction.opcode not in ("dot", "convolution"):
                continue
            types = {t for o in instruction.operands for t in _source_types(o)}
            compute = dot_compute(instruction, tf32=True)
            if any(t.startswith("f8") for t in types):
                units.add("fp8")
            elif types & {"bf16", "f16"} or compute == "bf16":
                units.add("mma")
            elif compute == "tf32":
                units.add("tf32")
    return next((unit for unit in ("fp8", "mma", "tf32") if unit in units), "fp32")


def _program_index() -> list[dict[str, Any]]:
    """``programs/index.json``'s entries: name, description, tags, element types."""
    return json.loads((ROOT / "programs" / "index.json").read_text())["programs"]


def _program_inputs(name: str, data: Path) -> str:
    """The program's inputs copied into ``data``; their path in the bundle (one file for its
    correctness and speed cases)."""
    shutil.copyfile(ROOT / "programs" / name / "inputs.npz", data / f"program-{name}.inputs.npz")
    return f"data/program-{name}.inputs.npz"


def _program_cases(names: list[str] | None, data: Path) -> list[dict[str, Any]]:
    cases = []
    for entry in _program_index():
        name = entry["name"]
        if names is not None and name not in names:
            continue
        folder = ROOT / "programs" / name
        shutil.copyfile(folder / "outputs.npz", data / f"program-{name}.xla.npz")
        hlo = (folder / "module.hlo").read_text()
        base = {
            "kind": "correctness",
            "group": "program",
            "hlo": hlo,
            "inputs": _program_inputs(name, data),
            "xla_cpu": f"data/program-{name}.xla.npz",
            "description": entry.get("description", ""),
            "ulps": _narrowed_product_ulps(hlo),
        }
        cases.append({**base, "id": f"program-{name}", "name": f"program/{name}"})
        if "scatter" in entry.get("tags", ()):
            cases.append(
                {
                    **base,
                    "id": f"program-{name}-deterministic",
                    "name": f"program/{name}[deterministic]",
                    "deterministic": True,
                }
            )
    return cases


def _program_speed_names(programs: list[str] | None, speed: list[str] | None) -> list[str]:
    """The programs that get a speed case: ``speed`` (``--program-speed``; ``none``: none),
    else every :data:`PROGRAM_SPEED_TAG` program among ``programs`` (None: all)."""
    index = _program_index()
    if speed is not None:
        names = [n for n in speed if n != "none"]
        unknown = sorted(set(names) - {e["name"] for e in index})
        if unknown:
            raise SystemExit(f"--program-speed: not corpus programs: {', '.join(unknown)}")
        return [e["name"] for e in index if e["name"] in names]
    return [
        e["name"]
        for e in index
        if PROGRAM_SPEED_TAG in e.get("tags", ()) and (programs is None or e["name"] in programs)
    ]


def _module_bytes(module: Any) -> int:
    """The bytes a module's entry reads and writes: its parameters and its result's leaves."""
    from heron.hlo.memory_layout import memory_bytes

    outputs = module.entry.root_instruction.shape.leaves()
    return sum(memory_bytes(p.shape) for p in module.entry.parameters) + sum(
        memory_bytes(leaf) for leaf in outputs
    )


def _program_speed_cases(names: list[str], data: Path) -> list[dict[str, Any]]:
    """Each named program as a speed case (issue 30): its module.hlo compiled for the GPU
    Targets and timed on the GPU machine against ``jax.jit`` of its function (the bundle's
    ``bundle_programs.py``) on its corpus inputs. Tens of microseconds each: launch and host
    overhead dominate, which is what these cases measure."""
    from heron.hlo.parser import parse_module

    entries = {e["name"]: e for e in _program_index()}
    cases = []
    for name in names:
        hlo = (ROOT / "programs" / name / "module.hlo").read_text()
        cases.append(
            {
                "id": f"speed-program-{name}",
                "name": f"speed/program/{name}",
                "kind": "speed",
                "group": "speed",
                "program": name,
                "hlo": hlo,
                "inputs": _program_inputs(name, data),
                "flops_unit": _flops_unit(hlo),
                "description": entries[name].get("description", ""),
                "bytes": _module_bytes(parse_module(hlo, source=f"{name}/module.hlo")),
                "flops": 0,
                "torch": False,
            }
        )
    return cases


def _fusion_cases(patterns: list[str] | None, data: Path) -> list[dict[str, Any]]:
    """Every corpus file whose inputs are small, with inputs drawn as ``heron check`` draws them."""
    import numpy as np

    from heron.harness.corpus import default_corpus
    from heron.harness.inputs import moderate_array
    from heron.harness.scatter_inputs import keep_scatter_promises
    from heron.hlo.npz_io import save_inputs
    from heron.hlo.parser import parse_module_file
    from heron.hlo.shapes import ArrayShape

    root = default_corpus()
    cases = []
    for path in sorted(root.rglob("*.hlo")):
        relative = path.relative_to(root).as_posix()
        if patterns is not None and not any(fnmatch.fnmatch(relative, p) for p in patterns):
            continue
        module = parse_module_file(path)
        parameters = module.entry.parameters
        if not all(isinstance(p.shape, ArrayShape) for p in parameters):
            continue  # a tuple parameter: no npz convention for it
        if _module_bytes(module) > SMALL_FUSION_BYTES:
            continue
        case_id = "fusion-" + relative.removesuffix(".hlo").replace("/", "-")
        rng = np.random.default_rng(bundle_workloads.seed_of(relative))
        arguments = [moderate_array(p.shape, rng) for p in parameters]
        for fusion in (i for i in module.entry.instructions if i.opcode == "fusion"):
            if list(map(id, fusion.operands)) == list(map(id, parameters)):
                # Indices a scatter promises unique or sorted are drawn so, as heron check
                # draws them: random ones would make its kernel race (the sanitizer says so).
                arguments = keep_scatter_promises(fusion.called("calls"), arguments, rng)
        save_inputs(data / f"{case_id}.inputs.npz", arguments)
        cases.append(
            {
                "id": case_id,
                "name": f"fusion/{relative}",
                "kind": "correctness",
                "group": "fusion",
                "hlo": path.read_text(),
                "inputs": f"data/{case_id}.inputs.npz",
                "xla_cpu": None,
                "ulps": _narrowed_product_ulps(path.read_text()),
            }
        )
    return cases


#: jax's cuDNN attention lowered for CUDA (``tests/data/cudnn_attention``, written by its
#: ``generate.py``): XLA's fMHA calls, which heron makes its own fused-attention calls
#: (on a CUDA device cuDNN computes them with jax's ``[B, S, H, D]`` strides), or, with
#: padding masks or a window, HLO its own kernels compute.
CUDNN_ATTENTION = ROOT / "tests" / "data" / "cudnn_attention"
#: One of each path (0.3 MiB with their artefacts and data; all twelve take 0.75): the
#: library call forward, the forward/backward pair with grouped heads, the bias gradient
#: beside it, and the padded forward and backward as HLO.
CUDNN_ATTENTION_CASES = (
    "forward_causal",
    "backward_grouped",
    "backward_bias_gradient",
    "forward_padding",
    "backward_padding_causal",
)


def _library_cases(names: list[str] | None, data: Path) -> list[dict[str, Any]]:
    """The cuDNN attention modules (:data:`CUDNN_ATTENTION_CASES`, or those of ``names``;
    ``none``: none), inputs drawn as the corpus fusions' are; checked against heron's
    interpreter (its host attention)."""
    import numpy as np

    from heron.harness.inputs import moderate_array
    from heron.hlo.npz_io import save_inputs
    from heron.hlo.parser import parse_module_file

    chosen = CUDNN_ATTENTION_CASES if names is None else [n for n in names if n != "none"]
    unknown = sorted(set(chosen) - set(CUDNN_ATTENTION_CASES))
    if unknown:
        raise SystemExit(f"--cudnn-attention: not cases: {', '.join(unknown)}")
    cases = []
    for name in chosen:
        path = CUDNN_ATTENTION / f"{name}.hlo"
        module = parse_module_file(path)
        case_id = f"cudnn-attention-{name}"
        rng = np.random.default_rng(bundle_workloads.seed_of(case_id))
        save_inputs(
            data / f"{case_id}.inputs.npz",
            [moderate_array(p.shape, rng) for p in module.entry.parameters],
        )
        cases.append(
            {
                "id": case_id,
                "name": f"cudnn_attention/{name}",
                "kind": "correctness",
                "group": "library",
                "hlo": path.read_text(),
                "inputs": f"data/{case_id}.inputs.npz",
                "xla_cpu": None,
                "ulps": _narrowed_product_ulps(path.read_text()),
            }
        )
    return cases


def _workload_cases(names: list[str] | None, data: Path) -> list[dict[str, Any]]:
    """Each workload lowered by jax at its small size (a correctness case, XLA:CPU's outputs
    computed here) and at its GPU size (a speed case, lowered from shapes alone)."""
    import jax
    import numpy as np

    from heron.hlo.npz_io import save_inputs, save_outputs
    from heron.jax.lowering import lower

    cases = []
    for workload in bundle_workloads.WORKLOADS:
        if names is not None and workload.name not in names:
            continue
        function = workload.function()
        seed = bundle_workloads.seed_of(workload.name)
        small = bundle_workloads.make_inputs(workload.small, seed)
        case_id = f"workload-{workload.name}"
        save_inputs(data / f"{case_id}.inputs.npz", small)
        expected = jax.tree.leaves(jax.jit(function)(*small))
        save_outputs(data / f"{case_id}.xla.npz", [np.asarray(x) for x in expected])
        base = {
            "kind": "correctness",
            "group": "workload",
            "hlo": lower(function, *small).hlo_text,
            "inputs": f"data/{case_id}.inputs.npz",
            "xla_cpu": f"data/{case_id}.xla.npz",
            "description": workload.description,
            "ulps": _narrowed_product_ulps(lower(function, *small).hlo_text, workload.ulps),
        }
        cases.append({**base, "id": case_id, "name": f"workload/{workload.name}"})
        if "scatter" in workload.tags:
            cases.append(
                {
                    **base,
                    "id": f"{case_id}-deterministic",
                    "name": f"workload/{workload.name}[deterministic]",
                    "deterministic": True,
                }
            )
        shapes = [
            jax.ShapeDtypeStruct(a.shape, bundle_workloads._dtype(a.dtype)) for a in workload.gpu
        ]
        cases.append(
            {
                "id": f"speed-{workload.name}",
                "name": f"speed/{workload.name}",
                "kind": "speed",
                "group": "speed",
                "workload": workload.name,
                "hlo": lower(function, *shapes).hlo_text,
                "flops_unit": _flops_unit(lower(function, *shapes).hlo_text),
                "description": workload.description,
                "seed": seed,
                "bytes": workload.bytes_moved(workload.gpu),
                "flops": workload.flops(workload.gpu),
                "torch": workload.torch is not None,
            }
        )
    return cases


# -- wheels -----------------------------------------------------------------------------------


def _build_heron_wheels(wheels: Path) -> list[dict[str, Any]]:
    entries = []
    for folder in HERON_WHEELS:
        before = set(wheels.glob("*.whl"))
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
            + ["-w", str(wheels), str(ROOT / "packages" / folder)],
            check=True,
        )
        (made,) = set(wheels.glob("*.whl")) - before
        name, version = made.name.split("-")[:2]
        entries.append(
            {
                "file": f"wheels/{made.name}",
                "dist": name.replace("_", "-"),
                "version": version,
                "python": None,
                "minimum": version,
                "exact": True,
            }
        )
    return entries


def _download(requirement: str, python: str | None, into: Path) -> Path:
    before = set(into.glob("*.whl"))
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    command += ["-d", str(into), requirement]
    if python is not None:
        command += ["--python-version", python, "--implementation", "cp", "--abi", f"cp{python}"]
        command += [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    subprocess.run(command, check=True)
    made = set(into.glob("*.whl")) - before
    if not made:  # already there from an earlier build
        name = requirement.split("==")[0].replace("-", "_")
        version = requirement.split("==")[1]
        tag = f"-cp{python}-" if python else "-py3-"
        made = {p for p in into.glob(f"{name}-{version}*{tag}*.whl")}
    (wheel,) = made
    return wheel


def _third_party_wheels(
    wheels: Path, cache: Path, room: int, pythons: tuple[str, ...] = PYTHONS
) -> tuple[list[dict], list[str]]:
    """Required wheels always; optional ones (per Python version of ``pythons``, in its
    order) while they fit in ``room`` bytes. Returns the entries and a line per wheel left
    out."""
    downloads = cache / "wheels"
    downloads.mkdir(parents=True, exist_ok=True)
    entries, left_out = [], []
    order = []
    for requirement, per_python, minimum, required in THIRD_PARTY:
        for python in pythons if per_python else (None,):
            order.append((required, requirement, python, minimum))
    # required first, in the table's order; then the optional ones a Python version at a
    # time, in ``pythons``' order (cp312's bindings and cuda-core, which nvmath-python
    # needs together, before another version's bindings)
    order.sort(
        key=lambda item: (not item[0], pythons.index(item[2]) if item[2] and not item[0] else 0)
    )
    used = 0
    for required, requirement, python, minimum in order:
        wheel = _download(requirement, python, downloads)
        size = wheel.stat().st_size
        if not required and used + size > room:
            left_out.append(
                f"{wheel.name} ({size / 2**20:.1f} MiB): no room under the bundle's limit"
            )
            continue
        used += size
        shutil.copyfile(wheel, wheels / wheel.name)
        name, version = requirement.split("==")
        entries.append(
            {
                "file": f"wheels/{wheel.name}",
                "dist": name,
                "version": version,
                "python": f"cp{python}" if python else None,
                "minimum": minimum,
                "exact": False,
            }
        )
    return entries, left_out


# -- the bundle -------------------------------------------------------------------------------


def _peaks() -> dict[str, dict[str, Any]]:
    from heron.target import Target

    peaks = {}
    for name in PEAK_PRESETS:
        t = Target.preset(name)
        fp32 = t.core_count * t.fpus_per_core * 2 * t.clock_rate_ghz * 1e9
        mma = t.core_count * t.mma_multiply_adds_per_core_per_cycle * 2 * t.clock_rate_ghz * 1e9
        peaks[name] = {
            "arch": t.arch,
            "backend": t.backend,
            "memory_bandwidth": t.memory_bandwidth,
            "fp32_flops": fp32,
            "mma_flops": mma or fp32,
            # NVIDIA's dense tensor-core rates by operand type: TF32 half the 16-bit rate
            # (sm_80, sm_90), fp8 twice it (sm_89 and later); None where the device has none
            "tf32_flops": mma / 2 if mma and t.tf32 else None,
            "fp8_flops": mma * 2 if mma and t.fp8 else None,
        }
    return peaks


def _directory_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def build(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    out: Path = args.out
    if out.exists():
        shutil.rmtree(out)
    data = out / "data"
    data.mkdir(parents=True)
    cache: Path = args.cache
    cache.mkdir(parents=True, exist_ok=True)
    targets = [t for t in args.targets.split(",") if t]
    if REFERENCE_TARGET not in targets:
        raise SystemExit(f"--targets must include {REFERENCE_TARGET} (its interpreter images)")

    cases = _program_cases(args.programs, data)
    cases += _program_speed_cases(_program_speed_names(args.programs, args.program_speed), data)
    cases += _fusion_cases(args.fusions, data)
    cases += _library_cases(args.cudnn_attention, data)
    cases += _workload_cases(args.workloads, data)
    print(f"{len(cases)} cases; compiling for {', '.join(targets)}", flush=True)

    digest = _heron_digest()
    jobs = []
    for case in cases:
        for target in targets:
            backends = TARGETS[target]
            if case["kind"] == "speed":
                backends = tuple(b for b in backends if b != "interpreter")
            jobs.append(
                {
                    "id": case["id"],
                    "target": target,
                    "backends": list(backends),
                    "deterministic": bool(case.get("deterministic")),
                    "hlo": case["hlo"],
                    "inputs": str(out / case["inputs"]) if case.get("inputs") else None,
                    "cache": str(cache),
                    "digest": digest,
                }
            )
    results: dict[tuple[str, str], dict[str, Any]] = {}
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
        for done, result in enumerate(pool.map(_compile_job, jobs, chunksize=1), 1):
            results[(result["id"], result["target"])] = result
            if done % 50 == 0 or done == len(jobs):
                print(f"  {done}/{len(jobs)} compiled ({time.perf_counter() - start:.0f} s)")

    for case in cases:
        hlo = case.pop("hlo")
        case["hlo_bytes"] = len(hlo)
        case["artefacts"], case["build_errors"] = {}, {}
        for target in targets:
            result = results[(case["id"], target)]
            if "error" in result:
                case["build_errors"][target] = result["error"]
                continue
            relative = f"artefacts/{target}/{case['id']}.heron"
            (out / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(result["artefact"], out / relative)
            case["artefacts"][target] = relative
            if "interpreter_outputs" in result:
                interp = f"data/{case['id']}.interp.npz"
                shutil.copyfile(result["interpreter_outputs"], out / interp)
                case["interpreter"] = interp
            if "interpreter_error" in result:
                case["build_errors"]["interpreter"] = result["interpreter_error"]

    for name in RUN_FILES:
        shutil.copyfile(HERE / name, out / name)
    for name, source in RENAMED_RUN_FILES.items():
        shutil.copyfile(source, out / name)
    from heron.hlo import __version__ as heron_version

    manifest: dict[str, Any] = {
        "format": 1,
        "heron_version": heron_version,
        "created_by": f"gpu_bundle/build.py, python {sys.version.split()[0]}",
        "targets": {t: {"backends": list(TARGETS[t])} for t in targets},
        "reference_target": REFERENCE_TARGET,
        "peaks": _peaks(),
        "wheels": [],
        "wheels_left_out": [],
        "cases": cases,
    }
    wheels: list[dict[str, Any]] = []
    left_out: list[str] = []
    if not args.no_wheels:
        (out / "wheels").mkdir()
        wheels = _build_heron_wheels(out / "wheels")
        # the manifest as it will be but its wheel entries (a few hundred bytes each: the
        # margin), which grows with the cases
        manifest_bytes = len(json.dumps(manifest, indent=1)) + WHEEL_ENTRIES_BYTES
        room = int(args.max_mib * 2**20) - _directory_bytes(out) - manifest_bytes
        pythons = tuple(p for p in PYTHONS if p in args.pythons.split(","))
        more, left_out = _third_party_wheels(out / "wheels", cache, room, pythons)
        wheels += more
    manifest["wheels"], manifest["wheels_left_out"] = wheels, left_out
    (out / "bundle.json").write_text(json.dumps(manifest, indent=1))
    size = _directory_bytes(out)
    errors = sum(len(c["build_errors"]) for c in cases)
    print(
        f"{out}: {len(cases)} cases, {len(wheels)} wheels, {size / 2**20:.1f} MiB,"
        f" {errors} compile refusals, {time.perf_counter() - start:.0f} s"
    )
    for line in left_out:
        print(f"  left out: {line}")
    if size > args.max_mib * 2**20:
        print(f"the bundle is {size / 2**20:.1f} MiB, over {args.max_mib} MiB", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--programs", nargs="*", metavar="NAME", help="only these programs")
    parser.add_argument(
        "--program-speed",
        nargs="+",
        metavar="NAME",
        help="programs timed against jax.jit (default: the control-flow ones among the"
        " programs built; none: none)",
    )
    parser.add_argument("--fusions", nargs="*", metavar="GLOB", help="only these corpus files")
    parser.add_argument("--workloads", nargs="*", metavar="NAME", help="only these workloads")
    parser.add_argument(
        "--cudnn-attention",
        nargs="*",
        metavar="NAME",
        help="only these of jax's cuDNN attention modules (none: none)",
    )
    parser.add_argument("--no-wheels", action="store_true", help="no wheels (tests)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--cache", type=Path, default=ROOT / "build" / "gpu-bundle-cache")
    parser.add_argument("--max-mib", type=float, default=40.0)
    parser.add_argument(
        "--pythons",
        default=",".join(PYTHONS),
        help="CPython versions to bundle binary wheels for (312: the lent H200's; a"
        " bundle for one version has room for the cuDNN frontend)",
    )
    return build(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
