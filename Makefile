# mpicomp: build and test entry points. Needs only python3 (>= 3.10) on PATH.
#   make venv      create .venv and install mpicomp (editable) with test deps and the MPICH wheel
#   make test      all tests: serially, then under mpiexec -n 2, 3, 4 (tests/run_tests.py)
#   make bench     the codec benchmark (python -m mpicomp.bench codecs)
#   make bench-comm  the collective benchmarks under mpiexec: allreduce (BENCH_RANKS ranks,
#                  options in ARGS, e.g. ARGS=--quick) and overlap (2 ranks, OVERLAP_ARGS)
#   make test-gpu  only the tests marked gpu (they skip without a CUDA device)
#   make clean     remove caches and build outputs; make distclean also removes .venv
# Pass options to the test runner with ARGS, e.g.  make test ARGS="--stages serial,2 -k codec"

PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PIP_INSTALL := $(VPY) -m pip install --disable-pip-version-check $(if $(filter true,$(CI)),--progress-bar off,)
ARGS   ?=

.PHONY: all venv test bench bench-comm test-gpu clean distclean

all: test

venv: $(STAMP)

$(STAMP): setup.py pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "mpicomp needs Python >= 3.10, $(PYTHON) is " + sys.version.split()[0])'
	@if [ ! -x $(VPY) ]; then \
	  echo "creating $(VENV) with $(PYTHON)"; \
	  $(PYTHON) -m venv $(VENV) || { echo "'$(PYTHON) -m venv' failed (on Debian/Ubuntu: apt-get install python3-venv)"; rm -rf $(VENV); exit 1; }; \
	fi
	$(PIP_INSTALL) --upgrade pip setuptools wheel
	$(PIP_INSTALL) -e '.[test,mpich]'
	@touch $@

test: venv
	$(VPY) tests/run_tests.py $(ARGS)

bench: venv
	$(VPY) -m mpicomp.bench codecs $(ARGS)

BENCH_RANKS  ?= 4
OVERLAP_ARGS ?=

bench-comm: venv
	OMP_WAIT_POLICY=PASSIVE $(VENV)/bin/mpiexec -n $(BENCH_RANKS) $(VPY) -m mpicomp.bench allreduce $(ARGS)
	OMP_WAIT_POLICY=PASSIVE $(VENV)/bin/mpiexec -n 2 $(VPY) -m mpicomp.bench overlap $(OVERLAP_ARGS)

test-gpu: venv
	$(VPY) tests/run_tests.py --stages serial -m gpu $(ARGS)

clean:
	rm -rf build dist .pytest_cache *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
