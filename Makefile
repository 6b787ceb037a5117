# xpuruntime: the two commands of the quick start are `make demo` and `make test`.
# Both build .venv/ from nothing the first time and reuse it afterwards.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
XRT := $(VENV)/bin/xrt
# CPU torch where there is no NVIDIA GPU; the CUDA build where there is one.
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
EXTRAS := torch,bench,dashboard,tune,dev
STAMP := $(VENV)/.xrt-installed

.PHONY: venv test test-fast demo lint clean help browser

help:
	@echo "make demo   # build .venv, benchmark, ingest into results/xrt.duckdb, gate, serve the dashboard"
	@echo "make test   # build .venv and run the test suite (CPU; GPU tests skip without a GPU)"

venv: $(STAMP)

# The CPU torch and the extras go in one pip call: one resolution instead of two, the same packages.
# pip byte-compiles what it installs: where PYTHONDONTWRITEBYTECODE is set, Python would otherwise
# compile pandas, streamlit and the rest again in every process the tests start.
$(STAMP): pyproject.toml requirements/constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
ifeq ($(HAS_GPU),1)
	$(PIP) install -q -c requirements/constraints.txt -e ".[$(EXTRAS)]"
else
	$(PIP) install -q -c requirements/constraints.txt "torch==2.13.0" -e ".[$(EXTRAS)]"
endif
	@touch $(STAMP)
	@echo "xrt installed: $(XRT)"

# The dashboard's end-to-end test drives Debian's chromium (Playwright by executable path; no
# browser download). Installed here when missing and we are root; otherwise that test skips and says why.
browser:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian's chromium for the browser test"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "note: /usr/bin/chromium is missing and cannot be installed here; the browser test will skip"; fi; \
	fi

# Two phases, whose union is the whole suite: what is independent runs on TEST_JOBS workers (pytest-xdist),
# then the tests marked `serial` (they time something and judge it), after the rest, one at a time:
# the gate's CPU protocol (about 11 minutes), the demo, the host gate and the tuner's crash tests.
# Nothing runs beside them. A busy neighbour core moves the thread CPU time they judge: with a Python
# loop on the other core, the compiled square series read 66-104 us a call against 41-43 alone
# (docs/regressions.md, "On the CPU: make test").
# The second phase runs even when the first fails, so one run reports every failure. Each phase
# lists its slowest tests last (--durations): what a faster `make test` would have to cut.
TEST_JOBS ?= 2
SERIAL := TRITON_INTERPRET=1 $(PY) -m pytest -q -p no:xdist -m serial --durations=5
test: $(STAMP) browser lint
	@rc=0; \
	echo "make test, phase 1 of 2: the tests not marked serial, on $(TEST_JOBS) workers"; \
	TRITON_INTERPRET=1 $(PY) -m pytest -q -n $(TEST_JOBS) --dist worksteal -m "not serial" --durations=15 || rc=$$?; \
	echo "make test, phase 2 of 2: the tests marked serial, one at a time"; \
	$(SERIAL) || rc=$$?; \
	exit $$rc

demo: $(STAMP)
	$(XRT) demo

lint: $(STAMP)
	$(VENV)/bin/ruff check xrt benchmarks dashboard tests scripts

clean:
	rm -rf $(VENV) build dist *.egg-info
