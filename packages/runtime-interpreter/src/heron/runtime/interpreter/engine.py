"""The SIMT engine: runs a program's kernel over a grid, one numpy operation per IR operation.

How a launch runs (see :mod:`~.lanes` for how values are laid out):

- The grid is cut into batches of whole blocks (:func:`~.lanes.batches`); a
  batch runs the kernel body once, every operation applied to every lane of
  the batch at once. Blocks of one batch run in lockstep, batches one after
  the other: a legal schedule, since blocks may not wait for each other.
- Divergent control flow runs under a *mask* (:attr:`Frame.mask`, ``None``
  when every lane is active): an ``scf.if`` whose condition differs between
  active lanes runs both regions, each under its part of the mask, and
  merges their results lane by lane; a loop whose bounds differ runs until
  its last lane is done, each lane's iteration under the lanes still in it.
  Arithmetic is computed on inactive lanes too (its results are never
  used); anything with an effect (memory, barriers, shuffles) and anything
  that can fault (a division) looks at the mask.
- Operations are looked up by name in :data:`SEMANTICS`, filled by the
  modules of :mod:`~.semantics` with the :func:`semantics` decorator. A
  program with an operation that has no entry is refused before it runs,
  with an error naming the operation (:func:`check_supported`).
- Each block runs from its :class:`BlockPlan`, made once per program: the
  handlers of its operations, and after each operation the values that are
  dead, which the frame drops (docs/interpreter.md, "Speed"). An operation
  whose result depends on the operation alone (a constant) may have a
  handler prepared for it when the plan is made (:data:`PREPARED`, filled by
  the :func:`prepares` decorator), which computes it once per program.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

from heron.runtime.core.device import Dim3
from heron.runtime.interpreter import races as races_module
from heron.runtime.interpreter.errors import (
    InterpreterError,
    SanitizerError,
    UnsupportedOperationError,
    WorkLimitError,
)
from heron.runtime.interpreter.lanes import LaneSpace, batches
from heron.runtime.interpreter.program import Block, Function, Op, Program, Region
from heron.runtime.interpreter.races import GlobalRaces
from heron.runtime.interpreter.types import AnyType, VectorType, parse_type

__all__ = [
    "PREPARED",
    "SEMANTICS",
    "BlockPlan",
    "TERMINATORS",
    "Frame",
    "Launch",
    "block_plan",
    "block_plans",
    "operation_uses",
    "check_supported",
    "prepares",
    "run_kernel",
    "semantics",
]

Handler = Callable[["Frame", Op], None]
#: Makes one operation's own handler when its block's plan is made (:func:`prepares`).
Preparer = Callable[[Op], Handler | None]
Registered = TypeVar("Registered")

#: Operation name -> how it runs.
SEMANTICS: dict[str, Handler] = {}
#: Operation name -> what makes an operation's own handler when its block's plan is made
#: (None: the operation runs through :data:`SEMANTICS` after all, e.g. to report an error
#: with the frame's context when it runs).
PREPARED: dict[str, Preparer] = {}
#: Operations that end a block: running a region returns their operands.
TERMINATORS = frozenset(
    {"scf.yield", "scf.condition", "func.return", "gpu.return", "memref.atomic_yield"}
)
#: Modules of heron.runtime.interpreter.semantics that register handlers.
_SEMANTIC_MODULES = (
    "arith",
    "math",
    "complex",
    "llvm",
    "control",
    "gpu",
    "memory",
    "vector",
    "atomics",
    "mma",
    "ldmatrix",
)
#: Lanes per batch: large enough that numpy's per-call cost is small, small
#: enough that a batch's values fit comfortably in memory.
DEFAULT_MAX_LANES = 1 << 18
#: The environment variable that sets the interpreter device's work limit (lane-operations
#: per launch, :class:`WorkCounter`); unset, a launch runs however long it takes.
WORK_LIMIT_ENV = "HERON_INTERPRETER_MAX_WORK"
#: What one operation's fixed cost counts in lanes (:class:`WorkCounter`): measured, an
#: operation over a warp of 32 lanes costs about as much as 100 lanes of a wide batch.
OPERATION_OVERHEAD_LANES = 64


def semantics(*names: str) -> Callable[[Handler], Handler]:
    """Register the decorated function as the meaning of the operations ``names``."""
    return _registering(SEMANTICS, names, "has two meanings")


def prepares(*names: str) -> Callable[[Preparer], Preparer]:
    """Register the decorated ``prepare(op) -> handler | None`` for the operations ``names``
    (each must also have its :func:`semantics`, which runs where ``prepare`` gives None)."""
    return _registering(PREPARED, names, "is prepared twice")


def _registering(
    table: dict[str, Registered], names: tuple[str, ...], twice: str
) -> Callable[[Registered], Registered]:
    """A decorator putting what it decorates into ``table`` under each of ``names``,
    refusing a name already there."""

    def register(value: Registered) -> Registered:
        for name in names:
            if name in table:
                raise ValueError(f"operation '{name}' {twice} in the interpreter")
            table[name] = value
        return value

    return register


def load_semantics() -> None:
    """Import every semantics module (idempotent)."""
    for name in _SEMANTIC_MODULES:
        importlib.import_module(f"heron.runtime.interpreter.semantics.{name}")


def check_supported(program: Program) -> None:
    """Refuse a program with an operation the interpreter does not implement (checked once
    per program: every launch of a kernel asks)."""
    if program.derived.get(_SUPPORTED):
        return
    load_semantics()
    for function, op in program.walk():
        if op.name not in SEMANTICS and op.name not in TERMINATORS:
            raise UnsupportedOperationError(
                f"the interpreter does not support operation '{op.name}'"
                f" ({op.describe()} in function '{function.name}' of"
                f" '{program.module_name}'); docs/interpreter.md lists the operations it runs"
            )
        for type_text in (*op.operand_types, *op.result_types):
            try:
                parse_type(type_text)
            except ValueError as exc:
                raise UnsupportedOperationError(
                    f"{exc} ({op.describe()} in function '{function.name}')"
                ) from None
    program.derived[_SUPPORTED] = True


#: The key of :func:`check_supported`'s answer in a program's ``derived`` state.
_SUPPORTED = "engine.supported"


class BlockPlan:
    """How a block runs, derived once per program (:func:`block_plan`).

    ``steps``: for each operation before the terminator, its handler, the
    operation, and the values of the block that are dead once it has run
    (their last use, here or in a nested region): the frame drops them, so
    that a batch holds only its live values (a large batch's arrays are
    megabytes each; keeping every one of them alive makes each operation
    write to fresh, unmapped memory, which costs more than the arithmetic).
    ``terminator``: the operation whose operands the block yields, if any.
    ``op_count``: the block's operations, what one run of it counts as work
    (:class:`WorkCounter`), however many steps the plan runs.
    """

    __slots__ = ("op_count", "steps", "terminator")

    def __init__(
        self,
        steps: tuple[tuple[Handler, Op, tuple[int, ...]], ...],
        terminator: Op | None,
        op_count: int,
    ) -> None:
        self.steps = steps
        self.terminator = terminator
        self.op_count = op_count


def operation_uses(op: Op) -> set[int]:
    """The values ``op`` reads: its operands and those of every operation nested in it."""
    used = set(op.operands)
    stack = list(op.regions)
    while stack:
        for inner_block in stack.pop().blocks:
            for inner in inner_block.ops:
                used.update(inner.operands)
                stack.extend(inner.regions)
    return used


def _build_plan(block: Block) -> BlockPlan:
    terminator = None
    ops = block.ops
    for index, op in enumerate(ops):
        if op.name in TERMINATORS:
            terminator, ops = op, ops[:index]
            break
    defined = set(block.arguments).union(*(op.results for op in ops))
    last_use: dict[int, int] = {value: -1 for value in defined}  # -1: never used
    for index, op in enumerate(ops):
        for value in operation_uses(op) & defined:
            last_use[value] = index
    if terminator is not None:
        for value in set(terminator.operands) & defined:
            last_use[value] = len(ops)  # yielded: alive to the end
    defined_at = {value: k for k, op in enumerate(ops) for value in op.results}
    dead: list[list[int]] = [[] for _ in ops]
    for value, index in last_use.items():
        if index == -1:  # never used: dead as soon as it is defined (arguments: at the start)
            index = defined_at.get(value, 0)
        if index < len(ops):
            dead[index].append(value)
    steps = tuple(
        (_handler(op), op, tuple(sorted(gone))) for op, gone in zip(ops, dead, strict=True)
    )
    return BlockPlan(steps, terminator, len(block.ops))


def _handler(op: Op) -> Handler:
    """How ``op`` runs in a plan: its prepared handler where it has one, else its semantics."""
    prepare = PREPARED.get(op.name)
    if prepare is not None:
        prepared = prepare(op)
        if prepared is not None:
            return prepared
    return SEMANTICS[op.name]


def block_plans(program: Program) -> dict[int, tuple[Block, BlockPlan]]:
    """The plans of ``program``'s blocks made so far, kept with it (its ``derived`` state).

    Keyed by the block's identity; each entry keeps its block, so the key stays its own.
    """
    return program.derived.setdefault("engine.block_plans", {})


def block_plan(program: Program, block: Block) -> BlockPlan:
    """``block``'s plan, made on first use and kept with ``program`` (its handlers are
    those :data:`SEMANTICS` held then)."""
    plans = block_plans(program)
    entry = plans.get(id(block))
    if entry is None:
        entry = plans[id(block)] = (block, _build_plan(block))
    return entry[1]


class WorkCounter:
    """The work one launch has done, in lane-operations, against an optional limit.

    A lane-operation is one operation run for one lane of a batch (inactive
    lanes included: the interpreter computes them too); every operation also
    counts :data:`OPERATION_OVERHEAD_LANES` for its fixed cost (Python
    dispatch, a few microseconds, which dominates when a batch has few lanes).
    So the count follows the interpreter's time (its rate depends on the
    kernel, docs/interpreter.md: operations a loop computes ahead still count
    in every iteration), and is deterministic: the same launch stops at the
    same place on every machine. The limit turns a launch
    that would take hours on the CPU (a valid kernel whose every thread loops
    over the whole input) into a :class:`WorkLimitError` that says so, instead
    of something indistinguishable from a hang. ``None``: no limit.
    """

    def __init__(self, kernel_name: str, limit: int | None) -> None:
        self.kernel_name = kernel_name
        self.limit = limit
        self.done = 0

    def add(self, lane_operations: int) -> None:
        self.done += lane_operations
        if self.limit is not None and self.done > self.limit:
            raise WorkLimitError(
                f"kernel '{self.kernel_name}': stopped after {self.done:,} lane-operations,"
                f" over the interpreter's work limit of {self.limit:,} ({WORK_LIMIT_ENV});"
                " the launch is too long to interpret under that limit"
            )


class Launch:
    """What every frame of one kernel launch shares: program, lanes of the batch, memory."""

    def __init__(
        self,
        program: Program,
        kernel: Function,
        lanes: LaneSpace,
        globals_memory: dict[str, Any],
        work: WorkCounter | None = None,
        observer: Any = None,
        races: GlobalRaces | None = None,
    ) -> None:
        self.program = program
        self.kernel = kernel
        self.lanes = lanes
        #: Shared by every batch of the launch.
        self.work = work or WorkCounter(kernel.name, None)
        #: memref.global name -> its memory (shared by every batch of the launch).
        self.globals_memory = globals_memory
        #: Free for semantics modules to keep per-batch state in (shared memory trackers...).
        self.state: dict[str, Any] = {}
        #: Hears every memory access and every block of operations run (a profiler,
        #: ``heron.runtime.interpreter.profile.AccessRecorder``); None: nothing is recorded.
        self.observer = observer
        #: The launch's global-memory race records (every batch's); None: not checked
        #: (a frame that computes a loop's index arithmetic ahead touches no memory).
        self.races = races

    @property
    def kernel_name(self) -> str:
        return self.kernel.name

    @functools.cached_property
    def operation_cost(self) -> int:
        """What one operation over the batch counts as work (:class:`WorkCounter`)."""
        return self.lanes.size + OPERATION_OVERHEAD_LANES

    @functools.cached_property
    def plans(self) -> dict[int, tuple[Block, BlockPlan]]:
        """The program's block plans (:func:`block_plans`), looked up once per batch."""
        return block_plans(self.program)


class Frame:
    """One function activation over the lanes of a batch: SSA values and the active mask."""

    def __init__(self, launch: Launch, function: Function, mask: np.ndarray | None = None):
        self.launch = launch
        self.function = function
        self.values: dict[int, Any] = {}
        #: Active lanes (bool, one per lane), or None when all are.
        self.mask = mask

    # -- values -------------------------------------------------------------------------
    @property
    def lanes(self) -> LaneSpace:
        return self.launch.lanes

    def __getitem__(self, value_id: int) -> Any:
        return self.values[value_id]

    def operands(self, op: Op) -> list[Any]:
        return [self.values[v] for v in op.operands]

    def operand(self, op: Op, index: int) -> Any:
        return self.values[op.operands[index]]

    def set_results(self, op: Op, *values: Any) -> None:
        if len(values) != len(op.results):
            raise InterpreterError(
                f"{op.describe()}: {len(values)} results computed, {len(op.results)} expected"
            )
        for value_id, value in zip(op.results, values, strict=True):
            self.values[value_id] = value

    def set_result(self, op: Op, value: Any) -> None:
        self.values[op.results[0]] = value

    @staticmethod
    def type_of(text: str) -> AnyType:
        return parse_type(text)

    def active(self) -> np.ndarray:
        """The mask as a bool array, one element per lane."""
        if self.mask is None:
            return np.ones(self.lanes.size, np.bool_)
        return self.mask

    def per_lane(self, value: Any, type_text: str) -> np.ndarray:
        """``value`` with its lane axis materialised: shape ``(lanes,) + vector shape``."""
        vtype = parse_type(type_text)
        trailing = vtype.shape if isinstance(vtype, VectorType) else ()
        array = np.asarray(value)
        return np.broadcast_to(array, (self.lanes.size, *trailing))

    # -- running regions ------------------------------------------------------------------
    def run_block(
        self, block: Block, arguments: Sequence[Any], plan: BlockPlan | None = None
    ) -> list[Any]:
        """Bind ``arguments`` to ``block``'s arguments, run it, return its terminator's operands.

        ``plan``: the steps to run (default: the block's own plan, :func:`block_plan`);
        a loop passes one without the steps it has already computed for every iteration.
        """
        names = block.arguments
        if len(arguments) != len(names):
            raise InterpreterError(
                f"a block of '{self.function.name}' takes {len(names)} arguments,"
                f" given {len(arguments)}"
            )
        launch = self.launch
        if plan is None:
            entry = launch.plans.get(id(block))
            plan = entry[1] if entry is not None else block_plan(launch.program, block)
        values = self.values
        for value_id, value in zip(names, arguments):
            values[value_id] = value
        launch.work.add(plan.op_count * launch.operation_cost)
        if launch.observer is not None:
            launch.observer.operations(self, plan.op_count)
        drop = values.pop
        for handler, op, dead in plan.steps:
            handler(self, op)
            for value_id in dead:
                drop(value_id, None)
        if plan.terminator is None:
            return []
        return [values[v] for v in plan.terminator.operands]

    def run_region(
        self, region: Region, arguments: Sequence[Any], mask: np.ndarray | None | str = "same"
    ) -> list[Any]:
        """Run a single-block region under ``mask`` (default: this frame's); its yielded values."""
        if len(region.blocks) != 1:
            raise UnsupportedOperationError(
                f"a region with {len(region.blocks)} blocks in '{self.function.name}':"
                " the interpreter runs structured control flow only (scf, before scf-to-cf)"
            )
        if isinstance(mask, str):
            return self.run_block(region.entry, arguments)
        saved = self.mask
        self.mask = mask
        try:
            return self.run_block(region.entry, arguments)
        finally:
            self.mask = saved

    def call(self, function: Function, arguments: Sequence[Any]) -> list[Any]:
        """Run ``function`` under this frame's mask; its returned values."""
        callee = Frame(self.launch, function, self.mask)
        return callee.run_region(function.body, arguments)

    # -- errors ---------------------------------------------------------------------------
    def fail(self, kind: str, op: Op, bad: np.ndarray, detail: Callable[[int], str]) -> None:
        """Raise a SanitizerError if any active lane is in ``bad``, naming the first one."""
        bad = np.broadcast_to(np.asarray(bad, np.bool_), (self.lanes.size,))
        if self.mask is not None:
            bad = bad & self.mask
        lanes = np.flatnonzero(bad)
        if lanes.size == 0:
            return
        lane = int(lanes[0])
        raise SanitizerError(
            kind,
            f"kernel '{self.launch.kernel_name}', {op.describe()} in '{self.function.name}',"
            f" {self.lanes.describe(lane)}: {detail(lane)}"
            + (f" ({lanes.size} threads in all)" if lanes.size > 1 else ""),
        )

    def unsupported(self, op: Op, why: str) -> UnsupportedOperationError:
        return UnsupportedOperationError(
            f"kernel '{self.launch.kernel_name}', {op.describe()} in '{self.function.name}': {why}"
        )


def sampled_blocks(grid: Dim3, sample: int | None) -> tuple[int, ...] | None:
    """The first and last ``sample`` blocks of ``grid`` (linear ids), or None (every block)
    when ``sample`` is None or the grid has at most ``2 * sample`` blocks.

    A kernel's index arithmetic is at its widest in its last blocks: over more than
    2^31 elements, a 32-bit offset that should have stayed 64-bit shows there, and the
    first blocks check the narrow end (``InterpreterDevice(sampled_blocks=K)``).
    """
    total = grid[0] * grid[1] * grid[2]
    if sample is None or total <= 2 * sample:
        return None
    return (*range(sample), *range(total - sample, total))


def _runs_of(
    grid: Dim3, block: Dim3, blocks: Sequence[int], max_lanes: int, warp_size: int
) -> Iterator[LaneSpace]:
    """LaneSpaces over the ascending ``blocks``: consecutive ones together, at most
    ``max_lanes`` lanes (or one block) a batch."""
    per_batch = max(1, max_lanes // (block[0] * block[1] * block[2]))
    k = 0
    while k < len(blocks):
        first = blocks[k]
        count = 1
        while k + count < len(blocks) and count < per_batch and blocks[k + count] == first + count:
            count += 1
        yield LaneSpace(grid, block, first, count, warp_size)
        k += count


def run_kernel(
    program: Program,
    kernel_name: str,
    grid: Dim3,
    block: Dim3,
    arguments: Sequence[Any],
    *,
    globals_memory: dict[str, Any] | None = None,
    max_lanes: int = DEFAULT_MAX_LANES,
    warp_size: int = 32,
    work_limit: int | None = None,
    observer: Any = None,
    progress: Callable[[int, int], None] | None = None,
    blocks: Sequence[int] | None = None,
) -> None:
    """Run ``kernel_name`` of ``program`` over ``grid`` x ``block`` on ``arguments``.

    ``arguments`` are the kernel's memref arguments, already bound to memory
    (:class:`heron.runtime.interpreter.memory.MemRef` values), in order;
    the workgroup attributions get fresh shared memory for every block.
    ``work_limit``: lane-operations the launch may do (:class:`WorkCounter`).
    ``observer``: told of every memory access and block of operations (:class:`Launch`).
    ``progress(blocks_done, blocks_total)``: told after each batch of blocks (a
    progress bar; one call per batch of up to ``max_lanes`` lanes, nothing when None).
    ``blocks``: run only these blocks (linear block ids; consecutive ones batched as
    the whole grid's are; :func:`sampled_blocks`), without the race checker, which
    needs every block's accesses; None runs the whole grid.
    """
    from heron.runtime.interpreter import memory

    check_supported(program)
    if kernel_name not in program.functions or not program.functions[kernel_name].kernel:
        raise InterpreterError(
            f"'{program.module_name}' has no kernel '{kernel_name}' (kernels:"
            f" {', '.join(program.kernels) or 'none'})"
        )
    kernel = program.functions[kernel_name]
    for what, declared, given in (
        ("block", kernel.known_block_size, block),
        ("grid", kernel.known_grid_size, grid),
    ):
        if declared is not None and tuple(declared) != tuple(given):
            raise InterpreterError(
                f"kernel '{kernel_name}' was compiled for a {what} of {tuple(declared)},"
                f" launched with {tuple(given)}"
            )
    parameter_types = kernel.argument_types
    if len(arguments) != len(parameter_types):
        raise InterpreterError(
            f"kernel '{kernel_name}' takes {len(parameter_types)} buffers, given {len(arguments)}"
        )
    if globals_memory is None:
        globals_memory = memory.globals_of(program)
    workgroup_types = kernel.body.entry.argument_types[len(parameter_types) :]
    work = WorkCounter(kernel_name, work_limit)
    total_blocks = grid[0] * grid[1] * grid[2]
    if blocks is None:
        spaces = batches(grid, block, max_lanes, warp_size)
        races = GlobalRaces(grid, block) if races_module.ENABLED else None
    else:
        outside = [b for b in blocks if not 0 <= b < total_blocks]
        if outside:
            raise InterpreterError(
                f"kernel '{kernel_name}': block {outside[0]} is outside its grid of"
                f" {total_blocks} blocks"
            )
        spaces = _runs_of(grid, block, sorted(set(blocks)), max_lanes, warp_size)
        races = None
    with np.errstate(all="ignore"):
        for lanes in spaces:
            if races is not None:
                races.start_batch(lanes)
            launch = Launch(program, kernel, lanes, globals_memory, work, observer, races)
            shared = [
                memory.shared_memref(launch, parse_type(t), f"workgroup {i}")
                for i, t in enumerate(workgroup_types)
            ]
            Frame(launch, kernel).run_region(kernel.body, [*arguments, *shared])
            if progress is not None:
                progress(lanes.first_block + lanes.block_count, total_blocks)
