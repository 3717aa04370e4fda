"""``heron run FILE.hlo``: evaluate a module's entry computation on a backend.

Today the one backend is ``reference``: heron's HLO reference evaluator
(numpy and ml_dtypes on the CPU). Arguments come from an .npz file
(``arg0``, ``arg1``, ... in parameter order) or, without one, are drawn at
random from a seed, so that a run is reproducible. Results go to an .npz file
(``out0``, ``out1``, ... over the flattened result tuple); the element-type
convention for both files is in ``heron.hlo.npz_io``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from heron.cli.common import CommandError, load_module

BACKENDS = ("reference",)
PREVIEW = 4


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="evaluate an HLO module's entry computation",
        description=(
            "Evaluate the entry computation of an HLO module (for a file without ENTRY,"
            " the fusion under test) and print a summary of its results."
        ),
    )
    parser.add_argument("file", metavar="FILE.hlo", help="HLO text, as XLA or JAX dump it")
    parser.add_argument(
        "--backend",
        default="reference",
        help="where to run: 'reference' (the HLO reference evaluator; the default and,"
        " in this version, the only backend)",
    )
    parser.add_argument(
        "--inputs",
        metavar="IN.npz",
        help="arguments as arrays arg0, arg1, ... in parameter order (default: random)",
    )
    parser.add_argument(
        "--output", metavar="OUT.npz", help="write the results as out0, out1, ... to this file"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the random arguments used without --inputs (default 0)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.backend not in BACKENDS:
        raise CommandError(
            f"backend '{args.backend}' is not implemented yet in this version of heron"
            f" (available: {', '.join(BACKENDS)})"
        )
    if args.inputs is not None and args.seed is not None:
        raise CommandError(
            "--seed only applies to random arguments; it makes no sense with --inputs"
        )

    from heron.hlo.evaluator import evaluate_module, flatten_literal, random_arguments
    from heron.hlo.npz_io import load_inputs, save_outputs

    module = load_module(args.file)
    parameters = module.entry.parameters
    if args.inputs is not None:
        arguments = load_inputs(
            args.inputs, [p.shape for p in parameters], [p.name for p in parameters]
        )
        source = f"from {args.inputs}"
    else:
        seed = 0 if args.seed is None else args.seed
        arguments = random_arguments(module, seed=seed)
        source = f"random, seed {seed}"

    start = time.perf_counter()
    result = evaluate_module(module, arguments)
    elapsed = time.perf_counter() - start
    leaves = flatten_literal(result)

    print(f"module {module.name}: entry {module.entry.name}, backend {args.backend}")
    print(f"parameters ({source}):")
    if not parameters:
        print("  (none)")
    for i, parameter in enumerate(parameters):
        print(f"  arg{i}  {parameter.name}  {parameter.shape}")
    print("outputs:")
    for i, leaf in enumerate(leaves):
        print(f"  out{i}  {describe(leaf)}")
    print(f"evaluated in {elapsed:.2f} s")
    if args.output is not None:
        save_outputs(args.output, leaves)
        print(f"wrote {len(leaves)} output(s) to {args.output}")
    return 0


def _type_name(array: np.ndarray) -> str:
    from heron.hlo.element_types import ElementType

    try:
        return ElementType.from_numpy(array.dtype).value
    except ValueError:
        return str(array.dtype)


def describe(leaf: object) -> str:
    """One line: shape and a few statistics of a result array."""
    if not isinstance(leaf, np.ndarray):
        return f"{type(leaf).__name__} (no value)"
    head = f"{_type_name(leaf)}[{','.join(str(d) for d in leaf.shape)}]"
    if leaf.size == 0:
        return f"{head}  (empty)"
    flat = leaf.reshape(-1)
    if leaf.dtype == np.bool_:
        preview = ", ".join("true" if v else "false" for v in flat[:PREVIEW])
        return f"{head}  true {int(np.count_nonzero(flat))} of {flat.size}  first [{preview}]"
    if leaf.dtype.kind == "c":
        values = flat.astype(np.complex128)
        preview = ", ".join(f"{v:.4g}" for v in values[:PREVIEW])
        return f"{head}  mean {values.mean():.4g}  first [{preview}]"
    values = flat.astype(np.float64)
    preview = ", ".join(f"{v:.4g}" for v in values[:PREVIEW])
    finite = values[np.isfinite(values)]
    stats = (
        f"min {finite.min():.4g}  max {finite.max():.4g}  mean {finite.mean():.4g}"
        if finite.size
        else "no finite values"
    )
    special = values.size - finite.size
    extra = f"  ({special} non-finite)" if special else ""
    return f"{head}  {stats}{extra}  first [{preview}]"
