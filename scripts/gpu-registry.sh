#!/usr/bin/env bash
# gpu-registry.sh CARRY - the call families forwarded through the call
# registry (issue 16), on the GPU machine (about 1 minute):
#
#   1. the backend's session tests against the real driver
#      (session-gpu.test: TestGPUStreamCapture (and TestGPUStreamCaptureInvalidated*:
#      a refused call invalidates its capture, on a joined stream too), TestGPUGraphsReleased,
#      TestGPUMemAllocAsync, TestGPUVirtualMemory*, TestGPUArrays, TestGPUTextureObjects,
#      TestGPUGraphNodes, TestGPUGraphNodeParams, TestGPUGraphKernelNodeAttributes, TestGPUGraphEdges,
#      TestGPUGraphNodeEnabledAndClone,
#      TestGPUGraphEventNodes, TestGPUGraphChildNodes, TestGPUCaptureCopiesPinned, TestGPUMemPools, TestGPUStreamAttributes,
#      TestGPULaunchKernelAttrs): capture records and a graph replays per
#      launch, guest memory and host functions refused in a capture and
#      the capture invalidated (END_CAPTURE answers 901),
#      capture/graphs released with the session, stream-ordered
#      allocation tracked, capped and freed; the virtual-memory API's
#      ranges, memory and mappings (refusals, release while mapped, the
#      session's end); CUDA arrays and 3D copies (sub-boxes, 3D, refusals), texture and surface objects;
#      graphs built node by node (memcpy nodes on pinned guest memory,
#      memset, kernel, empty nodes; listing, types, refusals), node parameters
#      read and set on a graph or its executable graph, kernel node attributes, edges added, removed
#      and listed after the nodes, event record/wait and child graph nodes,
#      and copies of
#      pinned memory captured into a graph; memory pools (created pools
#      capped with the VM, attributes, the release threshold kept by the
#      session, refusals); stream attributes; launch attributes and
#      cooperative launches (one block more than resident: 720);
#   2. if a C compiler is there: guest-lib/tests/hostmode_test.c's
#      graph (NVIDIA's runtime capturing: a refused copy invalidates the
#      capture, 901 at its end), driver_capture, driver_graph_nodes, driver_graph_node_params, driver_graph_edges, driver_graph_event_child, driver_mempool, driver_vmm, driver_arrays, driver_stream_attrs,
#      driver_ctx_params and driver_pointer_attrs through our libcuda.so.1 against
#      `vgpu serve --device cuda` in host mode.
#
# CARRY is scripts/gpu-carry.sh's folder (vgpu, lib/, session-gpu.test).
# Everything lands under $OUT; the last lines are a PASS/FAIL summary.
set -uo pipefail
carry=$(realpath "${1:-.gpu}")
out=${OUT:-/tmp/vgpu-out}
mkdir -p "$out"
sock=/tmp/vgpu-registry.sock
dev=${DEVICE:-cuda} # DEVICE=sim: a dry run of the host-mode half without a GPU
status=()

step() { echo "== $(date -u +%H:%M:%S) $*"; }
result() { status+=("$1 $2"); echo "$1 $2"; }

step "backend: session tests on the GPU"
if [[ -x $carry/session-gpu.test ]]; then
	(cd backend/session && timeout 300 "$carry/session-gpu.test" -test.v -test.count=1 \
		-test.run 'TestGPUStreamCapture|TestGPUGraphsReleased|TestGPUMemAllocAsync|TestGPUVirtualMemory|TestGPUArrays|TestGPUTextureObjects|TestGPUGraphNodes|TestGPUGraphNodeParams|TestGPUGraphKernelNodeAttributes|TestGPUGraphEdges|TestGPUGraphNodeEnabledAndClone|TestGPUGraphEventNodes|TestGPUGraphChildNodes|TestGPUCaptureCopiesPinned|TestGPUMemPools|TestGPUStreamAttributes|TestGPULaunchKernelAttrs') >"$out/gotest-registry.log" 2>&1
	rc=$?
	grep -E '^(--- |ok|FAIL|PASS)|\.go:[0-9]+:' "$out/gotest-registry.log" | head -40
	[[ $rc == 0 ]] && result PASS "session: capture, graphs (node by node too), stream-ordered allocation, pools, virtual memory, arrays, stream and launch attributes on the GPU" ||
		result FAIL "session tests (rc $rc): $out/gotest-registry.log"
else
	result FAIL "no $carry/session-gpu.test: run scripts/gpu-carry.sh first"
fi

step "host mode: hostmode_test driver_* (capture, graph nodes, pools, VMM, arrays, stream attributes, contexts with params, pointer attributes) against vgpu serve --device $dev"
cc=$(command -v cc || command -v gcc || true)
if [[ -z $cc ]]; then
	result SKIP "no C compiler on this machine: host-mode C tests not run"
else
	gl=guest-lib
	# NVIDIA's libcudart.so.13 (the toolkit's) on vgpu's libcuda.so.1
	nvrt=/usr/local/cuda/lib64/libcudart.so.13
	if $cc -std=c11 -D_GNU_SOURCE -O1 -g -I$gl/src/common -I$gl/src/cuda \
		-Iprotocol -I$gl/generated -o "$out/hostmode_test" $gl/tests/hostmode_test.c "$nvrt" \
		-L"$carry/lib" -l:libcuda.so.1 -l:libnvidia-ml.so.1 -ldl -lpthread \
		-Wl,-rpath,"$carry/lib" 2>"$out/hostmode-build.log"; then
		rm -f "$sock"
		"$carry/vgpu" serve --device "$dev" --unix "$sock" --log-level info >"$out/serve.log" 2>&1 &
		srv=$!
		for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.1; done
		for t in graph driver_capture driver_graph_nodes driver_graph_node_params driver_graph_edges driver_graph_event_child driver_mempool driver_vmm driver_arrays driver_stream_attrs driver_ctx_params driver_pointer_attrs; do
			if VGPU_TRANSPORT=unix:$sock LD_LIBRARY_PATH=$carry/lib:/usr/local/cuda/lib64 timeout 120 "$out/hostmode_test" $t >"$out/hostmode-$t.log" 2>&1; then
				result PASS "host mode ($dev): $t"
			else
				result FAIL "host mode ($dev): $t ($(tail -3 "$out/hostmode-$t.log" | tr '\n' ' '))"
			fi
		done
		kill $srv; wait $srv 2>/dev/null
	else
		result FAIL "building hostmode_test: $out/hostmode-build.log"
	fi
fi

step "summary"
printf '%s\n' "${status[@]}"
for s in "${status[@]}"; do [[ $s == FAIL* ]] && exit 1; done
exit 0
