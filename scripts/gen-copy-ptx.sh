#!/usr/bin/env bash
# gen-copy-ptx.sh - regenerate backend/engine/copy.ptx, the gather/scatter
# kernel the backend embeds, from backend/engine/copy.cu with nvcc.
#
# The checked-in PTX comes from Debian 12's nvcc 11.8 (nvidia-cuda-toolkit,
# which scripts/setup.sh installs), for compute_70: the driver JIT-compiles
# it for the GPU at hand. TestCopyPTXCurrent (backend/engine) regenerates it
# with the same nvcc and fails when the file is stale; with another nvcc
# version it only checks that the PTX assembles.
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc -ptx -arch=compute_70 -o backend/engine/copy.ptx backend/engine/copy.cu
echo "wrote backend/engine/copy.ptx ($(nvcc --version | grep -o 'release [0-9.]*'))"
