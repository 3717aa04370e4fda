"""A backend whose device records what it is asked to run.

Its compiler is named by a string and lives in a separate module, imported
only when asked for: that is how a real backend keeps MLIR off machines that
only run artefacts.
"""

from heron.runtime.core.hookspecs import BackendSpec, hookimpl


class ExampleDevice:
    name = "example"

    def __init__(self):
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
        compiler="heron_example_plugin.compiler:compile_module",
    )
