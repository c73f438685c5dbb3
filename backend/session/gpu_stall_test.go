//go:build gpu

package session_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/session"
	"github.com/vgpu-project/vgpu/protocol"
)

// retPTX is a kernel that does nothing, as the field fuzzer's.
const retPTX = `.version 7.0
.target sm_52
.address_size 64
.visible .entry idle() { ret; }
`

// TestGPUHugeLaunchTimesOut checks what the H100 field fuzzer's "hang"
// was (bench/results/2026-11-25-h100-fuzz): a valid launch of 2^31-1 x
// 65535 blocks that runs for hours, and a synchronous copy behind it that
// waits as long. With the call deadline the copy is answered
// CUDA_ERROR_LAUNCH_TIMEOUT. The kernel goes on running in this process
// until it exits (a worker process exits at once: TestCallTimeoutEndsWorker),
// so run this test alone:
//
//	cd backend/session && VGPU_GPU_HUGE=1 ../../.gpu/session-gpu.test -test.v -test.run GPUHugeLaunch
func TestGPUHugeLaunchTimesOut(t *testing.T) {
	if os.Getenv("VGPU_GPU_HUGE") == "" {
		t.Skip("leaves a kernel running for hours in this process: set VGPU_GPU_HUGE=1 and run it alone")
	}
	e := start(t, opts{drv: gpuDriver(t), callTimeout: 5 * time.Second})
	p := e.alloc(4096)
	img := []byte(retPTX)
	mod, _ := must[protocol.ModuleLoadReq, protocol.ModuleLoadReply](e, protocol.OpModuleLoad, protocol.ModuleLoadReq{Kind: protocol.ImagePTX, Image: protocol.BufRef{Kind: protocol.BufInline, Len: uint64(len(img))}}, img)
	fn, _ := must[protocol.NameReq, protocol.FunctionReply](e, protocol.OpModuleGetFunction, protocol.NameReq{Module: mod.Module, NameLen: 4}, []byte("idle"))
	l := protocol.LaunchReq{Func: fn.Func, GridX: 1<<31 - 1, GridY: 65535, GridZ: 1, BlockX: 32, BlockY: 1, BlockZ: 1}
	must[protocol.LaunchReq, protocol.Empty](e, protocol.OpLaunchKernel, l, nil)
	time.Sleep(2 * time.Second)
	st, _, _ := do[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamQuery, protocol.HandleReq{}, nil)
	t.Logf("stream query 2 s after the launch: %d (600: CUDA_ERROR_NOT_READY, still running)", st)
	start := time.Now()
	wantStatus(t, "a synchronous copy behind the launch", e.htod(p, []byte("behind")), session.ErrLaunchTimeout)
	t.Logf("answered CUDA_ERROR_LAUNCH_TIMEOUT after %v (call deadline 5 s)", time.Since(start).Round(time.Millisecond))
	// The session cannot end while its kernel runs; exiting ends both.
	fmt.Println("PASS: TestGPUHugeLaunchTimesOut (exiting to end the kernel)")
	os.Exit(0)
}
