#!/usr/bin/env bash
# build.sh OUTDIR - build the reliability programs with nvcc -cudart shared
# (NVCC picks the compiler; default nvcc): OUTDIR/soak (PTX for the oldest
# architecture the compiler supports plus sm_90 code, so the binary runs on
# sim and on an H100), OUTDIR/sticky_error (scripts/cuda-tests) and
# OUTDIR/isolation (faults and device printf of one process), and
# copies the guest scripts next to them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build.sh OUTDIR}
mkdir -p "$out"
NVCC=${NVCC:-nvcc}
major=$("$NVCC" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
ptx=52
((major >= 13)) && ptx=75 # CUDA 13 dropped Maxwell..Volta
arch=(-gencode "arch=compute_$ptx,code=compute_$ptx" -gencode arch=compute_90,code=sm_90)
"$NVCC" -cudart shared -O2 "${arch[@]}" -o "$out/soak" "$here/soak.cu"
"$NVCC" -cudart shared -O2 "${arch[@]}" -I "$here/../cuda-tests" -o "$out/sticky_error" "$here/../cuda-tests/sticky_error.cu"
"$NVCC" -cudart shared -O2 "${arch[@]}" -o "$out/isolation" "$here/isolation.cu"
cp "$here"/guest-faults.sh "$here"/guest-attack.py "$out/"
echo "build.sh: $out/soak $out/sticky_error $out/isolation ($("$NVCC" --version | tail -1))"
