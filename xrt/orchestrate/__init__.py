"""Work that drives the layers below it: measuring commits, ingesting, checking commits out and
profiling them (``xrt bisect``, ``xrt culprit``, ``xrt explain``, ``xrt gate --paired``'s measuring; their
commands are registered by :mod:`xrt.orchestrate.cli`). With the CLI (``xrt.cli``, ``xrt.commands``, each
package's ``cli``) and the dashboard it is the top layer: kernels -> xrt.pytorch -> xrt.bench (and
xrt.tune) -> xrt.db -> xrt.track -> here. Each layer imports only those below it
(tests/test_layering.py)."""
