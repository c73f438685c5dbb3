#!/usr/bin/env bash
# gpu-tablespy.sh [CARRY] - what the machine's real CUDA driver does in its private export
# tables (issue 16), on a GPU machine, in about 3 minutes: scripts/probe/tablespy's
# libcuda.so.1 first on the library path, in front of the real driver (TABLESPY_REAL, default
# the libcuda.so.1 `ldconfig -p` names), logging every table asked and the first 20 calls of
# every slot with arguments, return value and the 32 bytes behind pointer arguments. Natively:
#   torch-fp32, torch-bf16   PyTorch (the machine's): an fp32 and a bf16 matmul, each its own
#                            process (bf16 goes through cuBLASLt; it segfaults on vgpu today)
#   cublas_gemm, cusolver, cufft
#                            scripts/cuda-libs' programs built by the machine's nvcc (13, sm_90)
# With CARRY (scripts/gpu-carry.sh's folder), also torch-bf16, cublas_gemm and cusolver through
# the spy in front of vgpu's libcuda.so.1 in host mode (vgpu serve --device cuda): what vgpu's
# tables answer there; the spy logs a fatal signal with the table slots in flight.
# TABLESPY_DEVICE=sim makes that part a dry run on a machine without a GPU.
# Output in $OUT (4 files): tablespy-summary.txt (scripts/probe/tablespy/summarize.py over every
# log: per UUID the answer, the callers, each slot called with examples), tablespy-run.txt
# (what ran and how it ended), tablespy-logs.tgz (every spy log, program output, build logs).
set -uo pipefail
carry=${1:+$(realpath "$1")}
out=${OUT:-/tmp/vgpu-out}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
repo=$PWD
b=$repo/build/gpu-tablespy
logs=$b/logs
rm -rf "$b" && mkdir -p "$logs"
run=$out/tablespy-run.txt
: >"$run"
say() { echo "$*" | tee -a "$run"; }
py=/opt/torch/.venv/bin/python3
[[ -x $py ]] || py=python3

say "== $(date -u +%H:%M:%S) build the spy; nvcc $(nvcc --version 2>/dev/null | tail -1 | awk '{print $NF}') builds cublas_gemm cusolver cufft (sm_90)"
spy=$b/spy
make -C scripts/probe/tablespy BUILD="$spy" >"$logs/build-spy.log" 2>&1 || { say "spy build failed:"; tail -20 "$logs/build-spy.log" | tee -a "$run"; exit 1; }
for p in cublas_gemm cusolver cufft; do
	CUDA_LIBS_ONLY=$p scripts/cuda-libs/build.sh "$b/libs-$p" --arch sm_90 >"$logs/build-$p.log" 2>&1 &
done
real=${TABLESPY_REAL:-$(ldconfig -p 2>/dev/null | awk '$1 == "libcuda.so.1" && /x86-64/ {print $NF; exit}')}
if [[ -z $real ]]; then
	for c in /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/local/nvidia/lib64/libcuda.so.1 /usr/lib64/libcuda.so.1; do
		[[ -e $c ]] && real=$c && break
	done
fi
[[ -n $real ]] || { say "no real libcuda.so.1 found: set TABLESPY_REAL"; exit 1; }
say "real driver: $real -> $(readlink -f "$real")"
wait
for p in cublas_gemm cusolver cufft; do say "  build $p: $(tail -1 "$logs/build-$p.log")"; done

# spyrun LABEL LIMIT [ENV=V...] -- CMD...: run CMD with the spy in front of the real driver
labels=()
spyrun() {
	local label=$1 limit=$2
	shift 2
	local envs=()
	while [[ $1 != -- ]]; do envs+=("$1"); shift; done
	shift
	labels+=("$label=$logs/$label.spy.log")
	env TABLESPY_REAL="$real" TABLESPY_LOG="$logs/$label.spy.log" LD_LIBRARY_PATH="$spy${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
		"${envs[@]}" timeout -k 5 "$limit" "$@" >"$logs/$label.out" 2>&1
	local rc=$?
	say "  $label: exit $rc ($( ((rc == 124 || rc == 137)) && echo 'TIMEOUT; ')$(grep -v '^\s*$' "$logs/$label.out" | tail -1 | cut -c1-100)); $(grep -c ' table ' "$logs/$label.spy.log" 2>/dev/null || echo 0) table requests, $(grep -c ' call ' "$logs/$label.spy.log" 2>/dev/null || echo 0) calls logged"
}

torch_prog() { # DTYPE: one matmul, checked against the CPU
	cat <<EOF
import torch
print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), flush=True)
dt = torch.$1
a = torch.randn(256, 256, device="cuda", dtype=dt)
b = torch.randn(256, 256, device="cuda", dtype=dt)
c = (a @ b).float().cpu()
ref = a.float().cpu() @ b.float().cpu()
err = (c - ref).abs().max().item()
print("PASS matmul $1, max error %.3g" % err if err < 1 else "FAIL matmul $1, max error %.3g" % err, flush=True)
EOF
}

say "== $(date -u +%H:%M:%S) natively, through the spy"
spyrun torch-fp32 90 -- "$py" -c "$(torch_prog float32)"
spyrun torch-bf16 90 -- "$py" -c "$(torch_prog bfloat16)"
for p in cublas_gemm cusolver cufft; do
	if [[ -x $b/libs-$p/$p ]]; then spyrun "$p" 40 -- "$b/libs-$p/$p"; else say "  $p: not built (see build-$p.log)"; fi
done

if [[ -n $carry ]]; then
	say "== $(date -u +%H:%M:%S) vgpu host mode (vgpu serve --device cuda), through the spy in front of vgpu's libcuda.so.1"
	sock=/tmp/vgpu-tablespy.sock
	rm -f "$sock"
	"$carry/vgpu" serve --device "${TABLESPY_DEVICE:-cuda}" --unix "$sock" --log-level info >"$logs/serve.log" 2>&1 &
	srv=$!
	for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.1; done
	real_native=$real
	real=$carry/lib/libcuda.so.1
	spyrun vgpu-torch-bf16 90 VGPU_TRANSPORT=unix:"$sock" VGPU_LOG=info VGPU_LOG_FILE="$logs/vgpu-torch-bf16.vgpu.log" \
		-- "$py" -c "$(torch_prog bfloat16)"
	for p in cublas_gemm cusolver; do
		[[ -x $b/libs-$p/$p ]] && spyrun "vgpu-$p" 40 VGPU_TRANSPORT=unix:"$sock" VGPU_LOG=info \
			VGPU_LOG_FILE="$logs/vgpu-$p.vgpu.log" -- "$b/libs-$p/$p"
	done
	real=$real_native
	kill "$srv" 2>/dev/null
	wait "$srv" 2>/dev/null
fi

say "== $(date -u +%H:%M:%S) summary: $out/tablespy-summary.txt"
python3 scripts/probe/tablespy/summarize.py "${labels[@]}" >"$out/tablespy-summary.txt" 2>&1
grep -E '^[0-9a-f]{32} |^    slot |^== |signal' "$out/tablespy-summary.txt" | cut -c1-160 | head -60 | tee -a "$run"
tar -C "$b" -czf "$out/tablespy-logs.tgz" logs
say "logs: $out/tablespy-logs.tgz ($(du -h "$out/tablespy-logs.tgz" | cut -f1))"
