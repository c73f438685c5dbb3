package worker_test

import (
	"time"

	"testing"

	"github.com/vgpu-project/vgpu/backend/budget"
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/protocol"
)

func (g *guestProc) streamCreate() device.Result {
	g.t.Helper()
	st, _, _, err := sessiontest.Do[protocol.StreamCreateReq, protocol.HandleReply](g.c, protocol.OpStreamCreate, &protocol.StreamCreateReq{}, nil)
	if err != nil {
		g.t.Fatal(err)
	}
	return device.Result(st)
}

// TestVMBudgetSpansProcessWorkers: with a worker per guest process, a VM's
// bounds (here its objects: streams, events, modules, allocations) hold
// for all of its workers together, not for each. The manager keeps the
// VM's level; each worker leases from it. Before, every worker had a VM
// level of its own, and 32 processes held 32 times the VM's bound.
func TestVMBudgetSpansProcessWorkers(t *testing.T) {
	m := manager(t, "process")
	var b budget.Bounds
	b.VM[budget.Objects] = 100
	m.Bounds = &b
	a, c := connect(t, m, "vm-b"), connect(t, m, "vm-b")
	if st := a.helloAs(101); st != 0 {
		t.Fatal(st)
	}
	if st := c.helloAs(102); st != 0 {
		t.Fatal(st)
	}
	if n := len(workersOf(m, "vm-b")); n != 2 {
		t.Fatalf("%d workers for two guest processes", n)
	}
	// Each session's first objects are its own (budget reserve); the rest
	// are the VM's, whichever worker holds them.
	const reserve = 64
	for i := 0; i < reserve+60; i++ {
		if st := a.streamCreate(); st != 0 {
			t.Fatalf("process 101, stream %d: %v", i, st)
		}
	}
	made := 0
	for ; made < reserve+100; made++ {
		if st := c.streamCreate(); st != 0 {
			if st != device.ErrOutOfMemory {
				t.Fatalf("process 102 over the VM's bound: %v, want CUDA_ERROR_OUT_OF_MEMORY", st)
			}
			break
		}
	}
	if made != reserve+40 {
		t.Fatalf("process 102 made %d streams beside process 101's %d; the VM's bound allows %d", made, reserve+60, reserve+40)
	}
	if got := vmShare(m, "vm-b").Budget.Used["objects"]; got != 100 {
		t.Fatalf("the manager's VM level holds %d objects, want 100", got)
	}
	// Process 101 ends: its lease comes back to the VM.
	a.c.Close()
	testwait.For(t, 20*time.Second, "process 101's lease given back", func() bool { return vmShare(m, "vm-b").Budget.Used["objects"] <= 40+2 })
	if st := c.streamCreate(); st != 0 {
		t.Fatalf("after process 101 ended: %v", st)
	}
}
