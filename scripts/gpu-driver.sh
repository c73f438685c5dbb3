#!/usr/bin/env bash
# gpu-driver.sh CARRY [--no-libs] - NVIDIA's CUDA 13 runtime on vgpu's libcuda.so.1, on a GPU
# machine, natively and in host mode (vgpu serve --device cuda --unix), in one command
# (at most about 8 minutes: each suite has a limit, all within DRIVER_BUDGET, default 450 s):
#   - scripts/cuda-tests built by the machine's nvcc (13) for sm_90, with NVIDIA's runtime
#     linked in (-cudart static, nvcc's default) and shared (the toolkit's libcudart.so.13);
#   - scripts/cuda-libs (cuBLAS/cuBLASLt, cuFFT, cuRAND, cuSOLVER, cuSPARSE, cuDNN, NCCL, each
#     with its own static runtime), unless --no-libs;
#   - PyTorch (scripts/gpu-torch/torch_min.py --extra): is_available, a tensor to the GPU, an
#     add, matmuls, a reduction, a convolution; torch's libcudart.so.13 comes by its RPATH.
# On vgpu only vgpu's libcuda.so.1 and libnvidia-ml.so.1 are on the library path (a folder
# holding nothing else; no LD_PRELOAD, no file replaced), with VGPU_LOG=info written per
# program (run.sh --vgpu-log), and scripts/vgpu-gaps.py lists every unsupported driver call,
# every cuGetProcAddress miss and every export-table UUID asked, with the programs that met it.
# CARRY: scripts/gpu-carry.sh's folder (vgpu binary, lib/). DRIVER_DEVICE=sim makes a dry run
# of the script on a machine without a GPU (native rows then fail). Output in $OUT:
#   driver-summary.txt (the table printed last), driver-gaps.txt (the gap list),
#   driver-logs/ (build logs; each program's output, native-*/ and vgpu-*/; vgpu's own log of
#   each program, vgpu-log/).
set -uo pipefail
carry=$(realpath "${1:-.gpu}")
libs=1
[[ ${2:-} == --no-libs ]] && libs=0
out=${OUT:-/tmp/vgpu-out}
logs=$out/driver-logs
mkdir -p "$logs"
export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
repo=$PWD
b=$repo/build/gpu-driver
mkdir -p "$b"
drv=$b/drvlib # vgpu's driver libraries and nothing else
rm -rf "$drv" && mkdir -p "$drv" && cp -a "$carry"/lib/libcuda.so* "$carry"/lib/libnvidia-ml.so* "$drv/" || exit 1
cudalib=/usr/local/cuda/lib64 # libcudart.so.13 and cuBLAS for the shared builds
py=/opt/torch/.venv/bin/python3
[[ -x $py ]] || py=python3
sock=/tmp/vgpu-driver.sock
summary=$out/driver-summary.txt
: >"$summary"
declare -A res
step() { echo "== $(date -u +%H:%M:%S) $*"; }
# cap N: a suite's time limit, N seconds at most and never past the whole run's budget
# (DRIVER_BUDGET, default 450 s, so the run stays under 8 minutes with the build)
budget=${DRIVER_BUDGET:-450}
cap() { local left=$((budget - SECONDS - 10)); ((left < $1)) && echo $((left > 5 ? left : 5)) || echo "$1"; }
# verdict RC LOG: the log's last line, or why it stopped early
verdict() {
	if (($1 == 124 || $1 == 137)); then echo "TIMEOUT (suite limit; see the log): $(last "$2")"; else last "$2"; fi
}
# last LOG: the last line of a log (run.sh's "N passed, ..." or torch_min's verdict)
last() { grep -v '^[[:space:]]*$' "$1" 2>/dev/null | tail -1 | cut -c1-110; }
# failed CSV: the programs of a run.sh CSV that neither passed nor were skipped
failed() {
	[[ -f $1 ]] && awk -F, 'NR > 1 && $2 !~ /^"(PASS|SKIP|XFAIL)/ {n++; if (n <= 5) s = s " " $1}
		END {if (n) printf "[failed:%s%s]", s, (n > 5 ? " +" (n - 5) " more" : "")}' "$1"
}

step "build: nvcc $(nvcc --version | tail -1 | awk '{print $NF}'), sm_90, -cudart static and shared"
export NVCC_FLAGS="-arch sm_90"
NVCC_CUDART=static scripts/cuda-tests/build.sh "$b/ct-static" --arch none -j 8 >"$logs/build-ct-static.log" 2>&1 &
NVCC_CUDART=shared scripts/cuda-tests/build.sh "$b/ct-shared" --arch none -j 8 >"$logs/build-ct-shared.log" 2>&1 &
if ((libs)); then
	(unset NVCC_FLAGS; scripts/cuda-libs/build.sh "$b/libs" --arch sm_90 >"$logs/build-libs.log" 2>&1) &
fi
wait
unset NVCC_FLAGS
for f in build-ct-static build-ct-shared $( ((libs)) && echo build-libs); do echo "  $f: $(last "$logs/$f.log")"; done

# suites MODE LIBDIR: the test programs (static, shared), the library programs and torch in one
# mode: "native" (the machine's driver) or "vgpu" (LIBDIR first on the library path, logging).
suites() {
	local mode=$1 lib=$2 ld vl=() x=()
	ld=$cudalib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	for v in static shared; do
		[[ $mode == vgpu ]] && vl=(--lib "$lib" --vgpu-log "$logs/vgpu-log/ct-$v")
		LD_LIBRARY_PATH=$ld timeout -k 5 "$(cap 120)" scripts/cuda-tests/run.sh "$b/ct-$v" --timeout 20 \
			--logs "$logs/$mode-ct-$v" --out "$logs/$mode-ct-$v.csv" "${vl[@]}" >"$logs/$mode-ct-$v.txt" 2>&1
		res[$mode,ct-$v]="$(verdict $? "$logs/$mode-ct-$v.txt") $(failed "$logs/$mode-ct-$v.csv")"
		echo "  cuda-tests $v: ${res[$mode,ct-$v]}"
	done
	if ((libs)) && [[ -s $b/libs/programs.txt ]]; then
		[[ $mode == vgpu ]] && vl=(--lib "$lib" --vgpu-log "$logs/vgpu-log/libs")
		# (run.sh takes the list of what was built from BINDIR/programs.txt)
		LD_LIBRARY_PATH=$ld timeout -k 5 "$(cap 120)" scripts/cuda-tests/run.sh "$b/libs" --timeout 40 \
			--logs "$logs/$mode-libs" --out "$logs/$mode-libs.csv" "${vl[@]}" >"$logs/$mode-libs.txt" 2>&1
		res[$mode,libs]="$(verdict $? "$logs/$mode-libs.txt") $(failed "$logs/$mode-libs.csv")"
		echo "  cuda-libs: ${res[$mode,libs]}"
	fi
	local tl=${LD_LIBRARY_PATH:-} tenv=()
	if [[ $mode == vgpu ]]; then
		mkdir -p "$logs/vgpu-log" && : >"$logs/vgpu-log/torch_min.log"
		tl=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
		tenv=(VGPU_LOG=${VGPU_LOG:-info} VGPU_LOG_FILE="$logs/vgpu-log/torch_min.log")
	fi
	env LD_LIBRARY_PATH="$tl" "${tenv[@]}" timeout -k 5 "$(cap 150)" "$py" scripts/gpu-torch/torch_min.py --extra \
		>"$logs/$mode-torch.txt" 2>&1
	res[$mode,torch]=$(verdict $? "$logs/$mode-torch.txt")
	echo "  torch: ${res[$mode,torch]} ($(grep -c '^PASS ' "$logs/$mode-torch.txt") steps passed)"
}

step "native (the machine's driver)"
suites native ""

dev=${DRIVER_DEVICE:-cuda}
step "vgpu host mode: vgpu serve --device $dev --unix $sock"
rm -f "$sock"
"$carry/vgpu" serve --device "$dev" --unix "$sock" --log-level info >"$logs/serve.log" 2>&1 &
srv=$!
for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.1; done
[[ -S $sock ]] || echo "  no socket: see $logs/serve.log"
VGPU_TRANSPORT=unix:$sock suites vgpu "$drv"
kill "$srv" 2>/dev/null
wait "$srv" 2>/dev/null

step "gaps: what vgpu's libcuda.so.1 did not serve (VGPU_LOG=info)"
gap_src=(ct-static="$logs/vgpu-log/ct-static" ct-shared="$logs/vgpu-log/ct-shared" torch="$logs/vgpu-log/torch_min.log")
((libs)) && gap_src+=(libs="$logs/vgpu-log/libs")
python3 scripts/vgpu-gaps.py "${gap_src[@]}" >"$out/driver-gaps.txt" 2>&1
cat "$out/driver-gaps.txt"

{
	echo
	echo "---- summary: NVIDIA's runtime natively vs on vgpu's libcuda.so.1 (host mode, --device $dev)"
	echo "(each cell: run.sh's count, then the programs that failed; XFAIL = known gap, listed in the gaps)"
	printf '%-37s | %-50s | %s\n' suite native vgpu
	printf '%-37s-+-%-50s-+-%s\n' "$(printf '%.0s-' {1..37})" "$(printf '%.0s-' {1..50})" "$(printf '%.0s-' {1..50})"
	rows=(ct-static "cuda-tests, nvcc 13 -cudart static" ct-shared "cuda-tests, libcudart.so.13 (shared)")
	((libs)) && rows+=(libs "cuda-libs (each its static runtime)")
	rows+=(torch "PyTorch torch_min.py --extra")
	for ((i = 0; i < ${#rows[@]}; i += 2)); do
		k=${rows[i]}
		printf '%-37s | %-50s | %s\n' "${rows[i + 1]}" "${res[native,$k]:-not run}" "${res[vgpu,$k]:-not run}"
	done
	echo "gaps on vgpu: $(grep -E '^(unsupported calls|cuGetProcAddress requests|export-table slots|other warnings)' "$out/driver-gaps.txt" | sed 's/ (.*)//; s/ that resolved nothing//' | paste -sd ';' -)"
	echo "unknown export tables: $(grep -c 'vgpu does not know\|a tools table' "$out/driver-gaps.txt")"
	echo "full gap list: \$OUT/driver-gaps.txt; program output: \$OUT/driver-logs/{native,vgpu}-*/; vgpu's logs: \$OUT/driver-logs/vgpu-log/"
} | tee "$summary"
