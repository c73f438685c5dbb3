package worker_test

import (
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/backend/session"
	"github.com/vgpu-project/vgpu/protocol"
)

// A call that waits for the device past the call deadline (a kernel that
// does not end) is answered CUDA_ERROR_LAUNCH_TIMEOUT, and the worker
// exits, which ends its context and the kernel; the VM's next connection
// gets a fresh worker. Before, the guest waited for ever (the H100 field
// fuzzer's "hang", bench/results/2026-11-25-h100-fuzz).
func TestCallTimeoutEndsWorker(t *testing.T) {
	m := manager(t, "stall")
	g := connect(t, m, "vm-s")
	g.hello(protocol.FeatureHostFunc)
	p, st := g.alloc(4096)
	if st != 0 {
		t.Fatal(st)
	}
	pid := workersOf(m, "vm-s")[0].PID
	launch := g.c.ID()
	ch := g.c.Expect(launch)
	if err := g.c.Send(protocol.AppendFrame(nil, protocol.NewHeader(protocol.OpHostFuncLaunch, launch), protocol.Bytes(&protocol.HostFuncReq{CallbackID: 9}), nil)); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-ch:
		if f.Status != 0 {
			t.Fatalf("host function launch: %v", device.Result(f.Status))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reply to the host function launch")
	}
	req := protocol.MemcpyHtoDReq{Dst: p, Src: protocol.BufRef{Kind: protocol.BufInline, Len: 8}}
	f, err := g.c.Call(protocol.OpMemcpyHtoD, 0, append(protocol.Bytes(&req), "blocked!"...), nil)
	if err != nil || device.Result(f.Status) != session.ErrLaunchTimeout {
		t.Fatalf("a copy behind a stream that does not move: %v %v, want CUDA_ERROR_LAUNCH_TIMEOUT", err, device.Result(f.Status))
	}
	testwait.For(t, 20*time.Second, "the worker's exit", func() bool {
		for _, e := range m.Status().Exits {
			if e.PID == pid {
				return true
			}
		}
		return false
	})
	g2 := connect(t, m, "vm-s")
	g2.hello(0)
	if err := g2.ping(); err != nil {
		t.Fatalf("the VM's next connection: %v", err)
	}
	if w := workersOf(m, "vm-s"); len(w) != 1 || w[0].PID == pid {
		t.Fatalf("workers after the timeout: %+v", w)
	}
}
