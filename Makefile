# mpicomp: build and test entry points. Needs only python3 (>= 3.10) on PATH.
#   make venv      create .venv and install mpicomp (editable) with test deps and the MPICH wheel,
#                  then compile every CPU kernel into Numba's cache (python -m mpicomp warmup)
#   make warmup    compile the CPU kernels again (after changing one; make venv does it once)
#   make test      all tests: serially, then under mpiexec -n 2, 3, 4 (tests/run_tests.py)
#   make bench     the headline comparison (bench/headline.sh): compressed vs plain Allreduce,
#                  Allgather, Alltoall and Bcast in one job, on the simulated cluster (root:
#                  HOSTS x PPN ranks, links shaped to RATE) or else on HOSTS*PPN local ranks;
#                  prints a table and writes HEADLINE_PNG (bench-headline.png); options in ARGS
#                  (ARGS=--quick: seconds); NETCLUSTER=0 runs on local ranks without trying
#   make bench-codecs  the codec benchmark (python -m mpicomp.bench codecs)
#   make bench-comm  the collective benchmarks under mpiexec: allreduce (BENCH_RANKS ranks,
#                  options in ARGS, e.g. ARGS=--quick) and overlap (2 ranks, OVERLAP_ARGS)
#   make bench-net (root) the benchmark in ARGS on a simulated cluster (bench/netcluster.sh):
#                  HOSTS network namespaces (4) x PPN ranks (1), links shaped to RATE (1gbit),
#                  each host on cores of its own (PIN=0: placement left to the kernel)
#   make test-gpu  where a GPU is: the tests marked gpu (serial) and device (under mpiexec -n 2
#                  and 4), then the GPU benchmarks (bench-gpu); they skip without a CUDA device
#   make bench-gpu codecs --buffer cupy, and allreduce-gpu (256 MiB CuPy buffers, 4 ranks)
#   make gpu-wheels  download into .whl the wheels the lent GPU machine lacks (it has no
#                  internet; its python3 is 3.12 with CuPy, Numba, PyTorch and pytest); carry
#                  .whl there and run  make test-gpu WHEELS=.whl  (docs/performance.md)
#   make clean     remove caches and build outputs; make distclean also removes .venv
# Pass options to the test runner with ARGS, e.g.  make test ARGS="--stages serial,2 -k codec"
# WHEELS=DIR (a machine without internet): make venv installs DIR's wheels with no index and
#                  takes every other package from $(PYTHON)'s own site-packages (a .pth file)

PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PIP_INSTALL := $(VPY) -m pip install --disable-pip-version-check $(if $(filter true,$(CI)),--progress-bar off,)
ARGS   ?=
VENV_ARGS ?=
WHEELS ?=
OFFLINE_PTH := $(VENV)/base-site-packages.pth

.PHONY: all venv warmup test bench bench-codecs bench-comm bench-net test-gpu bench-gpu gpu-wheels clean distclean

all: test

venv: $(STAMP)

$(STAMP): setup.py pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "mpicomp needs Python >= 3.10, $(PYTHON) is " + sys.version.split()[0])'
	@if [ ! -x $(VPY) ]; then \
	  echo "creating $(VENV) with $(PYTHON)"; \
	  $(PYTHON) -m venv $(VENV_ARGS) $(VENV) || { echo "'$(PYTHON) -m venv' failed (on Debian/Ubuntu: apt-get install python3-venv)"; rm -rf $(VENV); exit 1; }; \
	fi
ifeq ($(strip $(WHEELS)),)
	$(PIP_INSTALL) --upgrade pip setuptools wheel
	$(PIP_INSTALL) -e '.[test,mpich,bench]'
else
	@ls $(WHEELS)/*.whl >/dev/null 2>&1 || { echo "WHEELS=$(WHEELS) holds no .whl files (make gpu-wheels fills .whl)"; exit 1; }
	$(PYTHON) -c 'import site; print("\n".join(site.getsitepackages()))' > $(OFFLINE_PTH)
	mv $(OFFLINE_PTH) $$($(VPY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/
	$(PIP_INSTALL) --no-index --find-links $(WHEELS) $(WHEELS)/*.whl
	$(PIP_INSTALL) --no-index --find-links $(WHEELS) --no-build-isolation -e '.[test,mpich,bench]'
endif
	$(VPY) -m mpicomp warmup --quiet
	@touch $@

GPU_PYTHON ?= 3.12
GPU_WHEELS := mpich==5.0.2 mpi4py==4.1.2 pytest-mpi==0.6 zfpy==1.0.1.post0
GPU_PLATFORMS := manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64

gpu-wheels:
	mkdir -p .whl
	$(PYTHON) -m pip download --disable-pip-version-check --no-deps --only-binary=:all: \
	  --python-version $(GPU_PYTHON) --implementation cp $(addprefix --platform ,$(GPU_PLATFORMS)) \
	  -d .whl $(GPU_WHEELS)

warmup: venv
	$(VPY) -m mpicomp warmup

test: venv
	$(VPY) tests/run_tests.py $(ARGS)

HEADLINE_PNG ?= bench-headline.png

bench: venv
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" MPIEXEC="$(CURDIR)/$(VENV)/bin/mpiexec" OMP_WAIT_POLICY=PASSIVE \
	  HOSTS=$(HOSTS) PPN=$(PPN) RATE=$(RATE) PIN=$(PIN) PYTHON=$(VPY) \
	  bench/headline.sh --plot $(HEADLINE_PNG) $(ARGS)

bench-codecs: venv
	$(VPY) -m mpicomp.bench codecs $(ARGS)

BENCH_RANKS  ?= 4
OVERLAP_ARGS ?=

bench-comm: venv
	OMP_WAIT_POLICY=PASSIVE $(VENV)/bin/mpiexec -n $(BENCH_RANKS) $(VPY) -m mpicomp.bench allreduce $(ARGS)
	OMP_WAIT_POLICY=PASSIVE $(VENV)/bin/mpiexec -n 2 $(VPY) -m mpicomp.bench overlap $(OVERLAP_ARGS)

HOSTS ?= 4
PPN   ?= 1
RATE  ?= 1gbit
PIN   ?= 1
NET_ARGS_DEFAULT := allreduce --sizes 4M,16M --cases bitplane:8.25,bitplane:4.25 --algorithms ring

bench-net: venv
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" MPIEXEC="$(CURDIR)/$(VENV)/bin/mpiexec" OMP_WAIT_POLICY=PASSIVE \
	  PIN=$(PIN) bench/netcluster.sh --hosts $(HOSTS) --ppn $(PPN) --rate $(RATE) -- \
	  $(VPY) -m mpicomp.bench $(or $(strip $(ARGS)),$(NET_ARGS_DEFAULT))

test-gpu: venv
	@$(VPY) -c "import cupy" 2>/dev/null || { echo "test-gpu needs CuPy in $(VENV): pip install 'mpicomp[gpu]' (cupy-cuda12x; cupy-cuda13x for CUDA 13), or, where $(PYTHON) has CuPy and no internet (the lent GPU machine), make gpu-wheels here and make test-gpu WHEELS=.whl there"; exit 1; }
	$(VPY) tests/run_tests.py --stages serial,2,4 -m "gpu or device" $(ARGS)

bench-gpu: venv
	$(VPY) -m mpicomp.bench codecs --buffer cupy --size-mib 512 --cases zfp:8,zfp:16,zfp:8:3,bitplane:4.25,bitplane:8.25,bitplane:16.25,cast:bfloat16 $(ARGS)
	$(VENV)/bin/mpiexec -n 4 $(VPY) -m mpicomp.bench allreduce-gpu --size-mib 256
	$(VENV)/bin/mpiexec -n 4 $(VPY) -m mpicomp.bench train --buffer cupy --plot train-gpu.png

clean:
	rm -rf build dist .pytest_cache *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
