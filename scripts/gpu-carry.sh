#!/usr/bin/env bash
# gpu-carry.sh [DIR] - gather what the GPU-machine scripts need into DIR
# (default .gpu, ignored by git): the vgpu binary, the guest libraries, the
# test guest with vgpu.ko, the QEMU bundle, and the backend's GPU test
# binaries (go test -c -tags gpu). Run `make` first.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.gpu}
rm -rf "$dir"
mkdir -p "$dir/lib"
cp -a guest-lib/build/lib*.so* "$dir/lib/"
cp bin/vgpu "$dir/"
img=$(bin/vgpu vm image --module guest-driver/vgpu.ko | sed -n 1p)
cp -a "$img" "$dir/image"
bundle=build/qemu-bundle.tar.xz
[[ -f $bundle ]] || scripts/qemu-bundle.sh build >/dev/null
cp "$bundle" "$dir/"
for p in backend/device/cuda backend/session backend/engine; do
	[[ -d $p ]] || continue
	CGO_ENABLED=0 go test -c -tags gpu -o "$dir/$(basename "$p")-gpu.test" "./$p" 2>/dev/null || true
done
du -sh "$dir"
