#!/usr/bin/env bash
# gpu-lazy-libraries.sh CARRY - lazy library loading (cuLibraryLoadData) on a GPU machine, in
# one command (about 3 minutes), natively and on vgpu in host mode (vgpu serve --device cuda):
#   - guest-lib/tests/library_test.c (kernels built here by nvcc for sm_90, and for sm_86
#     only: no code for the GPU) with CUDA_MODULE_LOADING=LAZY and EAGER, on NVIDIA's
#     libcuda.so.1 (the reference: what the test expects is what the driver does) and on
#     vgpu's;
#   - PyTorch's start-up and first steps (scripts/gpu-torch/torch_min.py --extra) on vgpu
#     with LAZY and EAGER, VGPU_STATS=1: cuLibraryLoadData calls, MODULE_LOAD round trips
#     and bytes (eager loading sends every image torch registers; lazy only those used),
#     and natively for the time.
# On vgpu only vgpu's libcuda.so.1 and libnvidia-ml.so.1 are on the library path (no
# LD_PRELOAD, no file replaced). CARRY: scripts/gpu-carry.sh's folder (vgpu binary, lib/).
# LAZY_DEVICE=sim makes a dry run on a machine without a GPU (native rows then fail).
# Output in $OUT (8 files): lazy-summary.txt (printed last), library-{native,vgpu}-{lazy,eager}.txt,
# torch-{LAZY,EAGER,native}.txt (program output, then vgpu's statistics).
set -uo pipefail
carry=$(realpath "${1:-.gpu}")
out=${OUT:-/tmp/vgpu-out}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
repo=$PWD
b=$repo/build/gpu-lazy
rm -rf "$b" && mkdir -p "$b"
drv=$b/drvlib # vgpu's driver libraries and nothing else
mkdir -p "$drv" && cp -a "$carry"/lib/libcuda.so* "$carry"/lib/libnvidia-ml.so* "$drv/" || exit 1
py=/opt/torch/.venv/bin/python3
[[ -x $py ]] || py=python3
sock=/tmp/vgpu-lazy.sock
summary=$out/lazy-summary.txt
: >"$summary"
dev=${LAZY_DEVICE:-cuda}
noexec=() # sim runs no kernels: library_test then compares no results on vgpu
[[ $dev == sim ]] && noexec=(--no-exec)
step() { echo "== $(date -u +%H:%M:%S) $*"; }
# verdict FILE RC: the test's own lines, condensed
verdict() { echo "exit $2 $(grep -c '^ok ' "$1") ok; $(grep -E '^ *FAIL|note:' "$1" | tr '\n' ' ')"; }

step "build library_test: nvcc $(nvcc --version | tail -1 | awk '{print $NF}')"
t=guest-lib/tests
nvcc -fatbin -arch sm_90 -o "$b/k.fatbin" $t/library_kernels.cu &&
	nvcc -fatbin -gencode arch=compute_86,code=sm_86 -o "$b/k86.fatbin" $t/library_kernels.cu &&
	cc -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -DKERNELS_FATBIN="\"$b/k.fatbin\"" \
		-DSM86_FATBIN="\"$b/k86.fatbin\"" -o "$b/library_test" $t/library_test.c -L"$drv" -l:libcuda.so.1 -ldl -lpthread ||
	echo "  build failed"

# library MODE WHERE LIBDIR: library_test with CUDA_MODULE_LOADING=MODE on LIBDIR's libcuda.so.1
# ("" = the machine's driver)
library() {
	local mode=$1 where=$2 lib=$3 f=$out/library-$2-${1,,}.txt rc x=()
	[[ $where == vgpu ]] && x=("${noexec[@]}")
	env ${lib:+LD_LIBRARY_PATH=$lib} CUDA_MODULE_LOADING="$mode" VGPU_STATS=1 VGPU_LOG_FILE="$b/library-$where-$mode.stats" \
		timeout -k 5 60 "$b/library_test" "${x[@]}" "$b/k.fatbin" >"$f" 2>&1
	rc=$?
	[[ -f $b/library-$where-$mode.stats ]] && cat "$b/library-$where-$mode.stats" >>"$f"
	echo "$where library_test ($mode): $(verdict "$f" $rc)" | tee -a "$summary"
}

# torch MODE: torch_min.py --extra on vgpu with CUDA_MODULE_LOADING=MODE, and its statistics
torch() {
	local mode=$1 f=$out/torch-$1.txt rc
	env LD_LIBRARY_PATH="$drv" CUDA_MODULE_LOADING="$mode" VGPU_STATS=1 VGPU_LOG=info VGPU_LOG_FILE="$b/torch-$mode.log" \
		timeout -k 5 240 "$py" scripts/gpu-torch/torch_min.py --extra >"$f" 2>&1
	rc=$?
	cat "$b/torch-$mode.log" >>"$f" 2>/dev/null
	{
		echo "== torch on vgpu, CUDA_MODULE_LOADING=$mode (exit $rc): $(grep -E '^(PASS|FAIL) torch_min' "$f" | tail -1)"
		echo "  steps passed: $(grep -c '^PASS ' "$f"); first failure: $(grep -m1 '^FAIL ' "$f")"
		echo "  cuLibraryLoadData calls: $(awk '$1 == "cuLibraryLoadData" {print $2}' "$f" | head -1)"
		echo "  MODULE_LOAD: $(awk '$1 == "MODULE_LOAD" {print $3 " round trips, " $4 " bytes out, " $6 " ms"}' "$f" | head -1)"
		echo "  all round trips: $(awk '$1 == "total" && NF == 5 {print $2 " round trips, " $3 " bytes out, " $5 " ms"}' "$f" | head -1)"
	} | tee -a "$summary"
}

step "natively (the machine's driver)"
library LAZY native ""
library EAGER native ""
t0=$SECONDS
timeout -k 5 240 "$py" scripts/gpu-torch/torch_min.py --extra >"$out/torch-native.txt" 2>&1
echo "== torch native (exit $?, $((SECONDS - t0)) s): $(grep -E '^(PASS|FAIL) torch_min' "$out/torch-native.txt" | tail -1)" |
	tee -a "$summary"

step "vgpu host mode: vgpu serve --device $dev --unix $sock"
rm -f "$sock"
"$carry/vgpu" serve --device "$dev" --unix "$sock" --log-level info >"$b/serve.log" 2>&1 &
srv=$!
for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.1; done
[[ -S $sock ]] || echo "  no socket: see $b/serve.log" | tee -a "$summary"
export VGPU_TRANSPORT=unix:$sock
library LAZY vgpu "$drv"
library EAGER vgpu "$drv"
torch LAZY
torch EAGER
kill "$srv" 2>/dev/null
wait "$srv" 2>/dev/null
{
	echo "serve.log errors: $(grep -ciE 'error|panic' "$b/serve.log")"
	echo "(library_test: the native rows are the reference; vgpu must pass what the driver passes)"
} | tee -a "$summary"
