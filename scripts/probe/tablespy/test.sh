#!/bin/sh
# test.sh - tablespy's tests:
#   1. ABI: testdata/spyuser.c calls, through the spy, the slots of the tables of a stand-in
#      driver (testdata/fakereal.c): stack and vector arguments survive the trampolines,
#      pointer bytes are logged before and after, data words and NULLs are copied, one copy
#      per table, calls past the limit are only counted, unknown UUIDs pass the answer on.
#   2. vgpu's own libcuda.so.1 on the sim device (host mode) as the real driver, with NVIDIA's
#      runtime linked into a program by the machine's nvcc (-cudart static): the program
#      passes unchanged and the log shows the tables it asked for and the calls into them.
# Part 2 needs guest-lib/build/libcuda.so.1 and bin/vgpu (make) and nvcc, and is skipped
# without them. Environment: BUILD (scratch directory, default build/test here).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
T=${BUILD:-$HERE/build/test}
VGPU=${VGPU_BIN:-$ROOT/bin/vgpu}
REAL=$ROOT/guest-lib/build/libcuda.so.1
NVCC=${NVCC:-$(command -v nvcc || true)}
mkdir -p "$T"
SPY=$T/spy
make -s -C "$HERE" BUILD="$SPY" >"$T/make.log" 2>&1 || { cat "$T/make.log"; echo "FAIL: build"; exit 1; }
fails=0
check() { # what, grep pattern
	if grep -q -E "$2" "$T/spy.log"; then echo "ok   $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}

# 1. ABI, against the stand-in driver
CC=${CC:-cc}
$CC -std=c11 -O1 -fPIC -shared -o "$T/fakereal.so" "$HERE/testdata/fakereal.c" &&
	$CC -std=c11 -D_GNU_SOURCE -O1 -Wall -Wextra -Werror -o "$T/spyuser" "$HERE/testdata/spyuser.c" -ldl ||
	{ echo "FAIL: building testdata"; exit 1; }
rm -f "$T/spy.log"
if TABLESPY_REAL=$T/fakereal.so TABLESPY_LOG=$T/spy.log LD_LIBRARY_PATH=$SPY timeout 20 "$T/spyuser" \
	>"$T/spyuser.out" 2>&1; then
	echo "ok   the stand-in's slots called through the trampolines give the right answers"
else
	echo "FAIL spyuser: $(grep FAIL "$T/spyuser.out" | head -3 | tr '\n' ' ')"
	fails=$((fails + 1))
fi
check "a sized table: 3 functions wrapped, a NULL and a data word copied" \
	'table uuid=00010000000000000000000000000000 name=unknown rc=0 .*word0=0x30 words=6 wrapped=1 .* sized=1 functions=3 null=1 data=1'
check "an output pointer: the bytes it points to after the call" \
	"call uuid=00010000000000000000000000000000 .*slot=5 n=1 .*ret=0x0 \\*a0=0{16}[0-9a-f]*>[0-9a-f]+ \\*\\*a0=$(printf '22%.0s' $(seq 32))"
check "a table without a size word: up to its NULL" \
	'table uuid=02030000000000000000000000000000 .*rc=0 .*words=3 wrapped=1 .* sized=0 functions=2 null=1'
check "an unknown UUID: the real answer, no table" 'table uuid=09000000000000000000000000000000 name=unknown rc=1 ptr=\(nil\)'
check "eight integer arguments: six logged, the result returned" \
	'call uuid=00010000000000000000000000000000 name=unknown slot=1 n=1 fn=fakereal.so\+0x[0-9a-f]+ args=0x1,0x2,0x3,0x4,0x5,0x6 ret=0x1f8( |$)'
check "the bytes a pointer argument points to, before and after" \
	"call uuid=00010000000000000000000000000000 .*slot=2 n=1 .*ret=0x7 \\*a0=$(printf '0%.0s' $(seq 64))>$(printf '11%.0s' $(seq 32))"
check "calls past the limit are counted, not logged" 'count uuid=00010000000000000000000000000000 name=unknown slot=1 calls=25'
if grep -q 'slot=1 n=21 ' "$T/spy.log"; then echo "FAIL call 21 logged"; fails=$((fails + 1)); fi

# 2. vgpu's libcuda.so.1 and NVIDIA's runtime
cp "$T/spy.log" "$T/spy-abi.log"
for need in "$REAL" "$VGPU"; do
	[ -e "$need" ] || { echo "skip part 2: no $need (run make first)"; exit $fails; }
done
[ -n "$NVCC" ] || { echo "skip part 2: no nvcc"; exit $fails; }
"$NVCC" -cudart static -o "$T/prog" "$ROOT/guest-lib/tests/nvcc_prog.cu" >"$T/nvcc.log" 2>&1 ||
	{ cat "$T/nvcc.log"; echo "FAIL: nvcc"; exit 1; }

SOCK=$T/sim.sock
rm -f "$SOCK"
"$VGPU" serve --device sim --unix "$SOCK" >"$T/server.log" 2>&1 &
srv=$!
trap 'kill $srv 2>/dev/null; wait $srv 2>/dev/null' EXIT
i=0
while [ ! -S "$SOCK" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ -S "$SOCK" ] || { cat "$T/server.log"; echo "FAIL: vgpu serve did not start"; exit 1; }

rm -f "$T/spy.log"
if VGPU_TRANSPORT=unix:$SOCK TABLESPY_REAL=$REAL TABLESPY_LOG=$T/spy.log LD_LIBRARY_PATH=$SPY \
	timeout 60 "$T/prog" --no-graphs >"$T/prog.out" 2>&1; then
	echo "ok   NVIDIA's static runtime 11.8 runs unchanged through the spy"
else
	echo "FAIL the program through the spy: $(tail -3 "$T/prog.out" | tr '\n' ' ')"
	fails=$((fails + 1))
fi
check "the real library is a second object beside the spy" "init real=$REAL .*second_object=yes forwarded=[0-9]+ missing=0"
check "CUDART_INTERFACE asked, served, handed back unchanged (integrity)" \
	'table uuid=6bd5fb6c5bf4e74a8987d93912fd9df9 name=CUDART_INTERFACE rc=0 .* wrapped=0'
check "context-local storage wrapped: 3 functions and its NULL" \
	'table uuid=c693336e1121df11a8c368f355d89593 .*rc=0 .*words=4 wrapped=1 .* sized=0 functions=3 null=1'
check "CLS get logged through a trampoline, with its pointer arguments" \
	'call uuid=c693336e1121df11a8c368f355d89593 name=CONTEXT_LOCAL_STORAGE slot=2 n=1 fn=libcuda.so.1\+0x[0-9a-f]+ args=0x[0-9a-f]+,.* ret=0x[0-9a-f]+ \*a0='
check "CLS put returns 0 through the trampoline" 'call uuid=c693336e.* slot=0 n=1 .* ret=0x0( |$)'
check "TOOLS_RUNTIME_CALLBACK_HOOKS slot 2 writes its outputs (bytes after the call differ)" \
	'call uuid=a094798c.* slot=2 n=1 .*\*a0=[0-9a-f]+>[0-9a-f]+'
check "call counts at exit" 'count uuid=c693336e1121df11a8c368f355d89593 name=CONTEXT_LOCAL_STORAGE slot=2 calls=[0-9]+'
# the summary reads the log
if python3 "$HERE/summarize.py" "$T/spy.log" >"$T/summary.txt" 2>&1 &&
	grep -q 'CONTEXT_LOCAL_STORAGE' "$T/summary.txt"; then
	echo "ok   summarize.py"
else
	echo "FAIL summarize.py: $(tail -3 "$T/summary.txt" | tr '\n' ' ')"
	fails=$((fails + 1))
fi
[ $fails -eq 0 ] && echo "tablespy: all passed" || echo "tablespy: $fails failed (log: $T/spy.log)"
exit $fails
