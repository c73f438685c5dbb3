#!/bin/sh
# tests/run.sh - the guest library's tests; `make -C guest-lib test` runs it.
#
#   1. generated files up to date, tables cover the ABI lists (go test ./guest-lib/gen)
#   2. exported symbols of every built library against
#      ../shared/abi/*.exports.txt (nm -D)
#   3. every unsupported symbol returns its error (generated list)
#   4. struct layouts against the real CUDA 11.8 headers (if installed)
#   5. host mode against the sim device (vgpu serve: a worker process per
#      client): C tests of every API group, the runtime API through NVIDIA's
#      libcudart on our libcuda.so.1 (pinned memory shared as memfds;
#      again with VGPU_HOST_SHARE=0, inline; again with vgpu serve --isolate
#      vm); the same tests in guest mode through a
#      fake /dev/vgpu (tests/fakedev.c)
#   6. nvcc-built programs (if /usr/bin/nvcc exists) against sim, on NVIDIA's
#      runtime (shared and static) with our libcuda.so.1; driver-API modules and
#      libraries (lazy and eager loading)
#   7. NVML: struct layouts against nvml.h (if installed); tests/nvml_test.c
#      in host and guest mode, with Debian's nvidia-smi when installed, and
#      against a backend with --mem-limit
#
# Environment: BUILD (library dir, default guest-lib/build), CC, GO,
# VGPU_CUDART (NVIDIA's libcudart.so.N to test with; default: Debian's
# libcudart.so.11.0 from nvidia-cuda-toolkit, which scripts/setup.sh installs
# unless VGPU_SKIP_NVCC=1, and then the tests that need it are skipped),
# VGPU_SHARED (default: ../shared beside the repository), VGPU_BIN (a vgpu
# binary with `serve`; default: bin/vgpu if it has it, else the test server
# in tests/simserve, which runs the same server code).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
GL=$(dirname "$HERE")
ROOT=$(dirname "$GL")
BUILD=${BUILD:-$GL/build}
CC=${CC:-cc}
GO=${GO:-go}
SHARED=${VGPU_SHARED:-$ROOT/../shared}
T=$BUILD/tests
mkdir -p "$T"
fails=0
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# NVIDIA's runtime, the only one vgpu supports, and a directory holding only
# vgpu's driver libraries (libcuda.so.1, libnvidia-ml.so.1) for the library
# path: the runtime found is NVIDIA's, the driver ours
NVRT=${VGPU_CUDART:-$($CC -print-file-name=libcudart.so.11.0)}
[ -f "$NVRT" ] || NVRT=
DRV=$T/drvlib
rm -rf "$DRV" && mkdir -p "$DRV" && cp -a "$BUILD"/libcuda.so.1 "$BUILD"/libnvidia-ml.so.1 "$DRV/"
no_nvrt() { # what: skipped where the toolkit was left out on purpose, else a failure
	if [ "${VGPU_SKIP_NVCC:-0}" = 1 ]; then
		echo "skip $1: no NVIDIA libcudart (VGPU_SKIP_NVCC=1)"
	else
		fail "$1: no NVIDIA libcudart: install nvidia-cuda-toolkit (scripts/setup.sh) or set VGPU_CUDART=/path/libcudart.so.N"
	fi
}

CFLAGS="-std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Werror -Wno-unused-parameter"
INC="-I$GL/src/common -I$GL/src/cuda -I$ROOT/protocol -I$GL/generated"

# 1. generator
if (cd "$ROOT" && $GO run ./guest-lib/gen -check && $GO test ./guest-lib/gen >/dev/null); then
	pass "generated files are up to date; tables cover the ABI lists"
else
	fail "go run ./guest-lib/gen -check / go test ./guest-lib/gen"
fi

# 2. symbols
exports() { # lib -> the name of each defined dynamic symbol
	nm -D --defined-only "$BUILD/$1" | awk '$2 ~ /^[TWi]$/ {print $3}' | sed 's/@.*//' | sort -u
}
if [ -d "$SHARED/abi" ]; then
	for lib in libcuda.so.1 libnvidia-ml.so.1; do
		want=$SHARED/abi/$lib.exports.txt
		exports "$lib" >"$T/$lib.have"
		missing=$(grep -v "^$lib\$" "$want" | sort -u | comm -23 - "$T/$lib.have")
		if [ -z "$missing" ]; then
			pass "$lib exports all $(grep -vc "^$lib\$" "$want") symbols of $(basename "$want")"
		else
			fail "$lib is missing: $(echo "$missing" | head -5 | tr '\n' ' ')"
		fi
	done
else
	echo "skip symbol checks: no $SHARED/abi (clone shared/ beside the repository)"
fi

# 3. unsupported stubs
if $CC $CFLAGS $INC -o "$T/unsupported_test" "$HERE/unsupported_test.c" -ldl &&
	LD_LIBRARY_PATH=$BUILD VGPU_LOG=error "$T/unsupported_test"; then
	pass "unsupported stubs"
else
	fail "unsupported stubs"
fi

# 4. layouts against the real 11.8 headers
if [ -f /usr/include/driver_types.h ] && [ -f /usr/include/cuda.h ]; then
	if $CC $CFLAGS $INC -o "$T/layout_test" "$HERE/layout_test.c" "$HERE/layout_real.c" &&
		"$T/layout_test"; then
		pass "layouts"
	else
		fail "layouts"
	fi
else
	echo "skip layout test: CUDA 11.8 headers not installed"
fi

# 4a. NVML structs against NVIDIA's nvml.h (libnvidia-ml-dev, with the toolkit)
if [ -f /usr/include/nvml.h ]; then
	if $CC $CFLAGS -I"$GL/src/nvml" -o "$T/nvml_layout_test" "$HERE/nvml_layout_test.c" "$HERE/nvml_layout_real.c" &&
		"$T/nvml_layout_test"; then
		pass "NVML layouts"
	else
		fail "NVML layouts"
	fi
else
	echo "skip NVML layout test: /usr/include/nvml.h not installed"
fi

# 4b. no backend: errors, never exit() (NVIDIA's runtime on our libcuda.so.1)
if [ -z "$NVRT" ]; then
	no_nvrt "no-backend error codes"
elif $CC $CFLAGS -o "$T/failure_test" "$HERE/failure_test.c" "$NVRT" -L"$DRV" -l:libcuda.so.1 \
	-l:libnvidia-ml.so.1 -Wl,-rpath,"$DRV"; then
	if LD_LIBRARY_PATH=$DRV VGPU_LOG=none VGPU_TRANSPORT=unix:$T/no-such.sock "$T/failure_test" 46 &&
		LD_LIBRARY_PATH=$DRV VGPU_LOG=none VGPU_DEVICE=$T/no-such-device "$T/failure_test" 100; then
		pass "no backend: real error codes (46 unreachable, 100 no device), no exit"
	else
		fail "no-backend error codes"
	fi
else
	fail "building failure_test"
fi

# 4c. a backend that corrupts the shared-memory ring: errors, no crash or hang
if $CC $CFLAGS -I"$ROOT/protocol" -o "$T/ring_hostile_test" "$HERE/ring_hostile_test.c" -L"$BUILD" -l:libcuda.so.1 \
	-lpthread -Wl,-rpath,"$BUILD"; then
	# without spinning (the reader thread reads every reply) and spinning
	# (the caller reads its own)
	for spin in 0 20; do
		if VGPU_RING_SPIN_US=$spin VGPU_LOG=none timeout 60 "$T/ring_hostile_test" "$T/ring-hostile.sock" >"$T/ring-hostile-$spin.out" 2>&1; then
			pass "a backend that corrupts the completion ring (VGPU_RING_SPIN_US=$spin): calls fail with 46, no crash or hang"
		else
			fail "corrupt completion ring, VGPU_RING_SPIN_US=$spin: $(tail -2 "$T/ring-hostile-$spin.out" | tr '\n' ' ')"
		fi
	done
	# a memset queued (host mode sends the first queued call at once:
	# VGPU_BATCH_FIRST=32 keeps it for the synchronize to carry)
	if VGPU_BATCH_FIRST=32 VGPU_LOG=none timeout 60 "$T/ring_hostile_test" "$T/ring-hostile.sock" batchsync >"$T/ring-hostile-bs.out" 2>&1; then
		pass "a backend whose BATCH_SYNC reply lies about its inner frame: calls fail with 46, no crash or hang"
	else
		fail "lying BATCH_SYNC reply: $(tail -2 "$T/ring-hostile-bs.out" | tr '\n' ' ')"
	fi
else
	fail "building ring_hostile_test"
fi

# 5. host mode against sim
SOCK=$T/vgpu.sock
rm -f "$SOCK"
SERVER_PID=
start_server() {
	bin=${VGPU_BIN:-$ROOT/bin/vgpu}
	if [ -x "$bin" ] && "$bin" serve -h 2>&1 | grep -q -- 'unix'; then
		"$bin" serve --device sim --unix "$SOCK" >"$T/server.log" 2>&1 &
	else
		(cd "$ROOT" && $GO build -o "$T/simserve" ./guest-lib/tests/simserve) || return 1
		"$T/simserve" -unix "$SOCK" >"$T/server.log" 2>&1 &
	fi
	SERVER_PID=$!
	i=0
	while [ ! -S "$SOCK" ] && [ $i -lt 300 ]; do
		kill -0 "$SERVER_PID" 2>/dev/null || return 1
		sleep 0.1
		i=$((i + 1))
	done
	[ -S "$SOCK" ]
}
stop_server() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null; SERVER_PID=; }
trap stop_server EXIT

if start_server; then
	export VGPU_TRANSPORT=unix:$SOCK
	if [ -z "$NVRT" ]; then
		no_nvrt "host and guest mode tests (tests/hostmode_test.c)"
	elif $CC $CFLAGS $INC -o "$T/hostmode_test" "$HERE/hostmode_test.c" "$NVRT" \
		-L"$DRV" -l:libcuda.so.1 -l:libnvidia-ml.so.1 -ldl -lpthread -Wl,-rpath,"$DRV"; then
		if LD_LIBRARY_PATH=$DRV timeout 120 "$T/hostmode_test"; then pass "host mode (sim), pinned memory shared as memfds"; else fail "host mode (sim): see $T/server.log"; fi
		# staged pageable copies with one thread per copy, with two helpers
		# (forced: on fewer than 4 CPUs the default is one), and none
		# staged (VGPU_STAGING=0: every byte inline, the test checks none
		# went through staging)
		for v in VGPU_STAGING_THREADS=1 VGPU_STAGING_THREADS=3 VGPU_STAGING=0; do
			if env "$v" LD_LIBRARY_PATH=$DRV timeout 120 "$T/hostmode_test" staged_copy >"$T/staged-$v.out" 2>&1 &&
				grep -q "^ok   staged_copy" "$T/staged-$v.out"; then
				pass "host mode (sim), pageable copies with $v"
			else
				fail "host mode, pageable copies with $v: $(grep FAIL "$T/staged-$v.out" | head -3 | tr '\n' ' ')"
			fi
		done
		# batches sent at 32 queued calls, then 64, ... (host mode sends from the first on: 1, 2, 4, ...)
		if VGPU_BATCH_FIRST=32 LD_LIBRARY_PATH=$DRV timeout 120 "$T/hostmode_test" >"$T/batch1.out" 2>&1; then
			pass "host mode (sim), VGPU_BATCH_FIRST=32 (a guest's): bursts sent in batches of 32, 64, ..."
		else
			fail "host mode with VGPU_BATCH_FIRST=32: $(grep FAIL "$T/batch1.out" | head -3 | tr '\n' ' ')"
		fi
		# queued calls ride with the synchronous call after them (BATCH_SYNC:
		# check the frames went so), and the tests that queue calls the old
		# way (VGPU_BATCH_SYNC=0: the batch, then the call)
		if VGPU_STATS=1 LD_LIBRARY_PATH=$DRV timeout 120 "$T/hostmode_test" batch_sync >"$T/batchsync.out" 2>&1 &&
			grep -q "^BATCH_SYNC " "$T/batchsync.out"; then
			pass "host mode (sim), queued calls carried by the synchronous call (BATCH_SYNC)"
		else
			fail "host mode, BATCH_SYNC: $(grep -E 'FAIL|BATCH' "$T/batchsync.out" | head -3 | tr '\n' ' ')"
		fi
		nbs=0
		: >"$T/nobatchsync.out"
		for t in batch_sync pinned_streams_events host_func driver_api threads graph staged_copy; do
			VGPU_BATCH_SYNC=0 VGPU_STATS=1 LD_LIBRARY_PATH=$DRV timeout 120 "$T/hostmode_test" $t >>"$T/nobatchsync.out" 2>&1 || nbs=1
		done
		if [ $nbs = 0 ] && ! grep -q "^BATCH_SYNC " "$T/nobatchsync.out"; then
			pass "host mode (sim), VGPU_BATCH_SYNC=0: the batch, then the synchronous call"
		else
			fail "host mode with VGPU_BATCH_SYNC=0: $(grep -E 'FAIL|BATCH_SYNC' "$T/nobatchsync.out" | head -3 | tr '\n' ' ')"
		fi
		# the same with pinned memory inline (an older backend, or VGPU_HOST_SHARE=0)
		if VGPU_HOST_SHARE=0 LD_LIBRARY_PATH=$DRV timeout 120 "$T/hostmode_test" >"$T/noshare.out" 2>&1; then
			pass "host mode (sim), VGPU_HOST_SHARE=0: pinned memory inline, no zero-copy"
		else
			fail "host mode with VGPU_HOST_SHARE=0: $(grep FAIL "$T/noshare.out" | head -3 | tr '\n' ' ')"
		fi
		# shared-memory rings (on by default above): check they were used
		# (spinning, as on machines with 4 or more CPUs, where callers read
		# their replies from the ring themselves, beside the reader thread
		# and its notifications), then small rings that wrap inside every large frame with no
		# spinning (every wait sleeps on its eventfd), and VGPU_RING=0
		if VGPU_RING_SPIN_US=20 VGPU_STATS=1 VGPU_LOG=info LD_LIBRARY_PATH=$DRV timeout 120 "$T/hostmode_test" >"$T/ring.out" 2>&1 &&
			grep -q "on shared-memory rings" "$T/ring.out" && grep -Eq "rung to the backend, [1-9][0-9]* replies read by their caller" "$T/ring.out"; then
			pass "host mode (sim) on shared-memory rings, spinning: callers read their own replies"
		else
			fail "host mode on shared-memory rings: $(grep -E 'FAIL|ring' "$T/ring.out" | head -3 | tr '\n' ' ')"
		fi
		if VGPU_RING_BYTES=65536 VGPU_RING_SPIN_US=0 LD_LIBRARY_PATH=$DRV timeout 120 "$T/hostmode_test" >"$T/ring-small.out" 2>&1; then
			pass "host mode (sim) on 64 KiB rings, no spinning: frames wrap, every wait sleeps on its eventfd"
		else
			fail "host mode on 64 KiB rings without spinning: $(grep FAIL "$T/ring-small.out" | head -3 | tr '\n' ' ')"
		fi
		if VGPU_RING=0 VGPU_LOG=info LD_LIBRARY_PATH=$DRV timeout 120 "$T/hostmode_test" >"$T/noring.out" 2>&1 &&
			! grep -q "on shared-memory rings" "$T/noring.out"; then
			pass "host mode (sim), VGPU_RING=0: every frame on the socket"
		else
			fail "host mode with VGPU_RING=0: $(grep -E 'FAIL|ring' "$T/noring.out" | head -3 | tr '\n' ' ')"
		fi
		# 5a. host mode in a VM's worker process (vgpu serve --isolate vm):
		# the worker gets the client's socket and maps its memfds
		bin=${VGPU_BIN:-$ROOT/bin/vgpu}
		if [ -x "$bin" ] && "$bin" serve -h 2>&1 | grep -q -- 'isolate'; then
			ISOCK=$T/vgpu-isolate.sock
			rm -f "$ISOCK"
			"$bin" serve --device sim --isolate vm --unix "$ISOCK" >"$T/server-isolate.log" 2>&1 &
			IPID=$!
			i=0
			while [ ! -S "$ISOCK" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
			if VGPU_LOG=info VGPU_TRANSPORT=unix:$ISOCK LD_LIBRARY_PATH=$DRV timeout 120 "$T/hostmode_test" >"$T/isolate.out" 2>&1 &&
				grep -q "on shared-memory rings" "$T/isolate.out"; then
				pass "host mode (sim) with --isolate vm: shared pinned memory and rings mapped in the worker"
			else
				fail "host mode with --isolate vm: $(grep FAIL "$T/isolate.out" | head -3 | tr '\n' ' ') (see $T/server-isolate.log)"
			fi
			kill "$IPID" 2>/dev/null
			wait "$IPID" 2>/dev/null
			# a backend that refuses rings (--unix-no-ring): the library
			# stays on the socket
			NSOCK=$T/vgpu-noring.sock
			rm -f "$NSOCK"
			"$bin" serve --device sim --unix-no-ring --unix "$NSOCK" >"$T/server-noring.log" 2>&1 &
			NPID=$!
			i=0
			while [ ! -S "$NSOCK" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
			if VGPU_LOG=info VGPU_TRANSPORT=unix:$NSOCK LD_LIBRARY_PATH=$DRV timeout 120 "$T/hostmode_test" >"$T/noring-srv.out" 2>&1 &&
				! grep -q "on shared-memory rings" "$T/noring-srv.out"; then
				pass "host mode (sim) against vgpu serve --unix-no-ring: the socket"
			else
				fail "host mode against --unix-no-ring: $(grep -E 'FAIL|ring' "$T/noring-srv.out" | head -3 | tr '\n' ' ')"
			fi
			kill "$NPID" 2>/dev/null
			wait "$NPID" 2>/dev/null
		else
			echo "skip host mode with --isolate vm: no bin/vgpu (make vgpu)"
		fi
	else
		fail "building hostmode_test"
	fi

	# 5b. guest mode (/dev/vgpu ioctls, mmap, regions, SUBMIT, RECV) through
	# tests/fakedev.c, which plays the driver against the same backend
	unset VGPU_TRANSPORT
	if $CC $CFLAGS -fPIC -shared -I"$ROOT/protocol" -I"$ROOT/guest-driver/include" -o "$T/fakedev.so" \
		"$HERE/fakedev.c" -ldl -lpthread; then
		if FAKEDEV_SOCK=$SOCK VGPU_DEVICE=/dev/vgpu-fake LD_PRELOAD=$T/fakedev.so LD_LIBRARY_PATH=$DRV \
			timeout 120 "$T/hostmode_test" >"$T/guestmode.out" 2>&1; then
			pass "guest mode through a fake /dev/vgpu (tests/fakedev.c)"
		else
			fail "guest mode through a fake /dev/vgpu: $(grep -E 'FAIL|fakedev' "$T/guestmode.out" | head -3 | tr '\n' ' ')"
		fi
		# the same with rings in guest RAM (the fake plays their backend
		# side): calls without buffers must go on the ring
		if FAKEDEV_RING=1 FAKEDEV_SOCK=$SOCK VGPU_DEVICE=/dev/vgpu-fake LD_PRELOAD=$T/fakedev.so LD_LIBRARY_PATH=$DRV \
			VGPU_LOG=info timeout 120 "$T/hostmode_test" >"$T/guestring.out" 2>&1 &&
			grep -q "on rings in guest RAM" "$T/guestring.out" &&
			grep -qE "fakedev: [1-9][0-9]* frames on the ring" "$T/guestring.out"; then
			pass "guest mode on rings in guest RAM through the fake /dev/vgpu ($(grep -o 'fakedev: [0-9]* frames.*' "$T/guestring.out" | head -1 | cut -c10-))"
		else
			fail "guest mode on rings through a fake /dev/vgpu: $(grep -E 'FAIL|fakedev|ring' "$T/guestring.out" | head -3 | tr '\n' ' ')"
		fi
		# rings the backend ended (the process broke them): calls fail, no hang
		FAKEDEV_RING=broken FAKEDEV_SOCK=$SOCK VGPU_DEVICE=/dev/vgpu-fake LD_PRELOAD=$T/fakedev.so LD_LIBRARY_PATH=$DRV \
			timeout 60 "$T/hostmode_test" >"$T/guestring-broken.out" 2>&1
		rc=$?
		if [ $rc != 0 ] && [ $rc -lt 124 ] && grep -q "VGPU_IOC_RING_WAIT failed" "$T/guestring-broken.out"; then
			pass "guest mode on rings the backend ended: calls fail (exit $rc), no crash or hang"
		else
			fail "guest mode on rings the backend ended: exit $rc: $(tail -3 "$T/guestring-broken.out" | tr '\n' ' ')"
		fi
	else
		fail "building tests/fakedev.c"
	fi
	export VGPU_TRANSPORT=unix:$SOCK

	# 6. real nvcc output, on NVIDIA's runtime: shared (the library path finds
	# NVIDIA's libcudart.so.11.0 and our driver libraries in $DRV; the toolkit
	# installs NVIDIA's libcuda.so.1 in the default path, ours must come first)
	# and linked in (-cudart static, nvcc's default)
	NVCC=${NVCC:-$(command -v nvcc || true)}
	if [ -n "$NVCC" ]; then
		if "$NVCC" -cudart shared -o "$T/nvcc_prog" "$HERE/nvcc_prog.cu" 2>"$T/nvcc.log"; then
			if ! LD_LIBRARY_PATH=$DRV ldd "$T/nvcc_prog" | grep -q "libcudart.so.[0-9.]* => /"; then
				fail "nvcc -cudart shared program: no NVIDIA libcudart in the library path"
			elif LD_LIBRARY_PATH=$DRV timeout 60 "$T/nvcc_prog" --no-graphs >"$T/nvcc_prog.out" 2>&1; then
				pass "nvcc -cudart shared program (registration, launch, symbols, reset) on NVIDIA's libcudart and our libcuda.so.1, against sim (no graphs)"
			else
				fail "nvcc program: $(tail -3 "$T/nvcc_prog.out" | tr '\n' ' ')"
			fi
		else
			fail "nvcc could not build tests/nvcc_prog.cu (see $T/nvcc.log)"
		fi
		if "$NVCC" -cudart shared --default-stream per-thread -o "$T/nvcc_prog_ptds" "$HERE/nvcc_prog.cu" 2>>"$T/nvcc.log" &&
			LD_LIBRARY_PATH=$DRV timeout 60 "$T/nvcc_prog_ptds" --no-graphs >"$T/nvcc_prog_ptds.out" 2>&1; then
			pass "nvcc --default-stream per-thread program (_ptsz/_ptds entry points) against sim"
		else
			fail "nvcc per-thread-stream program: $(tail -3 "$T/nvcc_prog_ptds.out" 2>/dev/null | tr '\n' ' ')"
		fi
		# sm_90: a device-linked image has no PTX to JIT, and the sm_52 SASS of the
		# default arch runs on no 9.0 GPU (sim refuses it as the H100 does)
		if "$NVCC" -rdc=true -arch sm_90 -cudart shared -o "$T/nvcc_rdc" "$HERE/nvcc_rdc_main.cu" "$HERE/nvcc_rdc_helper.cu" 2>>"$T/nvcc.log"; then
			if LD_LIBRARY_PATH=$DRV timeout 60 "$T/nvcc_rdc" >"$T/nvcc_rdc.out" 2>&1; then
				pass "nvcc -rdc=true program (version-2 fatbin wrapper) against sim"
			else
				fail "nvcc -rdc program: $(tail -3 "$T/nvcc_rdc.out" | tr '\n' ' ')"
			fi
		else
			fail "nvcc could not build the -rdc test program (see $T/nvcc.log)"
		fi
		if "$NVCC" -cudart static -o "$T/nvcc_prog_static" "$HERE/nvcc_prog.cu" 2>>"$T/nvcc.log"; then
			if LD_LIBRARY_PATH=$DRV timeout 60 "$T/nvcc_prog_static" --no-graphs >"$T/nvcc_prog_static.out" 2>&1; then
				pass "nvcc -cudart static program: NVIDIA's runtime linked in, on our libcuda.so.1, against sim (no graphs)"
			else
				fail "NVIDIA's static runtime: $(tail -3 "$T/nvcc_prog_static.out" | tr '\n' ' ')"
			fi
		else
			fail "nvcc could not build tests/nvcc_prog.cu -cudart static (see $T/nvcc.log)"
		fi
		# a driver-API program loading module files
		if $CC $CFLAGS -o "$T/driver_prog" "$HERE/driver_prog.c" -L"$BUILD" -l:libcuda.so.1 -Wl,-rpath,"$BUILD"; then
			for kind in fatbin cubin ptx; do
				if "$NVCC" -$kind -arch sm_90 -o "$T/kernels.$kind" "$HERE/driver_kernels.cu" 2>>"$T/nvcc.log" &&
					LD_LIBRARY_PATH=$BUILD timeout 60 "$T/driver_prog" "$T/kernels.$kind" >"$T/driver_$kind.out" 2>&1; then
					pass "driver API: cuModuleLoad of an nvcc .$kind, launch, globals"
				else
					fail "driver API with .$kind: $(tail -2 "$T/driver_$kind.out" 2>/dev/null | tr '\n' ' ')"
				fi
			done
		else
			fail "building driver_prog"
		fi
		# context-independent libraries (cuLibrary*, cuKernel*), lazily and eagerly: no
		# round trip until a kernel is used (VGPU_STATS), an image with no code for the
		# GPU (sm_86 only) refused at its first kernel use, a CUkernel as a CUfunction
		if "$NVCC" -fatbin -arch sm_90 -o "$T/library_kernels.fatbin" "$HERE/library_kernels.cu" 2>>"$T/nvcc.log" &&
			"$NVCC" -fatbin -gencode arch=compute_86,code=sm_86 -o "$T/library_sm86.fatbin" \
				"$HERE/library_kernels.cu" 2>>"$T/nvcc.log" &&
			$CC $CFLAGS -DKERNELS_FATBIN="\"$T/library_kernels.fatbin\"" -DSM86_FATBIN="\"$T/library_sm86.fatbin\"" \
				-o "$T/library_test" "$HERE/library_test.c" -L"$BUILD" -l:libcuda.so.1 -ldl -lpthread -Wl,-rpath,"$BUILD"; then
			for mode in LAZY EAGER; do
				if CUDA_MODULE_LOADING=$mode VGPU_STATS=1 VGPU_LOG_FILE=$T/library_$mode.log LD_LIBRARY_PATH=$BUILD \
					timeout 60 "$T/library_test" --no-exec "$T/library_kernels.fatbin" >"$T/library_$mode.out" 2>&1; then
					pass "libraries, CUDA_MODULE_LOADING=$mode: loaded at first kernel use, kernels as functions (tests/library_test.c)"
				else
					fail "libraries ($mode): $(grep FAIL "$T/library_$mode.out" | head -3 | tr '\n' ' ')"
				fi
			done
		else
			fail "building tests/library_test.c (see $T/nvcc.log)"
		fi
	else
		echo "skip nvcc test: no nvcc"
	fi
	# 7. NVML, on the same backend: host mode (with nvidia-smi when it is
	# installed: Debian's non-free nvidia-smi, no kernel driver), guest mode
	NVML_CFLAGS="$CFLAGS -I$GL/src/nvml -I$GL/src/common -I$ROOT/protocol"
	SMI=$(command -v nvidia-smi || true)
	if $CC $NVML_CFLAGS -o "$T/nvml_test" "$HERE/nvml_test.c" -L"$BUILD" -l:libnvidia-ml.so.1 -l:libcuda.so.1 \
		-Wl,-rpath,"$BUILD"; then
		if LD_LIBRARY_PATH=$BUILD timeout 120 "$T/nvml_test" ${SMI:+--smi "$SMI"} >"$T/nvml.out" 2>&1; then
			pass "NVML in host mode (sim)${SMI:+, and nvidia-smi $(dpkg-query -W -f='${Version}' nvidia-smi 2>/dev/null) on it}"
		else
			fail "NVML in host mode: $(grep FAIL "$T/nvml.out" | head -3 | tr '\n' ' ')"
		fi
		[ -n "$SMI" ] || echo "skip nvidia-smi against our NVML: not installed (scripts/setup.sh installs Debian's)"
		unset VGPU_TRANSPORT
		if FAKEDEV_SOCK=$SOCK VGPU_DEVICE=/dev/vgpu-fake LD_PRELOAD=$T/fakedev.so LD_LIBRARY_PATH=$BUILD \
			timeout 120 "$T/nvml_test" >"$T/nvml-guest.out" 2>&1; then
			pass "NVML in guest mode through a fake /dev/vgpu"
		else
			fail "NVML in guest mode: $(grep -E 'FAIL|fakedev' "$T/nvml-guest.out" | head -3 | tr '\n' ' ')"
		fi
	else
		fail "building nvml_test"
	fi
	unset VGPU_TRANSPORT
	stop_server
else
	fail "could not start a sim backend (see $T/server.log)"
fi

# 7b. NVML against a backend with a memory cap: totals are the cap, used
# and free exact; with bin/vgpu, in a worker process (--isolate vm), where
# the VM's process table lives
if [ -x "$T/nvml_test" ]; then
	LIMIT=$((3 << 30))
	SOCK=$T/vgpu-limit.sock
	rm -f "$SOCK"
	bin=${VGPU_BIN:-$ROOT/bin/vgpu}
	how=
	if [ -x "$bin" ] && "$bin" serve -h 2>&1 | grep -q -- 'isolate'; then
		"$bin" serve --device sim --isolate vm --mem-limit $LIMIT --unix "$SOCK" >"$T/server-limit.log" 2>&1 &
		how=", in a worker (--isolate vm)"
	else
		"$T/simserve" -unix "$SOCK" -mem-limit $LIMIT >"$T/server-limit.log" 2>&1 &
	fi
	SERVER_PID=$!
	i=0
	while [ ! -S "$SOCK" ] && [ $i -lt 300 ] && kill -0 "$SERVER_PID" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
	if VGPU_TRANSPORT=unix:$SOCK LD_LIBRARY_PATH=$BUILD timeout 120 "$T/nvml_test" --mem-limit $LIMIT \
		${SMI:+--smi "$SMI"} >"$T/nvml-limit.out" 2>&1; then
		pass "NVML memory totals are the backend's --mem-limit ($((LIMIT >> 20)) MiB)$how"
	else
		fail "NVML with --mem-limit: $(grep FAIL "$T/nvml-limit.out" | head -3 | tr '\n' ' ') (see $T/server-limit.log)"
	fi
	stop_server
fi

# informational: ABI coverage of common programs
[ -d "$SHARED/abi" ] && "$ROOT/scripts/abi-coverage.sh" --summary 2>/dev/null

echo "guest-lib tests: $fails failure(s)"
[ $fails -eq 0 ]
