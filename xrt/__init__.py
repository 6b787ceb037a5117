"""xpuruntime: a small GPU kernel runtime for PyTorch and its benchmark tracker.

``import xrt`` never imports torch. The PyTorch runtime API lives in :mod:`xrt.pytorch`
(``pip install -e '.[torch]' in an xpuruntime checkout``); the results database in :mod:`xrt.db`; timing in
:mod:`xrt.bench`; regression tracking in :mod:`xrt.track`; the tuner in :mod:`xrt.tune`.
"""

from xrt._version import __version__

__all__ = ["__version__"]
