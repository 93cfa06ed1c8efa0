#!/usr/bin/env bash
# Build llama-cpp-python (the peer engine for goldens and benchmarks) from its PyPI sdist into a
# venv OUTSIDE the repo. Idempotent: skips the build if the venv already imports the pinned version
# (and only (re)writes $VENV/BUILD_INFO.json if that is missing).
#
# Why explicit ISA flags: GGML_NATIVE=ON on this 2-vCPU Sapphire-Rapids machine turns on AMX_INT8
# and the resulting library dies with "Illegal instruction"; so NATIVE is off and AVX-512 is named.
# LLAMACPP_ISA=avx2: the build the avx2 tier is compared with (GGML_AVX512=OFF and no AVX-512 or
# AVX-VNNI extension: what an AVX2-only CPU runs), into its own venv (default /work/llamacpp-avx2-venv).
set -euo pipefail

VERSION="${LLAMACPP_PY_VERSION:-0.3.36}"
ISA="${LLAMACPP_ISA:-avx512}"
case "$ISA" in
    avx512) SUFFIX="" ;;
    avx2) SUFFIX="-avx2" ;;
    *) echo "LLAMACPP_ISA=$ISA is not one of avx512, avx2" >&2; exit 2 ;;
esac
VENV="${LLAMACPP_VENV:-/work/llamacpp$SUFFIX-venv}"
WORK="${LLAMACPP_BUILD_DIR:-/work/llamacpp$SUFFIX-build}"
SDIST_SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"  # of 0.3.36
JOBS="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"

# Flag names checked against vendor/llama.cpp/ggml/CMakeLists.txt in the 0.3.36 sdist.
# LLAVA_BUILD=OFF: the multimodal (mtmd) library is not needed and doubles the build time.
if [ "$ISA" = avx2 ]; then
    AVX512_ARGS="-DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF \
-DGGML_AVX_VNNI=OFF"
else
    AVX512_ARGS="-DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON"
fi
CMAKE_ARGS_PINNED="-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON \
-DGGML_FMA=ON -DGGML_F16C=ON $AVX512_ARGS -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
-DLLAVA_BUILD=OFF -DCMAKE_BUILD_TYPE=Release"

installed() {
    [ -x "$VENV/bin/python" ] && "$VENV/bin/python" - "$VERSION" <<'PY' 2>/dev/null
import sys, llama_cpp
sys.exit(0 if llama_cpp.__version__ == sys.argv[1] else 1)
PY
}

SDIST="$WORK/llama_cpp_python-$VERSION.tar.gz"
if installed; then
    echo "llama-cpp-python $VERSION already installed in $VENV; skipping build"
    [ -f "$VENV/BUILD_INFO.json" ] && exit 0
else
    mkdir -p "$WORK"
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip
    if [ ! -f "$SDIST" ]; then
        "$VENV/bin/pip" download --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$WORK"
    fi
    if [ "$VERSION" = "0.3.36" ]; then
        echo "$SDIST_SHA256  $SDIST" | sha256sum -c -
    fi
    echo "building llama-cpp-python $VERSION (takes a while on 2 cores); log: $WORK/build.log"
    CMAKE_ARGS="$CMAKE_ARGS_PINNED" CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" \
        nice -n "${LLAMACPP_NICE:-10}" "$VENV/bin/pip" install --verbose --no-cache-dir "$SDIST" >"$WORK/build.log" 2>&1 \
        || { tail -40 "$WORK/build.log"; exit 1; }
fi

# Record what was built next to the venv (make_goldens.py copies it into the goldens). The sdist has
# no git metadata; its CHANGELOG names the vendored llama.cpp commit ("update llama.cpp to ...@sha").
"$VENV/bin/python" - "$VENV/BUILD_INFO.json" "$CMAKE_ARGS_PINNED" "$SDIST" <<'PY'
import hashlib, json, re, sys, tarfile, llama_cpp
out, cmake_args, sdist = sys.argv[1:4]
commit = None
with tarfile.open(sdist) as tar:
    member = next(m for m in tar.getmembers() if m.name.endswith("/CHANGELOG.md"))
    text = tar.extractfile(member).read().decode()
    section = text.split(f"## [{llama_cpp.__version__}]", 1)[-1]
    m = re.search(r"llama\.cpp@([0-9a-f]{7,40})", section)
    commit = m.group(1) if m else None
info = {
    "llama_cpp_python_version": llama_cpp.__version__,
    "llama_cpp_commit": commit,
    "llama_version": llama_cpp.llama_cpp.llama_version().decode(),
    "system_info": llama_cpp.llama_print_system_info().decode().strip(),
    "cmake_args": cmake_args.split(),
    "sdist_sha256": hashlib.sha256(open(sdist, "rb").read()).hexdigest(),
}
json.dump(info, open(out, "w"), indent=2)
print(json.dumps(info, indent=2))
PY
