#!/usr/bin/env bash
# build.sh OUTDIR [--arch sm_90]: build the NVIDIA-library test programs (programs.txt)
# with the machine's nvcc and its default static CUDA runtime. Headers and libraries
# come from the CUDA toolkit (cuBLAS, cuFFT, cuRAND, cuSOLVER, cuSPARSE) and, for
# cuDNN and NCCL, from the nvidia-* Python wheels (PyTorch's), found by NVIDIA_WHEELS
# or python3. Each binary gets an RPATH to those directories, so running it needs
# only libcuda.so.1 on the library path (the real driver's or vgpu's). Programs whose
# headers are missing are skipped with a line saying so. OUTDIR/programs.txt lists
# what was built, for scripts/cuda-tests/run.sh OUTDIR. CUDA_LIBS_ONLY="NAME ..." builds
# only those programs.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build.sh OUTDIR [--arch sm_XX]}
arch=sm_90
[[ ${2:-} == --arch ]] && arch=${3:?}
mkdir -p "$out"
cuda=${CUDA_HOME:-/usr/local/cuda}
wheels=${NVIDIA_WHEELS:-$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]) + "/nvidia")' 2>/dev/null)}
inc=(-I"$cuda/include") libs=(-L"$cuda/lib64") rpath="$cuda/lib64"
for w in cudnn nccl cu13; do
	[[ -d $wheels/$w/include ]] && inc+=(-I"$wheels/$w/include")
	[[ -d $wheels/$w/lib ]] && libs+=(-L"$wheels/$w/lib") && rpath+=":$wheels/$w/lib"
done
: >"$out/programs.txt"
built=0 skipped=0
while read -r name src flags; do
	[[ -z $name || $name == \#* ]] && continue
	[[ -n ${CUDA_LIBS_ONLY:-} && " $CUDA_LIBS_ONLY " != *" $name "* ]] && continue
	if nvcc -O2 -arch "$arch" "${inc[@]}" -o "$out/$name" "$here/$src" "${libs[@]}" $flags \
		-Xlinker -rpath="$rpath" 2>"$out/$name.build.log"; then
		echo "$name" >>"$out/programs.txt"
		built=$((built + 1))
	else
		echo "skip $name: build failed ($(grep -m1 -E 'error|fatal' "$out/$name.build.log"))"
		skipped=$((skipped + 1))
	fi
done <"$here/programs.txt"
echo "cuda-libs: built $built, skipped $skipped into $out ($(nvcc --version | tail -1))"
