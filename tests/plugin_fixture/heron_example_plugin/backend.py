"""A backend whose device records what it is asked to run.

Its stages are named by strings and live in a separate module, imported only
when something compiles: that is how a real backend keeps MLIR off machines
that only run artefacts.
"""

from heron.runtime.core.hookspecs import BackendSpec, Stage, hookimpl


class ExampleDevice:
    name = "example"

    def __init__(self, target=None):
        self.target = target
        self.launched = []

    def launch(self, artefact):
        self.launched.append(artefact)


def is_available():
    return True, "always available (its device only records launches)"


@hookimpl
def heron_backend_specs():
    return BackendSpec(
        name="example",
        priority=0,
        is_available=is_available,
        device_factory=ExampleDevice,
        stages=(
            Stage("listing", "heron_example_plugin.compiler:listing", extension="txt"),
            Stage("image", "heron_example_plugin.compiler:image"),
        ),
    )
