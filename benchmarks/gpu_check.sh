#!/usr/bin/env bash
# The CUDA backend on a real GPU, in one run: its kernel and whole-model tests compiled for the device
# (TRITON_INTERPRET=0; every launch checked), then decode/prefill side by side with the CPU backend,
# as tok/s, GB/s and % of the HBM roofline `hearth plan` gives for the GPU (ROOFLINE, default H200).
# llama.cpp's CUDA build is not made here: the GPU machine has no network to fetch a CUDA toolkit.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
ROOFLINE=${ROOFLINE:-H200}
MODELS=${MODELS:-"smollm2-135m gemma3-270m qwen2.5-coder-1.5b"}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
TRITON_INTERPRET=0 HEARTH_CHECK_LAUNCHES=1 $PY -m pytest -q -p no:cacheprovider tests/gpu
HEARTH_CHECK_LAUNCHES=0 TRITON_INTERPRET=0 $PY benchmarks/bench_device.py --device cuda --roofline "$ROOFLINE" \
  --out "${OUT:-.}/gpu_cuda.json" $MODELS
$PY benchmarks/bench_device.py --device cpu --out "${OUT:-.}/gpu_cpu.json" $MODELS
