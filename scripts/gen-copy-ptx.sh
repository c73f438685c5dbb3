#!/usr/bin/env bash
# gen-copy-ptx.sh [OUT] - regenerate backend/engine/copy.ptx (or write OUT,
# an absolute path), the gather/scatter kernel the backend embeds, from
# backend/engine/copy.cu with nvcc.
#
# The checked-in PTX comes from Debian 12's nvcc 11.8 (nvidia-cuda-toolkit,
# which scripts/setup.sh installs), for compute_70: the driver JIT-compiles
# it for the GPU at hand. TestCopyPTXCurrent (backend/engine) runs this
# script with OUT in a temporary folder and fails when the file is stale;
# with another nvcc version only TestCopyPTX checks that the PTX assembles.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-backend/engine/copy.ptx}
nvcc -ptx -arch=compute_70 -o "$out" backend/engine/copy.cu
echo "wrote $out ($(nvcc --version | grep -o 'release [0-9.]*'))"
