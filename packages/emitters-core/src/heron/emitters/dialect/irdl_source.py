"""The IRDL text that defines the ``heron_gpu`` dialect.

IRDL lets us register a dialect at run time from an MLIR module, with no C++
build: ``mlir.dialects.irdl.load_dialects`` turns each ``irdl.operation`` into
a registered operation whose operand, result, attribute and region shapes the
MLIR verifier checks. IRDL cannot express traits (terminator, side effects)
nor checks that need the indexing map's text or the symbol table; those live
in :mod:`heron.emitters.dialect.verifier`. Because IRDL ops cannot be
terminators, region bodies end with upstream ``gpu.yield`` (a terminator
with no parent restriction) rather than a dialect-specific yield.

IRDL constraint variables collapse to one type per op instance, and in LLVM
22.1 a ``variadic`` list uses one variable: every element must have the same
type. Lists that must mix types (a call's tensors and indices, a multi-output
loop's iter_args, a variadic reduction's values) are therefore declared as a
fixed number of ``optional`` slots, each with its own ``irdl.any``; the
builders fill the leading slots and set ``operandSegmentSizes`` /
``resultSegmentSizes``. The slot counts below are the dialect's arity limits.

A malformed IRDL module aborts the process inside MLIR instead of raising,
so the text is generated from the few fixed pieces here and covered by tests.
"""

DIALECT_NAME = "heron_gpu"

# Attribute names shared by the IRDL text, the builders and the verifier.
INDEXING_MAP_ATTR = "indexing_map"
CALLEE_ATTR = "callee"
REDUCER_ATTR = "reducer"
MAX_DISTANCE_ATTR = "max_distance"
NUM_TILES_ATTR = "num_tiles"
OPERAND_SEGMENTS_ATTR = "operandSegmentSizes"
RESULT_SEGMENTS_ATTR = "resultSegmentSizes"

# Arity limits of the mixed-type lists (number of optional slots). A call passes a
# subgraph function its fusion's tensors and the indices it is called at. A fusion
# usually has at most 96 operands plus outputs (XLA's kMaxOperandsAndOutputsPerFusion),
# but, as in XLA, a producer fused into a consumer with more operands is allowed as
# long as the fusion reads no more than the consumer did (a concatenate of 196
# im2col columns), so a call holds as many tensors as a kernel can take: 512
# pointers fill the 4 KiB of kernel parameters CUDA passes.
MAX_CALL_OPERANDS = 512
# A subgraph's function returns a value per root leaf: a fusion's outputs, which the
# fusion passes keep within XLA's 96 operands plus outputs (a transpose fusion of a
# MobileNet step's optimizer update had 15, over the 8 this once was).
MAX_CALL_RESULTS = 96
# A loop carries a tensor per output it writes: a reduction's per-thread loop carries
# its accumulators and every side output, which XLA's multi-output fusion lets grow
# past 16 (23 in numpyro's distributions' optimized module), so as many as a fusion
# has outputs.
MAX_ITER_ARGS = 96
MAX_SYNC_TENSORS = 16
MAX_REDUCE_VALUES = 8

OP_NAMES = (
    "loop",
    "apply_indexing",
    "pure_call",
    "allocate_shared",
    "sync_threads",
    "predicated_insert",
    "predicated_extract",
    "atomic_rmw",
    "shuffle_reduce",
    "ldmatrix",
)


def _slots(prefix: str, count: int, constraint: str = "irdl.any") -> tuple[list[str], str]:
    """``count`` optional entries, each with its own constraint variable (so types may differ)."""
    defs = [f"    %{prefix}{i} = {constraint}" for i in range(count)]
    entries = ", ".join(f"{prefix}{i}: optional %{prefix}{i}" for i in range(count))
    return defs, entries


def _op(name: str, lines: list[str]) -> str:
    return "\n".join([f"  irdl.operation @{name} {{", *lines, "  }"])


def _build_irdl_text() -> str:
    index = "    %index = irdl.is index"
    string = '    %str = irdl.base "#builtin.string"'
    symbol = '    %sym = irdl.base "#builtin.symbol_ref"'
    tensor_base = 'irdl.base "!builtin.tensor"'
    ops = []

    init_defs, inits = _slots("init", MAX_ITER_ARGS)
    res_defs, results = _slots("res", MAX_ITER_ARGS)
    ops.append(
        _op(
            "loop",
            [
                index,
                string,
                *init_defs,
                *res_defs,
                f"    irdl.operands(dims: variadic %index, {inits})",
                f"    irdl.results({results})",
                '    irdl.attributes { "indexing_map" = %str }',
                "    %body = irdl.region",
                "    irdl.regions(body: %body)",
            ],
        )
    )
    ops.append(
        _op(
            "apply_indexing",
            [
                index,
                string,
                "    irdl.operands(operands: variadic %index)",
                "    irdl.results(results: variadic %index)",
                '    irdl.attributes { "indexing_map" = %str }',
            ],
        )
    )
    arg_defs, args = _slots("arg", MAX_CALL_OPERANDS)
    res_defs, results = _slots("res", MAX_CALL_RESULTS)
    ops.append(
        _op(
            "pure_call",
            [
                symbol,
                *arg_defs,
                *res_defs,
                f"    irdl.operands({args})",
                f"    irdl.results({results})",
                '    irdl.attributes { "callee" = %sym }',
            ],
        )
    )
    ops.append(
        _op(
            "allocate_shared",
            [
                f"    %tensor = {tensor_base}",
                "    irdl.operands()",
                "    irdl.results(result: %tensor)",
            ],
        )
    )
    in_defs, ins = _slots("in", MAX_SYNC_TENSORS, tensor_base)
    out_defs, outs = _slots("out", MAX_SYNC_TENSORS, tensor_base)
    ops.append(
        _op(
            "sync_threads",
            [
                *in_defs,
                *out_defs,
                f"    irdl.operands({ins})",
                f"    irdl.results({outs})",
            ],
        )
    )
    indices = "indices: variadic %index)"
    element_access = [
        "    %i1 = irdl.is i1",
        "    %any = irdl.any",
        f"    %tensor = {tensor_base}",
        index,
    ]
    ops.append(
        _op(
            "predicated_insert",
            [
                *element_access,
                "    irdl.operands(condition: %i1, value: %any, dest: %tensor, " + indices,
                "    irdl.results(result: %tensor)",
            ],
        )
    )
    ops.append(
        _op(
            "predicated_extract",
            [
                *element_access,
                "    irdl.operands(condition: %i1, fallback: %any, src: %tensor, " + indices,
                "    irdl.results(result: %any)",
            ],
        )
    )
    ops.append(
        _op(
            "atomic_rmw",
            [
                f"    %tensor = {tensor_base}",
                index,
                "    irdl.operands(input: %tensor, indices: variadic %index)",
                "    irdl.results(result: %tensor)",
                "    %body = irdl.region",
                "    irdl.regions(body: %body)",
            ],
        )
    )
    val_defs, vals = _slots("val", MAX_REDUCE_VALUES)
    res_defs, results = _slots("res", MAX_REDUCE_VALUES)
    ops.append(
        _op(
            "shuffle_reduce",
            [
                '    %int = irdl.base "#builtin.integer"',
                symbol,
                *val_defs,
                *res_defs,
                f"    irdl.operands({vals})",
                f"    irdl.results({results})",
                '    irdl.attributes { "max_distance" = %int, "reducer" = %sym }',
            ],
        )
    )
    ops.append(
        _op(
            "ldmatrix",
            [
                '    %int = irdl.base "#builtin.integer"',
                f"    %tensor = {tensor_base}",
                index,
                '    %vector = irdl.base "!builtin.vector"',
                "    irdl.operands(src: %tensor, indices: variadic %index)",
                "    irdl.results(result: %vector)",
                '    irdl.attributes { "num_tiles" = %int }',
            ],
        )
    )
    return "\n".join([f"irdl.dialect @{DIALECT_NAME} {{", *ops, "}"]) + "\n"


IRDL_TEXT = _build_irdl_text()
