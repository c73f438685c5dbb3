#!/usr/bin/env bash
# gpu-nvidia-stack.sh CARRY [host|guest|all] - NVIDIA's own stack on vgpu, on a GPU
# machine, natively and through vgpu's libcuda.so.1 with nothing else replaced:
#   - the NVIDIA-library programs (scripts/cuda-libs: cuBLAS/cuBLASLt GEMM, cuFFT,
#     cuRAND, cuSOLVER, cuSPARSE, cuDNN convolution, single-GPU NCCL), built by the
#     machine's nvcc with its default static runtime;
#   - the CUDA test programs (scripts/cuda-tests) built with NVIDIA's runtime static
#     (nvcc's default) and shared (libcudart.so.13 from the toolkit);
#   - PyTorch (scripts/gpu-torch/torch_check.py: device queries, elementwise, matmul
#     fp32/bf16, conv, fft, linalg, sparse, a small model trained with its losses
#     compared to native, CuPy and Triton kernels), its wheel's own libcudart by RPATH.
# "host": natively, then host mode (vgpu serve --device cuda --unix); "guest": the
# same inside the TCG test guest (torch with --quick: fewer steps, no CuPy/Triton);
# "all": both (over 10 minutes: run the two as separate commands on the device tool).
# STACK_PARTS (default "libs ct torch") picks the suites: e.g. STACK_PARTS=torch
# runs only PyTorch (no build), natively with "host", or in the guest with "guest".
# Only libcuda.so.1 and libnvidia-ml.so.1 of vgpu are on the library path (no
# LD_PRELOAD, no file of a program or wheel replaced). A table is printed last;
# logs and JSON go under $OUT; on vgpu each program's VGPU_LOG=info log is kept and
# scripts/vgpu-gaps.py lists the unsupported calls and export tables met
# ($OUT/stack-gaps-LABEL.txt).
set -uo pipefail
carry=$(realpath "${1:-.gpu}")
what=${2:-host}
out=${OUT:-/tmp/vgpu-out}
logs=/tmp/vgpu-stack-logs
[[ $what == in-guest ]] && logs=$PWD/build/stack/guest-logs # a folder the host shares with the guest
mkdir -p "$out" "$logs"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
repo=$PWD
b=$repo/build/stack
mkdir -p "$b"
drv=$b/drvlib # vgpu's driver libraries only
rm -rf "$drv" && mkdir -p "$drv" && cp -a "$carry"/lib/libcuda.so* "$carry"/lib/libnvidia-ml.so* "$drv/"
py=/opt/torch/.venv/bin/python3
[[ -x $py ]] || py=python3
summary=$out/stack-summary.txt
parts=" ${STACK_PARTS:-libs ct torch} "
step() { echo "== $(date -u +%H:%M:%S) $*"; }
wait_socket() { for _ in $(seq 100); do [[ -S $1 ]] && return 0; sleep 0.1; done; echo "no socket $1"; }
line() { echo "$*" | tee -a "$summary"; }

build() {
	step "building (nvcc $(nvcc --version | tail -1 | awk '{print $NF}'))"
	scripts/cuda-libs/build.sh "$b/libs" --arch sm_90 >"$logs/build-libs.log" 2>&1; tail -1 "$logs/build-libs.log"
	# the test programs with NVIDIA's runtime: static (default) and shared
	NVCC_CUDART=static scripts/cuda-tests/build.sh "$b/ct-static" --arch sm_90 >"$logs/build-ct-static.log" 2>&1; tail -1 "$logs/build-ct-static.log"
	scripts/cuda-tests/build.sh "$b/ct-shared" --arch sm_90 >"$logs/build-ct-shared.log" 2>&1; tail -1 "$logs/build-ct-shared.log"
}

# run_set LABEL [env...]: the library programs, the test programs (static and
# shared: shared ones find NVIDIA's libcudart.so.13 in the toolkit), torch.
run_set() {
	local label=$1 lib=$2
	local ld=/usr/local/cuda/lib64 vl=() tenv=()
	[[ -n $lib ]] && ld=$lib:$ld
	# on vgpu: its log of each program (VGPU_LOG=info), summarised by vgpu-gaps.py
	if [[ -n $lib ]]; then
		mkdir -p "$logs/$label-vgpu-log" && : >"$logs/$label-vgpu-log/torch.log"
		tenv=(VGPU_LOG=info VGPU_LOG_FILE="$logs/$label-vgpu-log/torch.log")
	fi
	[[ -n $lib ]] && vl=(--vgpu-log "$logs/$label-vgpu-log/libs")
	if [[ $parts == *" libs "* ]]; then
		LD_LIBRARY_PATH=$ld scripts/cuda-tests/run.sh "$b/libs" --timeout 120 --logs "$logs/$label-libs" --out "$logs/$label-libs.csv" "${vl[@]}" >"$logs/$label-libs.txt" 2>&1
		line "$label cuda-libs: $(tail -1 "$logs/$label-libs.txt")"
	fi
	for v in static shared; do
		[[ $parts == *" ct "* ]] || continue
		[[ -n $lib ]] && vl=(--vgpu-log "$logs/$label-vgpu-log/ct-$v")
		LD_LIBRARY_PATH=$ld scripts/cuda-tests/run.sh "$b/ct-$v/sm_90" --logs "$logs/$label-ct-$v" "${vl[@]}" >"$logs/$label-ct-$v.txt" 2>&1
		line "$label cuda-tests ($v NVIDIA runtime): $(tail -1 "$logs/$label-ct-$v.txt")"
	done
	local q=()
	[[ $label == guest* ]] && q=(--quick)
	if [[ $parts == *" torch "* ]]; then
		env LD_LIBRARY_PATH="${lib:-}" VGPU_STATS=1 "${tenv[@]}" timeout 420 "$py" scripts/gpu-torch/torch_check.py --out "$out/torch-$label.json" "${q[@]}" >"$logs/torch-$label.log" 2>&1
		line "$label torch: $(grep -E '^(PASS|FAIL) torch_check' "$logs/torch-$label.log" || tail -2 "$logs/torch-$label.log")"
	fi
	if [[ -n $lib ]]; then
		python3 scripts/vgpu-gaps.py libs="$logs/$label-vgpu-log/libs" ct-static="$logs/$label-vgpu-log/ct-static" \
			ct-shared="$logs/$label-vgpu-log/ct-shared" torch="$logs/$label-vgpu-log/torch.log" >"$out/stack-gaps-$label.txt" 2>&1
		line "$label gaps (\$OUT/stack-gaps-$label.txt): $(grep -E '^(unsupported calls|cuGetProcAddress requests|export-table slots)' "$out/stack-gaps-$label.txt" | sed 's/ (.*)//; s/ that resolved nothing//' | paste -sd ';' -)"
	fi
}

host() {
	step "native"
	run_set native ""
	step "host mode: vgpu serve --device cuda --unix"
	"$carry/vgpu" serve --device cuda --unix /tmp/vgpu-stack.sock --log-level info >"$logs/serve-host.log" 2>&1 &
	local srv=$!
	wait_socket /tmp/vgpu-stack.sock
	VGPU_TRANSPORT=unix:/tmp/vgpu-stack.sock run_set hostmode "$drv"
	kill $srv; wait $srv 2>/dev/null
	[[ -f $out/torch-hostmode.json ]] && "$py" scripts/gpu-torch/compare.py "$out/torch-native.json" "$out/torch-hostmode.json" hostmode 2>&1 | tee -a "$summary"
}

guest() {
	step "guest (TCG)"
	"$carry/vgpu" serve --device cuda --vhost-user-socket /tmp/vgpu-stack-vu.sock --log-level info >"$logs/serve-guest.log" 2>&1 &
	local srv=$!
	wait_socket /tmp/vgpu-stack-vu.sock
	"$carry/vgpu" vm run --image "$carry/image" --bundle "$carry/qemu-bundle.tar.xz" --vgpu /tmp/vgpu-stack-vu.sock \
		--share "$out" --share "$b" --mem 8G --cpus 4 --timeout 560s \
		-- /bin/bash -c "cd $repo && STACK_PARTS='${STACK_PARTS:-libs ct torch}' OUT=$out bash scripts/gpu-nvidia-stack.sh $carry in-guest" >"$logs/guest.txt" 2>&1
	line "guest exit status: $?"
	kill $srv; wait $srv 2>/dev/null
	[[ -f $out/torch-native.json && -f $out/torch-guest.json ]] && "$py" scripts/gpu-torch/compare.py "$out/torch-native.json" "$out/torch-guest.json" guest 2>&1 | tee -a "$summary"
}

case $what in
host) [[ $parts == *" libs "* || $parts == *" ct "* ]] && build; host ;;
guest) [[ -d $b/libs || ($parts != *" libs "* && $parts != *" ct "*) ]] || build; guest ;;
all) build; host; guest ;;
in-guest) run_set guest "$drv" ;; # inside the guest: /dev/vgpu is the transport
*) echo "usage: $0 CARRY [host|guest|all]" >&2; exit 2 ;;
esac
if [[ $what != in-guest ]]; then
	[[ -d $b/guest-logs ]] && cp -a "$b/guest-logs" "$logs/"
	tar czf "$out/stack-logs.tgz" -C "$logs" . 2>/dev/null # $OUT: summary, torch JSONs, this
fi
echo "---- summary"
cat "$summary"
