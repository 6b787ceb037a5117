"""xrt's custom ops. Each is a ``torch.library`` custom op with providers chosen by the policy."""

from xrt.pytorch.ops._providers import providers
from xrt.pytorch.ops.square import square

__all__ = ["square", "providers"]
