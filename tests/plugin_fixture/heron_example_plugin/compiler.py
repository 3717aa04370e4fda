"""The example backend's compiler: a stand-in artefact naming the module's computations."""


def compile_module(module):
    return {"module": module.name, "computations": [c.name for c in module.computations]}
