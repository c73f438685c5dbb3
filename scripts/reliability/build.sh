#!/usr/bin/env bash
# build.sh OUTDIR - build the reliability programs (soak) with nvcc
# -cudart shared (NVCC picks the compiler; default nvcc). nvcc's default
# architecture plus sm_90, so the same binary runs on sim and on an H100.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build.sh OUTDIR}
mkdir -p "$out"
NVCC=${NVCC:-nvcc}
"$NVCC" -cudart shared -O2 -gencode arch=compute_52,code=compute_52 -gencode arch=compute_90,code=sm_90 \
	-o "$out/soak" "$here/soak.cu"
cp "$here"/guest-*.sh "$here"/guest-attack.py "$out/" 2>/dev/null || true
echo "build.sh: $out/soak ($("$NVCC" --version | tail -1))"
