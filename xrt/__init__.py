"""xpuruntime: a small GPU kernel runtime for PyTorch and its benchmark tracker.

``import xrt`` never imports torch. The PyTorch runtime API lives in :mod:`xrt.pytorch`
(``pip install -e '.[torch]' in an xpuruntime checkout``); the results database in :mod:`xrt.db`; timing in
:mod:`xrt.bench`; regression tracking in :mod:`xrt.track`; the tuner in :mod:`xrt.tune`.
"""

from xrt._version import __version__


# kernels/ sits beside xrt/ in the repository and is installed as xrt.kernels. When xrt is imported
# from a checkout (an editable install, or PYTHONPATH=<checkout> as `xrt bench run` does for each
# commit it measures), xrt.kernels is that same checkout's kernels/, so a commit's own kernels load
# even where an editable install of another checkout is on the path.
def _source_tree_kernels() -> None:
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.join(os.path.dirname(here), "kernels", "__init__.py")
    if "xrt.kernels" in sys.modules or os.path.isdir(os.path.join(here, "kernels")) or not os.path.isfile(src):
        return
    spec = importlib.util.spec_from_file_location("xrt.kernels", src,
                                                  submodule_search_locations=[os.path.dirname(src)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["xrt.kernels"] = module
    spec.loader.exec_module(module)
    globals()["kernels"] = module


_source_tree_kernels()

__all__ = ["__version__"]
