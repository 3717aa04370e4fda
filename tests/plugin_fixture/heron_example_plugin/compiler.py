"""The example backend's stages: a listing of the kernel's module, then an image of it.

Each stage is ``fn(previous, context)`` (``heron.runtime.core.hookspecs``): the
first gets the ``lower-tensors`` MLIR module, which it only prints, so this
plugin needs no MLIR import of its own.
"""

from heron.runtime.core.device import KernelImage


def listing(module, context):
    """A text listing: which kernel, for which arch, and the module it comes from."""
    text = f"// kernel {context.kernel_name} for {context.target.arch}\n{module}"
    if context.dump is not None:
        context.dump("listing", text)
    return text


def image(text, context):
    """The listing as the device's image (the example device only records it)."""
    return KernelImage("example-listing", context.kernel_name, text.encode())
