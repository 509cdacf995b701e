#!/usr/bin/env bash
# One run of everything the GPU path needs measured, on a fresh lent GPU machine
# (docs/performance/gpu.md), in under 8 minutes: the steps in order of what matters most,
# each capped by its own timeout so that a slow one cannot eat the others' time, each
# writing its log (and tables) into OUT; OUT/steps.json says which ran, for how long, and
# how they ended. Here: make gpu-wheels; there (the wheels carried as .whl):
#
#     bash bench/gpu_session.sh [OUT]        (OUT: $OUT, else gpu-session/)
#
# Steps: the venv from the carried wheels; the codecs at 512 MiB of real gradients, float32
# and float64 (GB/s next to a device copy, streams compared with the CPU codec's); the GPU
# codec tests (2^27 values byte for byte); the compressed Allreduce of CuPy buffers on 4
# ranks at 64 and 256 MiB, and at 64 MiB with device pieces of 128 KiB to 4 MiB (what a
# piece costs); the device tests on 2 ranks; the torch layers and the sharded optimizer on CUDA
# tensors (the machine's own PyTorch) on 2 ranks; the training benchmark on CuPy gradients for
# 1,000 steps, with the memory pool's growth; the transformer study's data-parallel layouts on
# CUDA tensors (the replicated reducer and the sharded optimizer on the device path).
set -u
OUT=${1:-${OUT:-gpu-session}}
mkdir -p "$OUT"
PY=.venv/bin/python
CASES=bitplane:4.25,bitplane:8.25,bitplane:16.25,zfp:8,zfp:16,cast:bfloat16,errbound:2.5e-4,errbound:1e-3:rel
: > "$OUT/steps.txt"

# the whole session's seconds (BUDGET): a step gets at most what is left of it, and a step
# with under 10 s left is skipped (rc 125 in steps.json), so the script ends in time
BUDGET=${BUDGET:-460}
SESSION_START=$(date +%s)

step() {  # step NAME SECONDS COMMAND...: the command's output in OUT/NAME.log
    local name=$1 cap=$2 start rc left
    shift 2
    start=$(date +%s)
    left=$(( BUDGET - (start - SESSION_START) ))
    if [ "$left" -lt 10 ]; then
        printf '%s %s %s\n' "$name" 125 0 | tee -a "$OUT/steps.txt"
        return
    fi
    [ "$cap" -gt "$left" ] && cap=$left
    timeout --kill-after=10 "$cap" "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    printf '%s %s %s\n' "$name" "$rc" "$(( $(date +%s) - start ))" | tee -a "$OUT/steps.txt"
}

step venv 200 make venv WHEELS=.whl TORCH= CALIBRATE=
step device-info 20 nvidia-smi
step codecs-f32 75 $PY -m mpicomp.bench codecs --buffer cupy --size-mib 512 --data real \
    --dtype float32 --cases "$CASES" --markdown "$OUT/codecs-f32.md"
step codecs-f64 75 $PY -m mpicomp.bench codecs --buffer cupy --size-mib 512 --data real \
    --dtype float64 --cases "$CASES" --markdown "$OUT/codecs-f64.md"
step gpu-codec-tests 90 $PY -m pytest -q -x -p no:cacheprovider tests/test_gpu_codecs.py
step allreduce-64 60 .venv/bin/mpiexec -n 4 $PY -m mpicomp.bench allreduce-gpu --size-mib 64 \
    --repeat 3 --cases bitplane:8.25,errbound:2.5e-4 --markdown "$OUT/allreduce-64.md"
step allreduce-pieces 50 .venv/bin/mpiexec -n 4 $PY -m mpicomp.bench allreduce-gpu \
    --size-mib 64 --repeat 3 --cases bitplane:8.25 --piece-kib 128,512,1024,4096 \
    --markdown "$OUT/allreduce-pieces.md"
step allreduce-256 60 .venv/bin/mpiexec -n 4 $PY -m mpicomp.bench allreduce-gpu \
    --size-mib 256 --repeat 3 --cases bitplane:8.25,errbound:2.5e-4 --markdown "$OUT/allreduce-256.md"
step device-tests 120 $PY tests/run_tests.py --stages 2 -m "gpu or device" \
    -k "bitplane or zfp or errbound or staging"
step torch-cuda 60 .venv/bin/mpiexec -n 2 $PY -m pytest --with-mpi -q -p no:cacheprovider \
    tests/test_torch_cuda.py tests/test_torch_ddp_hook.py
step train-soak 90 .venv/bin/mpiexec -n 4 $PY -m mpicomp.bench train --buffer cupy --steps 1000 \
    --cases plain,bitplane:4.25+loco,cast:bfloat16+none --json "$OUT/train-soak.json"
step transformer-cuda 90 .venv/bin/mpiexec -n 4 $PY -m mpicomp.bench transformer --device cuda \
    --layouts dp4,dp4-sharded --policies plain,bf16,hybrid --steps 60 --seeds 1 --val-kib 16 \
    --eval-every 60 --json "$OUT/transformer-cuda.json" --markdown "$OUT/transformer-cuda.md"

python3 - "$OUT" <<'EOF'
import json, sys
out = sys.argv[1]
steps = [{"step": name, "rc": int(rc), "seconds": int(sec)}
         for name, rc, sec in (line.split() for line in open(f"{out}/steps.txt"))]
json.dump(steps, open(f"{out}/steps.json", "w"), indent=1)
EOF
