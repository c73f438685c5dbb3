#!/usr/bin/env bash
# run.sh: run vgpu's CUDA test programs built by build.sh and print a result table.
#
# usage: run.sh BINDIR [--lib DIR] [--out FILE.csv] [--timeout SECONDS] [--logs DIR] [--xfail NAME[,NAME]]
#               [--vgpu-log DIR] [-v] [NAME...]
#
#   BINDIR        a variant directory from build.sh (OUTDIR for the default arch, OUTDIR/sm_90, ...)
#   --lib DIR     put DIR first on LD_LIBRARY_PATH, to run on vgpu's libcuda (NVIDIA's runtime above it)
#                 instead of NVIDIA's (the resolved libraries are printed first)
#   --out FILE    also write the results as CSV: program,result,seconds,exit,last_line
#   --timeout S   per-program limit (default 60 seconds; a program that runs over is TIMEOUT)
#   --logs DIR    keep each program's output in DIR/<name>.log (default: a temporary folder)
#   --xfail NAMES a known gap (comma-separated, repeatable): a failure of these is XFAIL and does
#                 not count as failed; a pass says "PASS (listed as xfail)" so the list can shrink
#   --vgpu-log D  vgpu's libraries log to D/<name>.log (VGPU_LOG_FILE; VGPU_LOG=info unless set):
#                 the unsupported calls and export tables each program met (scripts/vgpu-gaps.sh)
#   -v            print each program's full output
#   NAME...       run only these programs (default: all in programs.txt, in order)
#
# Verdicts: PASS (last line "PASS <name>", exit 0; "PASS (kernels skipped)" when the program said
# SKIP-KERNEL-CHECK on vgpu's sim device), SKIP (last line "SKIP <name> ...", exit 0), and FAIL,
# TIMEOUT, CRASH (killed by a signal), MISSING (not built), which count as failed.
# XFAIL: a program named by --xfail that did not pass (not counted as failed).
# Last line: "N passed, M failed, K skipped" (", X expected failures" when there were any).
# Exit status 1 when anything failed.
set -u

here=$(cd "$(dirname "$0")" && pwd)
usage() { echo "usage: $0 BINDIR [--lib DIR] [--out FILE] [--timeout S] [--logs DIR] [--xfail NAME[,NAME]] [--vgpu-log DIR] [-v] [NAME...]" >&2; exit 2; }

bindir="" lib="" csv="" limit=60 logs="" verbose=0 xfail="," vlog=""
only=()
while [ $# -gt 0 ]; do
  case "$1" in
    --lib) [ $# -ge 2 ] || usage; lib="$2"; shift 2 ;;
    --out) [ $# -ge 2 ] || usage; csv="$2"; shift 2 ;;
    --timeout) [ $# -ge 2 ] || usage; limit="$2"; shift 2 ;;
    --logs) [ $# -ge 2 ] || usage; logs="$2"; shift 2 ;;
    --xfail) [ $# -ge 2 ] || usage; xfail="$xfail$2,"; shift 2 ;;
    --vgpu-log) [ $# -ge 2 ] || usage; vlog="$2"; shift 2 ;;
    -v) verbose=1; shift ;;
    -h|--help) usage ;;
    -*) echo "unknown option $1" >&2; usage ;;
    *) if [ -z "$bindir" ]; then bindir="$1"; else only+=("$1"); fi; shift ;;
  esac
done
[ -n "$bindir" ] && [ -d "$bindir" ] || usage
bindir=$(cd "$bindir" && pwd)

if [ -n "$lib" ]; then
  [ -d "$lib" ] || { echo "run.sh: --lib $lib is not a directory" >&2; exit 2; }
  lib=$(cd "$lib" && pwd)
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [ -z "$logs" ]; then
  logs=$(mktemp -d)
  trap 'rm -rf "$logs"' EXIT
fi
mkdir -p "$logs"
if [ -n "$vlog" ]; then
  mkdir -p "$vlog" && vlog=$(cd "$vlog" && pwd)
  export VGPU_LOG=${VGPU_LOG:-info}
fi

# A build directory may bring its own list (scripts/cuda-libs/build.sh writes one).
list=$here/programs.txt
[ -f "$bindir/programs.txt" ] && list=$bindir/programs.txt
mapfile -t programs < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$list" | awk '{print $1}')
if [ ${#only[@]} -gt 0 ]; then programs=("${only[@]}"); fi

# Which libraries the programs will load (the driver-API program imports both).
if [ -x "$bindir/driver_api_module" ]; then
  echo "libraries (LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}):"
  ldd "$bindir/driver_api_module" | grep -E 'libcudart|libcuda\.so' | sed 's/^[[:space:]]*/  /'
fi

now() { date +%s.%N; }
[ -n "$csv" ] && echo "program,result,seconds,exit,last_line" >"$csv"
pass=0 fail=0 skip=0 xfailed=0
failed_names=()
printf '%-24s | %-22s | %s\n' program result seconds
printf '%-24s-+-%-22s-+-%s\n' "------------------------" "----------------------" "-------"
for name in "${programs[@]}"; do
  log="$logs/$name.log"
  if [ ! -x "$bindir/$name" ]; then
    rc=-1 secs=0 result=MISSING last="not built: $bindir/$name"
    : >"$log"
  else
    start=$(now)
    # (the subshell keeps bash's own "Segmentation fault" notice out of the table)
    [ -n "$vlog" ] && export VGPU_LOG_FILE="$vlog/$name.log" && : >"$VGPU_LOG_FILE"
    (timeout -k 5 "$limit" "$bindir/$name" >"$log" 2>&1 </dev/null; exit $?) 2>/dev/null
    rc=$?
    secs=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
    last=$(grep -v '^[[:space:]]*$' "$log" | tail -n 1)
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
      result=TIMEOUT
    elif [ $rc -gt 128 ]; then
      result="CRASH (signal $((rc - 128)))"
    elif [ $rc -eq 0 ] && [ "$last" = "PASS $name" ]; then
      if grep -q '^SKIP-KERNEL-CHECK' "$log"; then result="PASS (kernels skipped)"; else result=PASS; fi
    elif [ $rc -eq 0 ] && [[ "$last" == "SKIP $name"* ]]; then
      result=SKIP
    else
      result=FAIL
    fi
  fi
  if [[ $xfail == *",$name,"* ]]; then
    case "$result" in
      PASS) result="PASS (listed as xfail)" ;;
      PASS*|SKIP) ;;
      *) result="XFAIL ($result)" ;;
    esac
  fi
  case "$result" in
    PASS*) pass=$((pass + 1)) ;;
    SKIP) skip=$((skip + 1)) ;;
    XFAIL*) xfailed=$((xfailed + 1)); failed_names+=("$name") ;;
    *) fail=$((fail + 1)); failed_names+=("$name") ;;
  esac
  printf '%-24s | %-22s | %7s\n' "$name" "$result" "$secs"
  if [ $verbose -eq 1 ]; then sed 's/^/    /' "$log"; fi
  if [ -n "$csv" ]; then
    q=${last//\"/\"\"}
    echo "$name,\"$result\",$secs,$rc,\"$q\"" >>"$csv"
  fi
done

if [ ${#failed_names[@]} -gt 0 ] && [ $verbose -eq 0 ]; then
  for name in "${failed_names[@]}"; do
    echo
    echo "--- $name (last lines of output)"
    if [ -s "$logs/$name.log" ]; then tail -n 12 "$logs/$name.log" | sed 's/^/    /'; else echo "    (no output)"; fi
  done
  echo
fi
echo "$pass passed, $fail failed, $skip skipped$([ "$xfailed" -gt 0 ] && echo ", $xfailed expected failures")"
[ "$fail" -eq 0 ]
