"""Triton kernels. Under ``TRITON_INTERPRET=1`` (the CPU), an interpreter fix is applied on import."""

import os


def fix_interpreter_scalars() -> None:
    """Triton 3.6's interpreter turns a loop bound into ``int(array of shape (1,))``, which
    numpy >= 2.3 refuses; loops with runtime bounds then fail on the CPU only. Take the element."""
    try:
        import triton.runtime.interpreter as interp
    except ImportError:
        return
    if getattr(interp, "_xrt_fixed", False):
        return
    original = interp._patch_lang_tensor

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    interp._patch_lang_tensor = patched
    interp._xrt_fixed = True


if os.environ.get("TRITON_INTERPRET") == "1":
    fix_interpreter_scalars()
