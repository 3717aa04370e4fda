"""A hero emitter as a third-party distribution writes one: a claim, a factory, an emitter.

Hero selection analyses each fusion once, for the target it is compiled for
(``heron.emitters.fusion_analysis.FusionAnalysis``: the fusion, the target,
XLA's ``kind``, every root and its hero), and shows that one analysis to every
installed emitter. This emitter claims the fusions XLA would give its loop
emitter (``kind == "loop"``) whose name starts with ``example``; at priority 5
it outranks heron's loop emitter (0) and no specialised one (10). Its factory
is the emitter class, built from the analysis; its ``name`` is the spec's, so
the kernel reports who emitted it.

It emits one thread per element of the output: a single ``heron_gpu.loop``
over the output's thread map, every root read at the element's index
(``entry.value_of`` calls the root's subgraph) and inserted into its output.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import tensor

from heron.emitters import mlir_types
from heron.emitters.dialect import loop_op
from heron.emitters.emitter_base import EntryFunction, FusionEmitter, fusion_output_shapes
from heron.emitters.fusion_analysis import FusionAnalysis
from heron.emitters.hookspecs import EmitterSpec, hookimpl
from heron.indexing.thread_maps import LaunchDimensions, loop_thread_to_output_map

#: Threads per block, unless the target allows fewer.
THREADS_PER_BLOCK = 128


class ExampleEmitter(FusionEmitter):
    """One thread per output element; all outputs of one shape and layout."""

    name = "example"

    def __init__(self, analysis: FusionAnalysis) -> None:
        super().__init__(analysis)
        outputs = fusion_output_shapes(self.fusion)
        self.output = outputs[0]
        if any(
            (o.dims, o.minor_to_major) != (self.output.dims, self.output.minor_to_major)
            for o in outputs
        ):
            raise self.error("the example emitter writes outputs of one shape and layout only")
        if self.output.num_elements == 0:
            raise self.error("the example emitter cannot emit an empty output")

    def launch_dimensions(self) -> LaunchDimensions:
        threads = min(THREADS_PER_BLOCK, self.target.threads_per_block_limit)
        threads = min(threads, self.output.num_elements)
        return LaunchDimensions(block_x=-(-self.output.num_elements // threads), thread_x=threads)

    def emit_entry(self, entry: EntryFunction) -> list[ir.Value]:
        thread_map = loop_thread_to_output_map(
            self.output.dims, self.launch_dimensions(), minor_to_major=self.output.minor_to_major
        )
        writes = list(zip(self.analysis.roots, self.analysis.output_positions, strict=True))

        def body(symbols, indices, outputs):
            outputs = list(outputs)
            for root, positions in writes:
                for value, k in zip(entry.value_of(root, indices), positions, strict=True):
                    element = mlir_types.to_element(value, entry.output_shapes[k].element_type)
                    outputs[k] = tensor.insert(element, outputs[k], indices)
            return outputs

        dims = [entry.thread_ids[0], entry.block_ids[0]]
        return list(loop_op(thread_map, dims, entry.outputs, body).results)


def claims(analysis: object) -> bool:
    """Loop fusions named ``example*``; anything that is not an analysis is declined."""
    return (
        isinstance(analysis, FusionAnalysis)
        and analysis.kind == "loop"
        and analysis.fusion.name.startswith("example")
    )


@hookimpl
def heron_emitter_specs():
    return [
        EmitterSpec(
            name="example",
            priority=5,
            claims=claims,
            factory=ExampleEmitter,
            description="one thread per element, for loop fusions named example*",
        )
    ]
