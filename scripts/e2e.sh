#!/usr/bin/env bash
# e2e.sh - the whole guest path without a GPU (CI, `make test-e2e`).
#
# Builds the repository's CUDA test programs with Debian's nvcc 11.8
# (-cudart shared, default arch and sm_90; and -cudart static, nvcc's own
# default), then runs them on the backend's sim device, on NVIDIA's runtime
# (the only one vgpu supports) over vgpu's libcuda.so.1:
#   - NVIDIA's libcudart.so.11.0 (Debian's): the shared builds, both arch
#     variants, with a library directory holding only vgpu's libcuda.so.1
#     and libnvidia-ml.so.1;
#   - NVIDIA's static runtime (the static builds);
# and cublas_sgemm loads NVIDIA's cuBLAS 11 on each. In host mode, NVIDIA's
# libraries themselves (scripts/cuda-libs: cuBLAS/cuBLASLt, cuFFT, cuRAND,
# cuSPARSE 11, each with its static runtime) run on vgpu's
# libcuda.so.1 as well (graph_capture too: graphs built node by node, and
# copies to pinned memory inside graphs). Each stack runs twice:
#   1. host mode: `vgpu serve --device sim --unix` and VGPU_TRANSPORT=unix:...
#   2. inside the TCG test guest: vgpu.ko, /dev/vgpu, virtio-vsock,
#      vhost-user, guest-physical segments -- every byte of every copy goes
#      through guest RAM by GPA.
# The sim device does not execute kernels: the programs check everything but
# kernel arithmetic and say which checks they skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
ct=$root/build/ct-e2e
cts=$root/build/ct-e2e-static
lib=$root/guest-lib/build
drv=$root/build/e2e-drvlib # vgpu's driver libraries only: NVIDIA's runtime above them
ko=$root/guest-driver/vgpu.ko
logs=$root/build/e2e-logs
mkdir -p "$logs"

for need in bin/vgpu "$lib/libcuda.so.1" "$lib/libnvidia-ml.so.1" "$ko"; do
	[[ -e $need ]] || { echo "e2e: $need is missing: run make first" >&2; exit 1; }
done
command -v nvcc >/dev/null || { echo "e2e: no nvcc: run scripts/setup.sh" >&2; exit 1; }

echo "== e2e: building the CUDA test programs with $(nvcc --version | tail -1)"
scripts/cuda-tests/build.sh "$ct" --arch sm_90 >"$logs/build.log" 2>&1 || { tail -40 "$logs/build.log"; exit 1; }
tail -1 "$logs/build.log"
NVCC_CUDART=static scripts/cuda-tests/build.sh "$cts" --arch none >"$logs/build-static.log" 2>&1 || { tail -40 "$logs/build-static.log"; exit 1; }
tail -1 "$logs/build-static.log"
cl=$root/build/cl-e2e
CUDA_HOME=${CUDA_HOME:-/usr} scripts/cuda-libs/build.sh "$cl" --arch sm_90 >"$logs/build-libs.log" 2>&1 || { tail -40 "$logs/build-libs.log"; exit 1; }
tail -1 "$logs/build-libs.log"
rm -rf "$drv" && mkdir -p "$drv" && cp -a "$lib"/libcuda.so.1 "$lib"/libnvidia-ml.so.1 "$drv/"

status=0
echo "== e2e: host mode against the sim device"
# pageable_copies: the large copy of every guest-mode run is the point; here 256 MiB do.
export PAGEABLE_COPIES_MAX_MIB=256
sock=$root/build/e2e-sim.sock
rm -f "$sock"
bin/vgpu serve --device sim --unix "$sock" --log-level warn >"$logs/serve-hostmode.log" 2>&1 &
srv=$!
trap 'kill $srv 2>/dev/null || true' EXIT
for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.1; done
# run_all ARGS...: run.sh's summary line, its whole table when something failed
run_all() {
	local out
	if out=$(VGPU_TRANSPORT=unix:$sock scripts/cuda-tests/run.sh "$@" 2>&1); then echo "$out" | tail -1; else echo "$out"; status=1; fi
}
# Every program, mapped_zero_copy included: host mode shares pinned memory with
# the backend as memfds, so mapped memory has a device address here too.
for variant in "$ct" "$ct/sm_90"; do
	echo "-- NVIDIA's libcudart.so.11.0 (shared) on vgpu's libcuda.so.1: $(basename "$variant")"
	run_all "$variant" --lib "$drv" --logs "$logs/hostmode-nvrt-shared-$(basename "$variant")"
done
echo "-- NVIDIA's static runtime on vgpu's libcuda.so.1"
run_all "$cts" --lib "$drv" --logs "$logs/hostmode-nvrt-static"
echo "-- NVIDIA's libraries (cuBLAS, cuFFT, cuRAND, cuSPARSE, cuSOLVER 11) on vgpu's libcuda.so.1"
run_all "$cl" --lib "$drv" --logs "$logs/hostmode-nvidia-libs" cublas_gemm cufft curand cusparse cusolver
kill $srv; wait $srv 2>/dev/null || true
trap - EXIT

echo "== e2e: inside the TCG guest (vgpu.ko, virtio-vsock, vhost-user, sim device)"
unset PAGEABLE_COPIES_MAX_MIB
VGPU_DEVICE=sim bin/vgpu vm run --module "$ko" --mem 2G --cpus 2 --timings --timeout 900s \
	-- "$root/scripts/e2e-guest.sh" "$ct" "$drv" "$cts" 2>&1 | grep -v '^!!' | tee "$logs/guest.log" | tail -40
[[ ${PIPESTATUS[0]} == 0 ]] || status=1

if ((status)); then echo "e2e: FAILED (logs in $logs)"; else echo "e2e: all passed"; fi
exit $status
