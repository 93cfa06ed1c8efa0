#!/usr/bin/env bash
# Build one of llama.cpp's tools, `llama-server` by default (the peer for the serving benchmark;
# LLAMA_TOOL=llama-mtmd-cli: bench_vision.py's, via setup_llama_mtmd.sh), from the llama.cpp sources
# vendored in the same llama-cpp-python sdist that setup_llamacpp.sh uses, OUTSIDE the repo, with the
# same ISA flags (AVX-512 named, AMX off: a native build dies with "Illegal instruction" here).
# Idempotent: skips when the binary exists. Prints the binary's path.
set -euo pipefail

TOOL="${LLAMA_TOOL:-llama-server}"
VERSION="${LLAMACPP_PY_VERSION:-0.3.36}"
WORK="${LLAMACPP_BUILD_DIR:-/work/llamacpp-build}"
OUT="${LLAMA_SERVER_BUILD_DIR:-/work/$TOOL-build}"
JOBS="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
SDIST_SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"  # of 0.3.36
# pip download prepares the sdist's metadata, building scikit-build-core & co from source first (many
# minutes): the pinned version's file straight from PyPI instead, checked by its sha256 below
SDIST_URL="https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-0.3.36.tar.gz"

BIN="$OUT/bin/$TOOL"
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi

SRC="$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp"
if [ ! -d "$SRC" ]; then
    mkdir -p "$WORK"
    SDIST="$WORK/llama_cpp_python-$VERSION.tar.gz"
    if [ ! -f "$SDIST" ] && [ "$VERSION" = "0.3.36" ]; then curl -fsSL -o "$SDIST" "$SDIST_URL"; fi
    [ -f "$SDIST" ] || python3 -m pip download --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$WORK"
    [ "$VERSION" != "0.3.36" ] || echo "$SDIST_SHA256  $SDIST" | sha256sum -c -
    tar -xzf "$SDIST" -C "$WORK"
fi

echo "building $TOOL from $SRC (a few minutes on 2 cores); log: $OUT/build.log" >&2
mkdir -p "$OUT"
{
    cmake -S "$SRC" -B "$OUT" -DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON \
        -DGGML_BMI2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON \
        -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
        -DGGML_AMX_BF16=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DCMAKE_BUILD_TYPE=Release
    nice -n 10 cmake --build "$OUT" --target "$TOOL" -j "$JOBS"
} >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log" >&2; exit 1; }
echo "$BIN"
