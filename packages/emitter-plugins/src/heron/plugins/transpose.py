"""The transpose emitter: shared-memory tiles so that both reads and writes are coalesced.

XLA's structure (seeds/xla-gpu-emitters.md, "Transpose emitter"; the RFC's
"Emitters"), in two ``heron_gpu.loop`` phases around one barrier:

1. read: 128 threads per block walk one tile of the (normalised) transpose
   input, consecutive threads along the input's minor dimension; each
   transpose hero's operand is computed there (``pure_call`` of its subgraph)
   and inserted into that hero's ``allocate_shared`` tile. Side outputs (roots
   that are not computed from a transpose) are written in the same loop at
   the input index, as XLA does: their shapes are bitcasts of the input.
2. ``sync_threads`` on every tile;
3. write: the threads walk the tile again, consecutive threads along the
   output's minor dimension, extract each hero's value from shared memory
   and evaluate each root's epilogue with the hero value injected, writing
   the outputs.

Several transpose heroes are allowed when they share the normalised
transpose (one tile each). Partial tiles at the edges are the maps' domain
constraints (the loop skips those points). Narrow types use wider tiles and
``vector`` consecutive elements per thread (see ``transpose_tiling``). The
tile is ``[b][a + 1]``: one column of padding against bank conflicts.

Sub-byte elements (s4, u4, s2, f4) are held one per byte in the tile (``i8``),
so that no two threads share a shared-memory byte; XLA itself leaves s4
transposes of the minor dimension to the loop emitter.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, tensor

from heron.emitters import mlir_types
from heron.emitters.dialect import (
    allocate_shared_op,
    apply_indexing_op,
    loop_op,
    sync_threads_op,
)
from heron.emitters.dialect.irdl_source import MAX_ITER_ARGS, MAX_SYNC_TENSORS
from heron.emitters.emitter_base import EntryFunction, FusionEmitter, fusion_output_shapes
from heron.emitters.fusion_analysis import FusionAnalysis, claims_kind
from heron.emitters.hookspecs import EmitterSpec, hookimpl
from heron.emitters.transposes import NormalisedTranspose
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction
from heron.hlo.shapes import ArrayShape
from heron.indexing import IndexingMap
from heron.indexing.affine import AffineExpr, replace
from heron.indexing.thread_maps import MAX_BLOCKS_X, LaunchDimensions
from heron.partitioner.subgraph import leaf_shapes
from heron.plugins.iteration import epilogue_map
from heron.plugins.transpose_tiling import (
    THREADS,
    TileMaps,
    Tiling,
    choose_tiling,
    physical_index,
    shmem_bytes,
    tile_maps,
)

__all__ = ["TransposeEmitter", "heron_emitter_specs"]

Values = list[ir.Value]


class _Root:
    """One fusion root: its output position and, for a transposed root, its hero and epilogue.

    ``epilogue`` maps the hero's index to the root's (None when the root is
    the hero itself); a root without a hero is a side output.
    """

    def __init__(
        self,
        inst: Instruction,
        position: int,
        hero: Instruction | None,
        epilogue: IndexingMap | None,
    ) -> None:
        self.inst = inst
        self.position = position
        self.hero = hero
        self.epilogue = epilogue


class TransposeEmitter(FusionEmitter):
    """Shared-memory transpose of one or more heroes with epilogues and side outputs."""

    name = "transpose"

    def __init__(self, analysis: FusionAnalysis) -> None:
        super().__init__(analysis)
        description = analysis.transpose
        if description is None:
            raise self.error(
                f"hero selection found no tiled transpose in this fusion (its kind is"
                f" {analysis.kind!r}); the transpose emitter tiles the transpose the analysis"
                " describes"
            )
        self.transposes: list[Instruction] = list(description.heroes)
        if len(self.transposes) > MAX_SYNC_TENSORS:
            raise self.error(f"{len(self.transposes)} transpose heroes exceed {MAX_SYNC_TENSORS}")
        self.spec: NormalisedTranspose = description.normalised
        self.input_shape = self.transposes[0].operands[0].shape
        self.roots = self._classify_roots()
        bits = max(self._shared_bits(t) for t in self.transposes)
        self.shared_memory_limit = self.target.shared_memory_per_block
        self.tiling: Tiling = choose_tiling(
            self.spec, bits, len(self.transposes), self.shared_memory_limit
        )
        self._check_limits(bits)
        self.maps: TileMaps = tile_maps(self.tiling)
        self._check_epilogues()

    def _check_epilogues(self) -> None:
        """Refuse, when built, every root emission could not write (the spec says
        ``refuses_when_built``): a transposed root after its hero is an epilogue root
        reading the tiled heroes only, the epilogue's roots of one shape; the side
        outputs and the transposed roots each fit one loop's iteration arguments; no
        function reads a value only an epilogue computes."""
        side = [r for r in self.roots if r.hero is None]
        for count in (len(side), len(self.roots) - len(side)):
            self._check_iter_args(count)
        partitioned = self.partitioned()
        tiled = {id(t) for t in self.transposes}
        for root in self.roots:
            if root.hero is None or root.epilogue is None:
                continue
            sub = partitioned.epilogue_of(root.inst)
            if sub is None:
                raise self.error("a transposed root without an epilogue subgraph", root.inst)
            missing = [h.name for h in sub.injected if id(h) not in tiled]
            if missing:
                raise self.error(f"its epilogue needs heroes {missing} not tiled here", root.inst)
            if len({r.shape.dims for r in sub.roots}) != 1:
                raise self.error("an epilogue whose roots have different shapes", root.inst)
            if not any(sub_root is root.inst for sub_root in sub.roots):
                raise self.error(f"it is not a root of its epilogue {sub.name}", root.inst)
        self.refuse_uncallable_reads(
            [*(t.operands[0] for t in self.transposes), *(r.inst for r in side)]
        )

    # -- analysis --------------------------------------------------------------------

    def _classify_roots(self) -> list[_Root]:
        """Every root with its tiled hero and epilogue map, or as a side output."""
        analysis = self.analysis
        roots: list[_Root] = []
        for inst, hero, positions in zip(
            analysis.roots, analysis.heroes, analysis.output_positions, strict=True
        ):
            if len(positions) != 1:
                raise self.error(
                    f"root {inst.opcode} '{inst.name}' has a tuple shape {inst.shape}; the"
                    " transpose emitter writes arrays",
                    inst,
                )
            (position,) = positions
            if not any(hero is t for t in self.transposes):
                if inst.array_shape.num_elements != self.input_shape.num_elements:
                    raise self.error(
                        f"side output {inst.opcode} '{inst.name}' ({inst.shape}) is not a"
                        f" bitcast of the transpose input {self.input_shape}",
                        inst,
                    )
                roots.append(_Root(inst, position, None, None))
                continue
            try:
                epilogue = None if inst is hero else epilogue_map(hero, inst)
            except UnsupportedError as exc:
                raise self.error(f"its epilogue cannot be tiled: {exc.message}", inst) from exc
            roots.append(_Root(inst, position, hero, epilogue))
        return roots

    @staticmethod
    def _shared_bits(transpose: Instruction) -> int:
        element = transpose.shape.element_type
        if element.is_complex:
            return element.bit_width
        return max(8, element.bit_width)

    def _check_limits(self, bits: int) -> None:
        tiling = self.tiling
        total = len(self.transposes) * shmem_bytes(tiling, bits)
        if total > self.shared_memory_limit:
            raise self.error(
                f"{len(self.transposes)} transpose tiles need {total} bytes of shared memory"
                f" ({self.target.arch}'s limit per block is {self.shared_memory_limit})"
            )
        if tiling.num_blocks > MAX_BLOCKS_X:
            raise self.error(f"{tiling.num_blocks} blocks exceed {MAX_BLOCKS_X}")

    # -- FusionEmitter ---------------------------------------------------------------

    def launch_dimensions(self) -> LaunchDimensions:
        return LaunchDimensions(block_x=self.tiling.num_blocks, thread_x=THREADS)

    def heroes(self) -> tuple[Instruction, ...]:
        return tuple(self.transposes)

    def emit_entry(self, entry: EntryFunction) -> Values:
        dims = [entry.thread_ids[0], entry.block_ids[0]]
        outputs = list(entry.outputs)
        tiles = [allocate_shared_op(self._tile_type(t)).results[0] for t in self.transposes]
        side = [r for r in self.roots if r.hero is None]
        filled, side_values = self._read_phase(
            entry, dims, tiles, [outputs[r.position] for r in side]
        )
        for root, value in zip(side, side_values, strict=True):
            outputs[root.position] = value
        synced = list(sync_threads_op(filled).results)
        transposed = [r for r in self.roots if r.hero is not None]
        written = self._write_phase(
            entry, dims, synced, transposed, [outputs[r.position] for r in transposed]
        )
        for root, value in zip(transposed, written, strict=True):
            outputs[root.position] = value
        return outputs

    # -- phases ----------------------------------------------------------------------

    def _tile_type(self, transpose: Instruction) -> ir.RankedTensorType:
        return ir.RankedTensorType.get(
            list(self.tiling.shmem_shape), _shared_type(transpose.shape.element_type)
        )

    def _read_phase(
        self,
        entry: EntryFunction,
        dims: Values,
        tiles: Values,
        side_outputs: Values,
    ) -> tuple[Values, Values]:
        """One loop per tile (as XLA), then one loop for the side outputs, at the input index."""
        maps = self.maps
        spec = self.spec
        shared_map = maps.map(maps.read_shared)
        filled = []
        for transpose, tile in zip(self.transposes, tiles, strict=True):
            operand = transpose.operands[0]
            operand_map = maps.map(
                physical_index(maps.read_input, spec.dims, operand.shape), maps.read_bounds
            )

            def body(symbols: Values, index: Values, iter_args: Values, t=transpose) -> Values:
                shared = list(apply_indexing_op(shared_map, dims, symbols).results)
                value = entry.value_of(t.operands[0], index)[0]
                stored = _to_shared(value, t.shape.element_type)
                return [tensor.insert(stored, iter_args[0], shared)]

            filled.append(loop_op(operand_map, dims, [tile], body).results[0])
        side = [r for r in self.roots if r.hero is None]
        if not side:
            return filled, []
        side_maps = [
            maps.map(physical_index(maps.read_input, spec.dims, r.inst.shape)) for r in side
        ]
        bounds_map = maps.map(maps.read_input, maps.read_bounds)

        def side_body(symbols: Values, _index: Values, iter_args: Values) -> Values:
            results = list(iter_args)
            for n, (root, root_map) in enumerate(zip(side, side_maps, strict=True)):
                index = list(apply_indexing_op(root_map, dims, symbols).results)
                value = entry.value_of(root.inst, index)[0]
                element = mlir_types.to_element(value, root.inst.shape.element_type)
                results[n] = tensor.insert(element, results[n], index)
            return results

        written = list(loop_op(bounds_map, dims, side_outputs, side_body).results)
        return filled, written

    def _write_phase(
        self,
        entry: EntryFunction,
        dims: Values,
        tiles: Values,
        roots: list[_Root],
        outputs: Values,
    ) -> Values:
        maps = self.maps
        first = self.transposes[0]
        output_dims = self.spec.output_dims
        hero_exprs = physical_index(maps.write_output, output_dims, first.shape)
        loop_map = maps.map(hero_exprs, maps.write_bounds)
        shared_map = maps.map(maps.write_shared)
        root_maps = [
            None
            if r.hero is first and r.epilogue is None
            else maps.map(
                _compose(r.epilogue, physical_index(maps.write_output, output_dims, r.hero.shape))
            )
            for r in roots
        ]

        def body(symbols: Values, hero_index: Values, iter_args: Values) -> Values:
            shared = list(apply_indexing_op(shared_map, dims, symbols).results)
            hero_values: dict[int, ir.Value] = {}
            for transpose, tile in zip(self.transposes, tiles, strict=True):
                loaded = tensor.extract(tile, shared)
                hero_values[id(transpose)] = _from_shared(loaded, transpose.shape.element_type)
            results = list(iter_args)
            for k, (root, root_map) in enumerate(zip(roots, root_maps, strict=True)):
                if root_map is None:
                    index = list(hero_index)
                    value = hero_values[id(root.hero)]
                else:
                    index = list(apply_indexing_op(root_map, dims, symbols).results)
                    value = (
                        self._epilogue(entry, root, index, hero_values)
                        if root.epilogue is not None
                        else hero_values[id(root.hero)]
                    )
                element = mlir_types.to_element(value, root.inst.shape.element_type)
                results[k] = tensor.insert(element, results[k], index)
            return results

        return list(loop_op(loop_map, dims, outputs, body).results)

    def _epilogue(
        self,
        entry: EntryFunction,
        root: _Root,
        index: Values,
        hero_values: dict[int, ir.Value],
    ) -> ir.Value:
        """The root's value: its epilogue called with the injected heroes' values."""
        sub = entry.partitioned.epilogue_of(root.inst)
        assert sub is not None, "refused when built (_check_epilogues)"
        injected = [hero_values[id(h)] for h in sub.injected]
        results = entry.call_subgraph(sub, index, injected)
        offset = 0
        for sub_root in sub.roots:
            if sub_root is root.inst:
                return results[offset]
            offset += len(leaf_shapes(sub_root.shape))
        raise AssertionError(f"'{root.inst.name}' is not a root of {sub.name}: refused when built")

    def _check_iter_args(self, count: int) -> None:
        if count > MAX_ITER_ARGS:
            raise UnsupportedError(
                f"fusion '{self.fusion.name}': {count} tensors in one transpose loop exceed"
                f" {MAX_ITER_ARGS}",
                self.fusion.location,
            )

    def output_shapes(self) -> tuple[ArrayShape, ...]:
        return fusion_output_shapes(self.fusion)

    def loop_maps(self) -> tuple[IndexingMap, IndexingMap]:
        """The read and write loops' maps (for tests and docs)."""
        maps = self.maps
        read = maps.map(
            physical_index(maps.read_input, self.spec.dims, self.input_shape), maps.read_bounds
        )
        write = maps.map(
            physical_index(maps.write_output, self.spec.output_dims, self.transposes[0].shape),
            maps.write_bounds,
        )
        return read, write


# -- element types in shared memory -------------------------------------------------------


def _shared_type(element) -> ir.Type:
    """The tile's element type: the register type, sub-byte integers widened to ``i8``."""
    scalar = mlir_types.scalar_type(element)
    if isinstance(scalar, ir.IntegerType) and 1 < ir.IntegerType(scalar).width < 8:
        return ir.IntegerType.get_signless(8)
    return scalar


def _to_shared(value: ir.Value, element) -> ir.Value:
    target = _shared_type(element)
    if value.type == target:
        return value
    return arith.extui(target, value)


def _from_shared(value: ir.Value, element) -> ir.Value:
    scalar = mlir_types.scalar_type(element)
    if value.type == scalar:
        return value
    return arith.trunci(scalar, value)


def _compose(epilogue: IndexingMap | None, hero_index: list[AffineExpr]) -> list[AffineExpr]:
    """The root's index: ``epilogue`` (hero index -> root index) applied to ``hero_index``."""
    if epilogue is None:
        return hero_index
    return [replace(expr, dims=hero_index) for expr in epilogue.results]


@hookimpl
def heron_emitter_specs() -> list[EmitterSpec]:
    return [
        EmitterSpec(
            name="transpose",
            priority=10,
            claims=claims_kind("transpose"),
            factory=TransposeEmitter,
            refuses_when_built=True,
            description="shared-memory tiled transpose (coalesced reads and writes)",
        )
    ]
