"""Write a program corpus: each program's HLO as JAX prints it, inputs, XLA:CPU and XLA:GPU facts.

Run from the repository root (``nox -s programs`` and ``nox -s models`` install what
they need)::

    python programs/generate.py [--corpus models] [--only NAME ...] [--no-gpu]

A corpus is a folder of the repository with a ``definitions.py`` whose
``PROGRAMS`` lists :class:`programs.definitions.Program` records: ``programs/``
(the default; JAX written by hand) or ``models/`` (flax, equinox, haiku and
optax models). For every program it writes ``<corpus>/<name>/``:

- ``module.hlo``: ``jax.jit(f, keep_unused=True).lower(*args).compiler_ir("hlo").as_hlo_text()``
  with large constants printed (a library's lookup table: pgx's lines of four),
  the pre-optimization HLO (checked: heron parses and verifies it, and its entry
  takes one parameter per argument leaf), lowered for the program's ``platform``
  (the CPU, or CUDA for a program whose linear algebra is cuSOLVER's on a GPU);
- ``inputs.npz``: the argument leaves (``jax.tree.leaves``) as ``arg0``, ``arg1``...
  (heron's convention, :mod:`heron.hlo.npz_io`; bf16 widened to f32 with its type);
- ``outputs.npz``: what XLA:CPU computes through jax, ``out0``, ``out1``... over the
  result's leaves, in the order of the entry's flattened result;
- ``xla_gpu_optimized.hlo``: XLA:GPU's module after its optimizations, compiled
  deviceless for an H100 (:func:`heron.xla_compare.xla_side.compile_with_xla`)
  with the entry's layouts made major-to-minor (:func:`default_entry_layout`)
  and the corpus's ``XLA_OPTIONS``;
- ``xla_gpu.json``: XLA:GPU's kernels (from its thunk sequence), fusion kinds,
  Triton fusions, custom calls, other thunks, buffer sizes and versions
  (:func:`xla_facts`).

and ``<corpus>/index.json``: per program its description, tags and element types.
XLA:GPU needs ``heron[xla]`` or ``HERON_XLA_PYTHON`` (docs/xla.md); ``--no-gpu``
keeps the GPU files already there.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import importlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from types import ModuleType

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402

from heron.hlo.npz_io import save_inputs, save_outputs  # noqa: E402
from heron.hlo.parser import parse_module  # noqa: E402
from heron.hlo.verifier import verify_module  # noqa: E402

HERE = Path(__file__).resolve().parent
#: programs/ and models/ import as packages of the repository's root (models/definitions.py
#: takes the Program record from programs.definitions).
sys.path.insert(0, str(HERE.parent))

from programs.definitions import Program  # noqa: E402

#: The device XLA:GPU compiles for (heron.xla_compare.targets).
TARGET = "h100"

#: Opcode -> the kind tag a program containing it gets in index.json.
OPCODE_TAGS = {
    "dot": "dot",
    "convolution": "dot",
    "reduce": "reduction",
    "reduce-window": "reduction",
    "while": "control-flow",
    "conditional": "control-flow",
    "call": "call",
    "sort": "sort",
    "gather": "gather",
    "scatter": "scatter",
    "transpose": "transpose",
    "pad": "pad",
    "slice": "slice",
    "dynamic-slice": "slice",
    "dynamic-update-slice": "slice",
    "concatenate": "concatenate",
    "custom-call": "custom-call",
}

_THUNK_KIND = re.compile(r"^\s*\d+:\s+(k\w+)", re.MULTILINE)
_CUSTOM_CALL = re.compile(r"custom-call\(.*?custom_call_target=\"([^\"]+)\"")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$", re.MULTILINE)
_OPCODE = re.compile(r"\s([a-z][\w-]*)\(")
_LAYOUT = re.compile(r"(\b[a-z][a-z0-9]*\[([0-9,]*)\])\{[0-9,]*\}")
_ENTRY_LAYOUT = "entry_computation_layout={"


def hlo_text(program: Program, arguments: tuple) -> str:
    """The program's module as jax lowers it for its platform (no device of it needed)."""
    traced = jax.jit(program.function, keep_unused=True).trace(*arguments)
    lowered = traced.lower(lowering_platforms=(program.platform,))
    return lowered.compiler_ir("hlo").as_hlo_text(print_large_constants=True)


def leaves(tree) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in jax.tree.leaves(tree)]


def element_types(module) -> list[str]:
    types = set()
    for computation in module.computations:
        for inst in computation.instructions:
            for leaf in inst.shape.leaves():
                if not leaf.is_token:
                    types.add(str(leaf.element_type))
    return sorted(types)


def kind_tags(module) -> list[str]:
    opcodes = {inst.opcode for c in module.computations for inst in c.instructions}
    return sorted({OPCODE_TAGS[op] for op in opcodes if op in OPCODE_TAGS})


def _arrays(path: Path) -> dict[str, tuple[str, tuple[int, ...], bytes]]:
    with np.load(path) as archive:
        return {k: (str(a.dtype), a.shape, a.tobytes()) for k, a in archive.items()}


def replace_npz(path: Path, save, arrays: list[np.ndarray]) -> None:
    """``save(path, arrays)``, unless ``path`` already holds the same arrays.

    A zip member records when it was written: rewriting equal arrays would change
    the committed bytes of every file at every regeneration.
    """
    fresh = path.with_suffix(".new.npz")
    save(fresh, arrays)
    if path.exists() and _arrays(path) == _arrays(fresh):
        fresh.unlink()
    else:
        fresh.replace(path)


def write_cpu_side(program: Program, folder: Path) -> dict:
    """module.hlo, inputs.npz, outputs.npz; the program's index entry."""
    arguments = program.arguments()
    text = hlo_text(program, arguments)
    module = parse_module(text, source=f"{program.name}/module.hlo")
    verify_module(module)
    inputs = leaves(arguments)
    parameters = module.entry.parameters
    if len(parameters) != len(inputs):
        raise SystemExit(
            f"{program.name}: the entry takes {len(parameters)} parameters, the arguments have"
            f" {len(inputs)} leaves"
        )
    outputs = leaves(jax.jit(program.function)(*arguments))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "module.hlo").write_text(text)
    replace_npz(folder / "inputs.npz", save_inputs, inputs)
    replace_npz(folder / "outputs.npz", save_outputs, outputs)
    return {
        "name": program.name,
        "description": program.description,
        "tags": sorted(set(program.tags) | set(kind_tags(module))),
        "element_types": element_types(module),
        "instructions": sum(len(c.instructions) for c in module.computations),
    }


def default_entry_layout(text: str) -> str:
    """``text`` with every shape of its ``entry_computation_layout`` in major-to-minor order.

    JAX's printed module may give a root transpose the layout that makes it a
    bitcast (``f32[48,32]{0,1}``) and the entry that result layout; JAX's runtime
    asks XLA for major-to-minor results, so XLA:GPU compiles the program as JAX
    runs it only with these layouts (else a transpose is a plain memcpy).
    """
    header, newline, rest = text.partition("\n")
    start = header.find(_ENTRY_LAYOUT)
    if start < 0:
        return text
    depth, end = 0, len(header)
    for end in range(start + len(_ENTRY_LAYOUT) - 1, len(header)):
        depth += {"{": 1, "}": -1}.get(header[end], 0)
        if depth == 0:
            break

    def major_to_minor(match: re.Match) -> str:
        rank = len([d for d in match.group(2).split(",") if d])
        return match.group(1) + "{" + ",".join(str(i) for i in range(rank - 1, -1, -1)) + "}"

    layout = _LAYOUT.sub(major_to_minor, header[start : end + 1])
    return header[:start] + layout + header[end + 1 :] + newline + rest


def instruction_kinds(optimized_hlo: str) -> dict[str, dict]:
    """Kernel symbol -> opcode, fusion kind and backend kind of the instruction of that name,
    in any computation (kernels inside while bodies and conditional branches included)."""
    from heron.xla_compare.xla_side import kernel_name

    kinds = {}
    for name, rest in _INSTRUCTION.findall(optimized_hlo):
        opcode = _OPCODE.search(" " + rest)
        kind = re.search(r"\bkind=(k\w+)", rest)
        backend = re.search(r'"kind"\s*:\s*"([^"]+)"', rest)
        kinds[kernel_name(name)] = {
            "opcode": opcode.group(1) if opcode else None,
            "kind": kind.group(1) if kind else None,
            "backend_kind": backend.group(1) if backend else None,
        }
    return kinds


def xla_facts(compiled, target: str) -> dict:
    """What xla_gpu.json holds, from one XLA compile (:class:`XlaCompile`)."""
    instructions = instruction_kinds(compiled.optimized_hlo)
    kernels = []
    for k in compiled.kernels:
        found = instructions.get(k.name, {})
        kind = k.kind or found.get("kind")
        backend_kind = k.backend_kind or found.get("backend_kind")
        kernels.append(
            {
                "name": k.name,
                "grid": list(k.grid),
                "block": list(k.block),
                "shared_memory": k.shared_memory,
                "opcode": found.get("opcode"),
                "kind": kind,
                "backend_kind": backend_kind,
                "triton": bool(backend_kind and "triton" in backend_kind),
            }
        )
    fusion_kinds = collections.Counter(
        k["backend_kind"]
        if k["kind"] == "kCustom" and k["backend_kind"]
        else (k["kind"] or "unfused")
        for k in kernels
    )
    thunk_kinds = collections.Counter(_THUNK_KIND.findall(compiled.thunk_sequence))
    buffers = compiled.buffers
    return {
        "target": target,
        "entry_layout": "major-to-minor (as JAX's runtime asks for it)",
        "plugin_version": compiled.plugin_version,
        "jaxlib_version": compiled.jaxlib_version,
        "kernel_count": len(kernels),
        "kernels": kernels,
        "fusion_kinds": dict(sorted(fusion_kinds.items())),
        "triton": any(k["triton"] for k in kernels),
        "custom_calls": sorted(set(_CUSTOM_CALL.findall(compiled.optimized_hlo))),
        "thunk_kinds": dict(sorted(thunk_kinds.items())),
        "thunk_sequence": compiled.thunk_sequence.splitlines(),
        "buffers": {"total_bytes": buffers.total_bytes, "peak_bytes": buffers.peak_bytes},
    }


def write_gpu_side(folder: Path, installation, options: dict[str, object]) -> None:
    """xla_gpu_optimized.hlo and xla_gpu.json, compiled with XLA's debug ``options``
    (recorded in xla_gpu.json when there are any)."""
    from heron.xla_compare.targets import target_config
    from heron.xla_compare.xla_side import compile_with_xla

    text = default_entry_layout((folder / "module.hlo").read_text())
    with tempfile.TemporaryDirectory(prefix="heron-programs-") as dump:
        compiled = compile_with_xla(text, target_config(TARGET), installation, options, Path(dump))
    facts = xla_facts(compiled, TARGET)
    if options:
        facts = {**facts, "xla_options": options}
    (folder / "xla_gpu_optimized.hlo").write_text(compiled.optimized_hlo)
    (folder / "xla_gpu.json").write_text(json.dumps(facts, indent=1) + "\n")


def definitions(corpus: Path) -> ModuleType:
    """``corpus/definitions.py``: its ``PROGRAMS`` (Program records); for a corpus built
    with libraries, their ``LIBRARY_VERSIONS`` (written into index.json); and the XLA debug
    options its XLA:GPU compiles take, ``XLA_OPTIONS`` (none when it has none)."""
    module = importlib.import_module(f"{corpus.name}.definitions")
    if Path(module.__file__).resolve().parent != corpus.resolve():
        raise SystemExit(f"{corpus.name}.definitions is {module.__file__}, not {corpus}'s")
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--corpus", type=Path, default=HERE, help="the corpus folder (default programs/)"
    )
    parser.add_argument("--only", nargs="*", help="generate these programs only")
    parser.add_argument("--no-gpu", action="store_true", help="skip XLA:GPU (keep its files)")
    args = parser.parse_args(argv)
    corpus = args.corpus.resolve()
    if corpus.parent != HERE.parent:
        parser.error(f"--corpus {args.corpus}: not a folder of the repository's root")
    defined = definitions(corpus)
    programs: list[Program] = defined.PROGRAMS
    names = [p.name for p in programs]
    duplicates = [n for n, c in collections.Counter(names).items() if c > 1]
    if duplicates:
        raise SystemExit(f"programs named twice: {duplicates}")
    installation = None
    if not args.no_gpu:
        from heron.xla_compare import find_xla

        installation = find_xla()
    unknown = sorted(set(args.only or ()) - set(names))
    if unknown:
        parser.error(f"not programs of {corpus.name}: {', '.join(unknown)}")
    index_path = corpus / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {"programs": []}
    entries = {e["name"]: e for e in index["programs"] if e["name"] in names}
    for program in programs:
        if args.only and program.name not in args.only:
            continue
        folder = corpus / program.name
        entries[program.name] = write_cpu_side(program, folder)
        if installation is not None:
            write_gpu_side(folder, installation, getattr(defined, "XLA_OPTIONS", {}))
        print(f"{program.name}: done", flush=True)
    index = {
        "jax_version": jax.__version__,
        **(
            {"library_versions": defined.LIBRARY_VERSIONS}
            if hasattr(defined, "LIBRARY_VERSIONS")
            else {}
        ),
        "generated": datetime.date.today().isoformat(),
        "xla_gpu_target": TARGET,
        "programs": [entries[n] for n in names if n in entries],
    }
    index_path.write_text(json.dumps(index, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
