#!/usr/bin/env bash
# gpu-hostmode.sh CARRY - on the GPU machine: build the CUDA test programs with
# the machine's nvcc, run them natively, then against vgpu's libraries in host
# mode (VGPU_TRANSPORT=unix:...) with `vgpu serve --device cuda`. Also runs the
# backend's GPU tests if CARRY has them. Logs and a table go under $OUT.
set -uo pipefail
carry=${1:-.gpu}
out=${OUT:-/tmp/vgpu-out}
mkdir -p "$out" /tmp/vgpu-logs
export PATH=/usr/local/cuda/bin:$PATH
ct=/tmp/ct
scripts/cuda-tests/build.sh "$ct" --arch sm_90 >/tmp/vgpu-logs/build.log 2>&1 || { echo "build failed"; tail -30 /tmp/vgpu-logs/build.log; }
tail -3 /tmp/vgpu-logs/build.log
for t in "$carry"/*-gpu.test; do
	[[ -x $t ]] || continue
	echo "== $(basename "$t")"
	timeout 300 "$t" -test.v -test.count=1 >"/tmp/vgpu-logs/$(basename "$t").log" 2>&1
	echo "rc=$? $(grep -cE '^--- PASS' "/tmp/vgpu-logs/$(basename "$t").log") passed, $(grep -cE '^--- FAIL' "/tmp/vgpu-logs/$(basename "$t").log") failed"
	grep -E '^--- FAIL|panic' "/tmp/vgpu-logs/$(basename "$t").log" | head -20
done
echo "== native (sm_90)"
scripts/cuda-tests/run.sh "$ct/sm_90" --out "$out/native.csv" --logs /tmp/vgpu-logs/native | tail -25
"$carry/vgpu" serve --device cuda --unix /tmp/vgpu.sock --log-level debug >/tmp/vgpu-logs/serve.log 2>&1 &
srv=$!
for i in $(seq 50); do [[ -S /tmp/vgpu.sock ]] && break; sleep 0.1; done
echo "== vgpu host mode (sm_90)"
VGPU_TRANSPORT=unix:/tmp/vgpu.sock scripts/cuda-tests/run.sh "$ct/sm_90" --lib "$carry/lib" --out "$out/hostmode.csv" --logs /tmp/vgpu-logs/hostmode | tail -25
echo "== vgpu host mode (default arch)"
VGPU_TRANSPORT=unix:/tmp/vgpu.sock scripts/cuda-tests/run.sh "$ct" --lib "$carry/lib" --logs /tmp/vgpu-logs/hostmode-default | tail -22
kill $srv; wait $srv 2>/dev/null
tar czf "$out/logs.tgz" -C /tmp vgpu-logs
