#!/usr/bin/env bash
# gpu-guest.sh CARRY - on the GPU machine: the CUDA test programs (nvcc there)
# inside the TCG test guest with the vGPU attached, served by
# `vgpu serve --device cuda` on the H100. CARRY holds vgpu, lib/ (guest
# libraries), image/ (test guest with vgpu.ko), qemu-bundle.tar.xz.
set -uo pipefail
carry=$(realpath "${1:-.gpu}")
out=${OUT:-/tmp/vgpu-out}
logs=/tmp/vgpu-logs
mkdir -p "$out" "$logs"
export PATH=/usr/local/cuda/bin:$PATH
repo=$PWD
ct=$repo/build/ct
scripts/cuda-tests/build.sh "$ct" --arch sm_90 >"$logs/build.log" 2>&1 || { echo "cuda-tests build failed"; tail -30 "$logs/build.log"; }
tail -1 "$logs/build.log"
sock=/tmp/vgpu-vu.sock
"$carry/vgpu" serve --device cuda --vhost-user-socket "$sock" --log-level info >"$logs/serve-vm.log" 2>&1 &
srv=$!
for i in $(seq 50); do [[ -S $sock ]] && break; sleep 0.1; done
echo "== guest (TCG), vgpu on the H100"
"$carry/vgpu" vm run --image "$carry/image" --bundle "$carry/qemu-bundle.tar.xz" --vgpu "$sock" --mem 4G --cpus 4 --timings --timeout 540s \
	-- "$repo/scripts/cuda-tests/run.sh" "$ct/sm_90" --lib "$carry/lib" --out /tmp/guest.csv 2>&1 | tee "$logs/guest-run.log" | grep -v '^\s*$' | tail -30
kill $srv; wait $srv 2>/dev/null
tar czf "$out/logs.tgz" -C /tmp vgpu-logs
