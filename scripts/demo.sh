#!/usr/bin/env bash
# demo.sh - the main job (`make demo`): boot the test guest with a vGPU and
# run unmodified CUDA programs and the memcpy benchmark in it.
#
# On a machine with an NVIDIA GPU the guest's CUDA calls run on it. Without
# one, the backend uses its simulated device and says so loudly: memory and
# copies are real, kernels are NOT executed (the programs report which
# checks they skipped).
#
# Environment: NVCC (default nvcc), VGPU_QEMU_BUNDLE (a QEMU bundle from
# scripts/qemu-bundle.sh, for machines without qemu-system-x86_64),
# VGPU_TESTGUEST_IMAGE (a prebuilt test guest), DEMO_MEM (guest RAM, 4G).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
ct=$root/build/ct-demo
mkdir -p build

if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
	device=cuda
	echo "demo: GPU found: $(nvidia-smi -L | head -1)"
else
	device=sim
	cat <<'BANNER'
==============================================================================
 demo: no NVIDIA GPU here. The vGPU is served by the SIMULATED device:
 guest memory, copies, modules, streams and events are real; KERNELS ARE NOT
 EXECUTED. Kernel-result checks are reported as skipped. Run `make demo` on a
 machine with an NVIDIA GPU to see kernels run in the guest.
==============================================================================
BANNER
fi

echo "demo: building the CUDA test programs with $(${NVCC:-nvcc} --version | tail -1)"
scripts/cuda-tests/build.sh "$ct" --arch none >build/demo-build.log 2>&1 || { tail -30 build/demo-build.log; exit 1; }

bundle=()
[[ -n ${VGPU_QEMU_BUNDLE:-} ]] && bundle=(--bundle "$VGPU_QEMU_BUNDLE")
echo "demo: booting the test guest (TCG) with a vGPU on the $device device"
VGPU_DEVICE=$device "$root/bin/vgpu" vm run --module "$root/guest-driver/vgpu.ko" "${bundle[@]}" \
	--mem "${DEMO_MEM:-4G}" --cpus 2 --timings --timeout 15m \
	-- "$root/scripts/demo-guest.sh" "$ct" "$root/guest-lib/build" "$root/bin/vgpu"
