#!/bin/sh
# cuda-program.sh OUTDIR: build the CUDA program the deployment tests run in
# guests, and OUTDIR/run, the command that runs it (no arguments, no
# LD_LIBRARY_PATH: the program must find the driver libraries the way an
# installed guest offers them). This file is the one place that picks the
# program; the package and libvirt tests run OUTDIR/run.
#
# Now: guest-lib/tests/driver_prog.c, a driver-API program that needs only
# libcuda.so.1 (linked by soname, no RPATH), loading a fatbin nvcc builds
# from driver_kernels.cu. On the sim device its kernel is validated, not
# executed; the program checks everything else.
set -eu
out=${1:?usage: cuda-program.sh OUTDIR}
repo=$(CDPATH= cd -- "$(dirname -- "$0")/../.." && pwd)
lib=$repo/guest-lib/build
[ -e "$lib/libcuda.so.1" ] || { echo "cuda-program: $lib/libcuda.so.1 is missing: run make first" >&2; exit 1; }
command -v nvcc >/dev/null || { echo "cuda-program: no nvcc: run scripts/setup.sh" >&2; exit 1; }
mkdir -p "$out"
${CC:-cc} -O2 -o "$out/driver_prog" "$repo/guest-lib/tests/driver_prog.c" -L"$lib" -l:libcuda.so.1
nvcc -fatbin -arch sm_90 -o "$out/kernels.fatbin" "$repo/guest-lib/tests/driver_kernels.cu"
cat >"$out/run" <<'RUN'
#!/bin/sh
# The deployment tests' CUDA program (deploy/test/cuda-program.sh).
here=$(dirname "$0")
exec "$here/driver_prog" "$here/kernels.fatbin"
RUN
chmod 755 "$out/run"
