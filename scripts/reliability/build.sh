#!/usr/bin/env bash
# build.sh OUTDIR - build the reliability programs with nvcc -cudart shared
# (NVIDIA's runtime, shared: vgpu's libcuda.so.1 beneath it)
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
# NVIDIA's libcudart comes from the compiler's toolkit: Debian's is on the
# system path; a toolkit in its own folder (/usr/local/cuda) is named by
# RUNPATH, which LD_LIBRARY_PATH (vgpu's driver libraries) still precedes.
tk=$(cd "$(dirname "$(command -v "$NVCC")")/.." && pwd)/lib64
rp=()
[[ -e $tk/libcudart.so ]] && rp=(-Xlinker "-rpath=$tk")
"$NVCC" -cudart shared -O2 "${arch[@]}" "${rp[@]}" -o "$out/soak" "$here/soak.cu"
"$NVCC" -cudart shared -O2 "${arch[@]}" "${rp[@]}" -I "$here/../cuda-tests" -o "$out/sticky_error" "$here/../cuda-tests/sticky_error.cu"
"$NVCC" -cudart shared -O2 "${arch[@]}" "${rp[@]}" -o "$out/isolation" "$here/isolation.cu"
cp "$here"/guest-faults.sh "$here"/guest-attack.py "$out/"
echo "build.sh: $out/soak $out/sticky_error $out/isolation ($("$NVCC" --version | tail -1))"
