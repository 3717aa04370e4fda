"""The transpose emitter's geometry: tiles and index maps over the normalised transpose.

Pure index arithmetic, no MLIR: how 128 threads of a block walk one
shared-memory tile of the transpose that hero selection found and normalised
(``heron.emitters.transposes.NormalisedTranspose``, in the fusion's analysis).
The normalised input is a row-major reshape of the operand's physical order,
and the normalised output one of the result's, which is how normalised indices
become real ones (``physical_index``).

The tile covers two normalised input dimensions: ``a`` (read along, the input's
minor one) and ``b`` (written along, the one that becomes the output's minor).
When the minor dimension does not move (102), it is carried whole inside the
tile and ``a``/``b`` are the second-minor ones (XLA's
``MostMinorDimensionUnchanged``).

A packed tile (8- and 16-bit elements, ``vector`` > 1) whose ``a`` is shorter
than the tile also folds in the input dimension just above ``a`` (XLA's ``A``
of ``GetPackedTransposeTileSizes``: ``[T2, A, T1, B]``): the tile's ``a`` axis
then walks ``fold`` rows of ``a`` one after the other, which are contiguous in
the input, so s16[2,4,64,10,6] -> [4,2,6,10,64] moves 64 x (10 x 6) elements
per block (8 blocks, as XLA) instead of 64 x 6 (80 blocks).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from heron.emitters.transposes import NormalisedTranspose
from heron.hlo.shapes import ArrayShape
from heron.indexing import IndexingMap, Interval, Variable, simplify
from heron.indexing.affine import AffineExpr, Constant, Dim, Symbol
from heron.indexing.hlo_indexing import reshape_exprs

#: Threads per block (XLA's kNumThreadsPerBlock); 4 rows of 32 threads.
THREADS = 128
#: Lanes along a tile row: one per shared-memory bank (32 banks of 32 bits), so a
#: row of the tile is read or written in one conflict-free access. A tile shape,
#: not the device's warp: a 64-lane wavefront covers two rows.
ROW_THREADS = 32
ROWS = THREADS // ROW_THREADS


def physical_index(
    exprs: Sequence[AffineExpr], sizes: Sequence[int], shape: ArrayShape
) -> list[AffineExpr]:
    """``shape``'s logical index of the element at row-major index ``exprs`` of ``sizes``.

    ``sizes`` has ``shape``'s element count; it is read as a reshape of the
    shape's physical order (normalised shapes and bitcasts are exactly that).
    """
    order = shape.major_to_minor
    physical = reshape_exprs(list(exprs), list(sizes), [shape.dims[d] for d in order])
    results: list[AffineExpr] = [Constant(0)] * shape.rank
    for position, d in enumerate(order):
        results[d] = physical[position]
    return results


# -- tiles ------------------------------------------------------------------------------


@attrs.frozen
class Tiling:
    """How one block covers a tile of the normalised input.

    ``size`` is the tile edge along ``a`` and ``b`` (32 times ``vector``);
    ``carried`` the size of the unmoved minor dimension kept whole (1 when
    there is none); ``vector`` the consecutive elements one thread reads (along
    ``a``) and writes (along ``b``).
    """

    spec: NormalisedTranspose
    a: int
    b: int
    carried: int
    vector: int
    #: Rows of ``a`` the tile's ``a`` axis walks (dimension ``a - 1``, XLA's ``A``):
    #: 1 when nothing is folded, else ``a`` is whole in the tile.
    fold: int = 1

    @property
    def size(self) -> int:
        return ROW_THREADS * (1 if self.carried > 1 else self.vector)

    @property
    def a_extent(self) -> int:
        """Elements along the tile's ``a`` axis: the tile edge, or ``fold`` whole rows of ``a``."""
        return self.fold * self.spec.dims[self.a] if self.fold > 1 else self.size

    @property
    def rank(self) -> int:
        return len(self.spec.dims)

    @property
    def tile(self) -> tuple[int, ...]:
        tile = [1] * self.rank
        tile[self.a] = tile[self.b] = self.size
        if self.fold > 1:
            tile[self.a] = self.spec.dims[self.a]
            tile[self.a - 1] = self.fold
        if self.carried > 1:
            tile[-1] = self.carried
        return tuple(tile)

    @property
    def block_counts(self) -> tuple[int, ...]:
        return tuple(-(-n // t) for n, t in zip(self.spec.dims, self.tile, strict=True))

    @property
    def num_blocks(self) -> int:
        return math.prod(self.block_counts)

    @property
    def inner(self) -> int:
        """Elements a thread handles per loop step: its vector, or the carried dimension."""
        return self.carried if self.carried > 1 else self.vector

    @property
    def steps(self) -> int:
        """Loop steps per thread: the tile's rows over the block's ``ROWS`` rows."""
        return self.size // ROWS

    @property
    def shmem_shape(self) -> tuple[int, ...]:
        """``[b][a (+1 padding)]`` (and the carried dimension): see ``shared_index``."""
        shape = [self.size, self.size + 1]
        if self.carried > 1:
            shape.append(self.carried)
        return tuple(shape)


def choose_tiling(
    spec: NormalisedTranspose, element_bits: int, heroes: int, shared_memory_limit: int
) -> Tiling:
    """The tile for ``spec``: 32x32, widened for narrow types when the shapes allow.

    XLA packs 8- and 16-bit elements so that one thread moves a 32-bit word per
    access; here a thread moves ``vector`` consecutive elements (2 for 16-bit,
    4 for 8-bit) along ``a`` when reading and along ``b`` when writing, the
    tile growing to 64x64 or 128x128 as in XLA's packed transpose. That needs
    both tiled dimensions divisible by the vector and the tiles of all heroes
    in ``shared_memory_limit`` bytes.
    """
    rank = len(spec.dims)
    perm = spec.permutation
    if perm[-1] != rank - 1:
        a, b, carried = rank - 1, perm[-1], 1
    else:
        a, b, carried = rank - 2, perm[-2], spec.dims[-1]
    bytes_per = max(1, element_bits // 8)
    vector = 1
    if carried == 1 and element_bits in (8, 16):
        vector = 32 // element_bits
        while vector > 1:
            tiling = Tiling(spec, a, b, carried, vector)
            fits = heroes * _shmem_bytes(tiling, bytes_per) <= shared_memory_limit
            if fits and spec.dims[a] % vector == 0 and spec.dims[b] % vector == 0:
                break
            vector //= 2
    return Tiling(spec, a, b, carried, vector, _fold(spec, a, b, carried, vector))


def _fold(spec: NormalisedTranspose, a: int, b: int, carried: int, vector: int) -> int:
    """Rows of ``a`` a packed tile holds (``GetPackedTransposeTileSizes``'s ``tile_size_A``).

    Only a packed tile (``vector`` > 1, no carried dimension) whose ``a`` is
    shorter than its edge folds, and only the input dimension just above ``a``
    when it is not ``b``; whole vectors must fill the folded axis.
    """
    edge = ROW_THREADS * vector
    if vector == 1 or carried > 1 or a == 0 or a - 1 == b or spec.dims[a] >= edge:
        return 1
    fold = min(spec.dims[a - 1], edge // spec.dims[a])
    return fold if fold > 1 and (fold * spec.dims[a]) % vector == 0 else 1


def _shmem_bytes(tiling: Tiling, bytes_per: int) -> int:
    return math.prod(tiling.shmem_shape) * bytes_per


def shmem_bytes(tiling: Tiling, element_bits: int) -> int:
    return _shmem_bytes(tiling, max(1, element_bits // 8))


# -- maps -------------------------------------------------------------------------------


@attrs.frozen
class TileMaps:
    """The read and write phases' index expressions over ``(th_x, bl_x)[step, inner]``.

    ``read_input`` / ``write_output`` are normalised input / output indices,
    ``read_shared`` / ``write_shared`` the shared-memory tile's indices, and
    ``read_bounds`` / ``write_bounds`` the partial-tile constraints.
    """

    dimensions: tuple[Variable, ...]
    range_vars: tuple[Variable, ...]
    read_input: tuple[AffineExpr, ...]
    read_shared: tuple[AffineExpr, ...]
    read_bounds: tuple[tuple[AffineExpr, Interval], ...]
    write_output: tuple[AffineExpr, ...]
    write_shared: tuple[AffineExpr, ...]
    write_bounds: tuple[tuple[AffineExpr, Interval], ...]

    def map(
        self, results: Sequence[AffineExpr], bounds: Sequence[tuple[AffineExpr, Interval]] = ()
    ) -> IndexingMap:
        return simplify(
            IndexingMap(self.dimensions, tuple(results), self.range_vars, (), tuple(bounds))
        )


def tile_maps(tiling: Tiling) -> TileMaps:
    """Both phases' maps (see the module docstring for the thread arrangement).

    Thread ``t`` is lane ``t % 32`` of row ``t // 32``; step ``s`` moves the 4
    rows by 4. Reading, lanes run along ``a`` (``inner`` consecutive elements
    each); writing, along ``b``. Shared memory is ``[b][a][carried]`` with ``a``
    padded by one, so a write-phase warp (consecutive ``b``) hits 32 banks.
    """
    th, bl = Dim(0), Dim(1)
    step, inner = Symbol(0), Symbol(1)
    spec = tiling.spec
    counts = tiling.block_counts
    block: list[AffineExpr] = []
    stride = tiling.num_blocks
    for count in counts:
        stride //= count
        block.append(Constant(0) if count == 1 else (bl // stride) % count)
    tile = tiling.tile
    lane = th % ROW_THREADS
    row = step * ROWS + th // ROW_THREADS
    carried = tiling.carried > 1
    along = lane * (1 if carried else tiling.vector) + (Constant(0) if carried else inner)
    along_base = lane * tiling.vector  # ``along`` without the vector element

    folded = tiling.fold > 1
    row_a = spec.dims[tiling.a]

    def indices(a_off: AffineExpr, b_off: AffineExpr) -> list[AffineExpr]:
        result = [block[i] * tile[i] for i in range(tiling.rank)]
        if folded:  # ``a_off`` walks ``fold`` whole rows of ``a``
            result[tiling.a - 1] = result[tiling.a - 1] + a_off // row_a
            result[tiling.a] = a_off % row_a
        else:
            result[tiling.a] = result[tiling.a] + a_off
        result[tiling.b] = result[tiling.b] + b_off
        if carried:
            result[-1] = inner
        return result

    def bounds(
        index: list[AffineExpr], vector_dim: int, base: AffineExpr, a_off: AffineExpr
    ) -> list[tuple[AffineExpr, Interval]]:
        found = []
        checked = (tiling.a - 1, tiling.b) if folded else (tiling.a, tiling.b)
        if folded:
            # The folded axis is shorter than the tile edge the lanes or rows span.
            if vector_dim == tiling.a:  # whole vectors fill it: one test per vector
                found.append((base, Interval(0, tiling.a_extent - tiling.vector)))
            else:
                found.append((a_off, Interval(0, tiling.a_extent - 1)))
        for i in checked:
            n = spec.dims[i]
            if n % tile[i] == 0:
                continue
            if i == vector_dim and tiling.vector > 1 and not carried:
                # A whole vector is in or out (n is a multiple of it): no per-element test.
                found.append((block[i] * tile[i] + base, Interval(0, n - tiling.vector)))
            else:
                found.append((index[i], Interval(0, n - 1)))
        return found

    read_input = indices(along, row)
    write_input = indices(row, along)
    write_output = [write_input[p] for p in spec.permutation]
    shared_tail = [inner] if carried else []
    dims = (
        Variable("th_x", Interval(0, THREADS - 1)),
        Variable("bl_x", Interval(0, tiling.num_blocks - 1)),
    )
    range_vars = (
        Variable("step", Interval(0, tiling.steps - 1)),
        Variable("inner", Interval(0, tiling.inner - 1)),
    )
    return TileMaps(
        dimensions=dims,
        range_vars=range_vars,
        read_input=tuple(read_input),
        read_shared=(row, along, *shared_tail),
        read_bounds=tuple(bounds(read_input, tiling.a, along_base, along)),
        write_output=tuple(write_output),
        write_shared=(along, row, *shared_tail),
        write_bounds=tuple(bounds(write_input, tiling.b, along_base, row)),
    )
