#!/usr/bin/env bash
# build.sh: build vgpu's CUDA test programs (scripts/cuda-tests/programs.txt).
#
# usage: build.sh OUTDIR [--arch ARCH[,ARCH...]] [-j N]
#
# Every program is built for each architecture variant, with `nvcc -cudart $NVCC_CUDART`
#   OUTDIR/<name>         nvcc's default architecture (no -arch flag: sm_52+PTX with 11.8,
#                         sm_75+PTX with 13.0)
#   OUTDIR/<arch>/<name>  -arch <arch> for each extra ARCH (default: sm_90; "--arch none" skips)
# Each variant directory also gets driver_kernels.fatbin and driver_kernels.ptx, which
# driver_api_module loads from its own directory.
#
# NVCC_CUDART=shared (the default) imports libcudart.so.<N> (vgpu's or NVIDIA's, whichever the
# library path finds); NVCC_CUDART=static links NVIDIA's runtime in (nvcc's own default), which
# then talks to libcuda.so.1 through cuGetProcAddress and cuGetExportTable.
# Environment: NVCC (default: nvcc), NVCC_CUDART (shared|static), NVCC_FLAGS (added to every
# compile), CUDA_STUBS (the directory holding the driver-API stub libcuda.so; found next to nvcc
# or in Debian's place), CUDA_LIBDIR (cuBLAS's directory when it is not a system one; found
# next to nvcc).
# Logs: OUTDIR/logs/<variant>/<name>.log. Exit status 1 when anything failed to build.
set -u

here=$(cd "$(dirname "$0")" && pwd)
usage() { echo "usage: $0 OUTDIR [--arch ARCH[,ARCH...]|none] [-j N]" >&2; exit 2; }

out=""
archs="sm_90"
jobs_max=$(nproc 2>/dev/null || echo 2)
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) [ $# -ge 2 ] || usage; archs="$2"; shift 2 ;;
    --arch=*) archs="${1#--arch=}"; shift ;;
    -j) [ $# -ge 2 ] || usage; jobs_max="$2"; shift 2 ;;
    -j*) jobs_max="${1#-j}"; shift ;;
    -h|--help) usage ;;
    -*) echo "unknown option $1" >&2; usage ;;
    *) [ -z "$out" ] || usage; out="$1"; shift ;;
  esac
done
[ -n "$out" ] || usage
[ "$archs" = none ] && archs=""

NVCC=${NVCC:-nvcc}
NVCC_FLAGS=${NVCC_FLAGS:-}
NVCC_CUDART=${NVCC_CUDART:-shared}
case "$NVCC_CUDART" in
  shared|static) ;;
  *) echo "build.sh: NVCC_CUDART=$NVCC_CUDART: want shared or static" >&2; exit 2 ;;
esac
if ! command -v "$NVCC" >/dev/null 2>&1; then
  echo "build.sh: $NVCC not found (set NVCC)" >&2
  exit 1
fi
nvcc_path=$(command -v "$NVCC")
nvcc_version=$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')

# The stub libcuda.so for linking driver_api_module (never loaded at run time).
if [ -z "${CUDA_STUBS:-}" ]; then
  nvcc_dir=$(dirname "$(readlink -f "$nvcc_path")")
  for d in "$nvcc_dir/../lib64/stubs" "$nvcc_dir/../targets/x86_64-linux/lib/stubs" \
           /usr/local/cuda/lib64/stubs /usr/lib/x86_64-linux-gnu/stubs; do
    if [ -e "$d/libcuda.so" ]; then CUDA_STUBS=$(cd "$d" && pwd); break; fi
  done
fi
# cublas_sgemm links cuBLAS; a toolkit outside the system library path (the GPU machine's
# /usr/local/cuda) gets a RUNPATH to its directory, so the program finds cuBLAS with nothing on
# LD_LIBRARY_PATH, and LD_LIBRARY_PATH still comes first (vgpu's libraries win).
if [ -z "${CUDA_LIBDIR:-}" ]; then
  nvcc_dir=$(dirname "$(readlink -f "$nvcc_path")")
  for d in "$nvcc_dir/../lib64" "$nvcc_dir/../targets/x86_64-linux/lib"; do
    if [ -e "$d/libcublas.so" ]; then CUDA_LIBDIR=$(cd "$d" && pwd); break; fi
  done
fi
if [ -z "${CUDA_STUBS:-}" ]; then
  echo "build.sh: warning: no stub libcuda.so found (set CUDA_STUBS); driver_api_module may not link" >&2
fi

mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
status_dir=$(mktemp -d)
trap 'rm -rf "$status_dir"' EXIT

mapfile -t programs < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/programs.txt")

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# build_one VARIANT_DIR ARCH_FLAGS NAME EXTRA_FLAGS...: one program plus its extra build steps.
build_one() {
  local vdir=$1 archflags=$2 name=$3
  shift 3
  local extra=("$@") vname log start rc
  vname=$(basename "$vdir"); [ "$vdir" = "$out" ] && vname=default
  log="$out/logs/$vname/$name.log"
  mkdir -p "$(dirname "$log")"
  rm -f "$vdir/$name"  # never leave a stale binary behind a failed build
  start=$(now)
  (
    set -x
    nv=("$NVCC" -cudart "$NVCC_CUDART" $archflags $NVCC_FLAGS)
    case "$name" in
      func_by_symbol_static)
        obj="$vdir/.obj"
        mkdir -p "$obj" &&
        "${nv[@]}" -lib -o "$obj/libstatic_kernels.a" "$here/static_kernels.cu" &&
        "${nv[@]}" -o "$vdir/$name" "$here/$name.cu" "$obj/libstatic_kernels.a" "${extra[@]}"
        ;;
      driver_api_module)
        "${nv[@]}" -fatbin -o "$vdir/driver_kernels.fatbin" "$here/driver_kernels.cu" &&
        "${nv[@]}" -ptx -o "$vdir/driver_kernels.ptx" "$here/driver_kernels.cu" &&
        "${nv[@]}" -o "$vdir/$name" "$here/$name.cu" ${CUDA_STUBS:+-L"$CUDA_STUBS"} "${extra[@]}"
        ;;
      cublas_sgemm)
        "${nv[@]}" -o "$vdir/$name" "$here/$name.cu" "${extra[@]}" \
          ${CUDA_LIBDIR:+-Xlinker --enable-new-dtags -Xlinker -rpath="$CUDA_LIBDIR"}
        ;;
      *)
        "${nv[@]}" -o "$vdir/$name" "$here/$name.cu" "${extra[@]}"
        ;;
    esac
  ) >"$log" 2>&1
  rc=$?
  printf '%s %s %s\n' "$rc" "$log" "$(since "$start")" >"$status_dir/$vname.$name"
}

variants=("$out|")
for a in ${archs//,/ }; do variants+=("$out/$a|-arch $a"); done

echo "building ${#programs[@]} programs x ${#variants[@]} variants with $nvcc_path (CUDA $nvcc_version, -cudart $NVCC_CUDART), -j$jobs_max, into $out"
t0=$(now)
for v in "${variants[@]}"; do
  vdir=${v%%|*}
  mkdir -p "$vdir"
  for line in "${programs[@]}"; do
    read -r -a words <<<"$line"
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
    build_one "$vdir" "${v#*|}" "${words[@]}" &
  done
done
wait

failed=0
for v in "${variants[@]}"; do
  vdir=${v%%|*}
  vname=$(basename "$vdir"); [ "$vdir" = "$out" ] && vname=default
  for line in "${programs[@]}"; do
    read -r name _ <<<"$line"
    read -r rc log secs <"$status_dir/$vname.$name"
    rel=${vdir#"$out"}; rel=${rel#/}; rel=${rel:+$rel/}$name
    if [ "$rc" = 0 ]; then
      # The runtime soname the binary imports: the ABI vgpu must provide for it.
      needs=$(readelf -d "$vdir/$name" 2>/dev/null | sed -n 's/.*Shared library: \[\(libcuda[^]]*\)\].*/\1/p' | tr '\n' ' ')
      printf '  %-8s %-24s built   %5ss  %-32s needs %s\n' "$vname" "$name" "$secs" "$rel" "${needs:-(runtime linked in)}"
    else
      failed=$((failed + 1))
      printf '  %-8s %-24s FAILED  %5ss  see %s\n' "$vname" "$name" "$secs" "$log"
      grep -v '^+' "$log" | tail -n 5 | sed 's/^/      | /'
    fi
  done
done

{
  echo "nvcc: $nvcc_path"
  "$NVCC" --version | tail -n 2
  echo "variants: default ${archs//,/ }; -cudart $NVCC_CUDART"
  echo "NVCC_FLAGS: $NVCC_FLAGS"
  echo "CUDA_STUBS: ${CUDA_STUBS:-}"
  echo "CUDA_LIBDIR: ${CUDA_LIBDIR:-}"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} >"$out/BUILD-INFO"

total=$(( ${#programs[@]} * ${#variants[@]} ))
printf 'built %d of %d in %ss (CUDA %s, -cudart %s)\n' "$((total - failed))" "$total" "$(since "$t0")" "$nvcc_version" "$NVCC_CUDART"
[ "$failed" -eq 0 ]
