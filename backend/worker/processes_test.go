package worker_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/backend/worker"
	"github.com/vgpu-project/vgpu/protocol"
)

// helloPID opens g's session as guest process pid (a library's HELLO).
func (g *guestProc) helloPID(pid uint32) {
	g.t.Helper()
	st, _, _, err := sessiontest.Do[protocol.HelloReq, protocol.HelloReply](g.c, protocol.OpHello, &protocol.HelloReq{Major: 1, Features: protocol.FeatureBatch, PID: pid, Role: protocol.RoleLibrary}, nil)
	if err != nil || st != 0 {
		g.t.Fatalf("hello as pid %d: %v %v", pid, err, device.Result(st))
	}
}

// processes returns what g's NVML would list on device 0
// (OpDeviceGetProcesses).
func (g *guestProc) processes() []protocol.ProcessInfo {
	g.t.Helper()
	st, rep, tail, err := sessiontest.Do[protocol.DeviceReq, protocol.ProcessListReply](g.c, protocol.OpDeviceGetProcesses, &protocol.DeviceReq{}, nil)
	if err != nil || st != 0 || rep.Count != rep.Total || len(tail) != int(rep.Count)*16 {
		g.t.Fatalf("process list: %v %v, count %d total %d, %d tail bytes", err, device.Result(st), rep.Count, rep.Total, len(tail))
	}
	out := make([]protocol.ProcessInfo, rep.Count)
	for i := range out {
		out[i], _, _ = protocol.Decode[protocol.ProcessInfo](tail[i*16:])
	}
	return out
}

func wantProcesses(t *testing.T, what string, got []protocol.ProcessInfo, want ...protocol.ProcessInfo) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: processes %+v, want %+v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: processes %+v, want %+v", what, got, want)
		}
	}
}

// servingWorker returns the PID of the one worker serving a session of vm
// not in known.
func servingWorker(t *testing.T, m *worker.Manager, vm string, known ...int) int {
	t.Helper()
	pid := 0
	for _, w := range m.Status().Workers {
		if w.VM != vm || w.Sessions == 0 {
			continue
		}
		mine := false
		for _, k := range known {
			mine = mine || k == w.PID
		}
		if !mine {
			if pid != 0 {
				t.Fatalf("two new workers of %s: %+v", vm, m.Status().Workers)
			}
			pid = w.PID
		}
	}
	if pid == 0 {
		t.Fatalf("no new worker of %s: %+v", vm, m.Status().Workers)
	}
	return pid
}

// TestProcessListSpansWorkers: with a worker per guest process, NVML's
// process list of a VM lists the VM's processes in all its workers (with
// the memory each holds) and never another VM's; a stuck worker delays the
// list by ProcessesTimeout at most and is left out, a dead one is left out
// at once.
func TestProcessListSpansWorkers(t *testing.T) {
	m := manager(t, "process")
	const mib = 1 << 20
	a := connect(t, m, "vm-x")
	a.helloPID(101)
	wa := servingWorker(t, m, "vm-x")
	b := connect(t, m, "vm-x")
	b.helloPID(202)
	wb := servingWorker(t, m, "vm-x", wa)
	c := connect(t, m, "vm-y")
	c.helloPID(303)
	wantProcesses(t, "a VM with no process on the GPU yet", a.processes())
	for _, x := range []struct {
		g *guestProc
		n uint64
	}{{a, 8 * mib}, {b, 4 * mib}, {c, 16 * mib}} {
		if _, st := x.g.alloc(x.n); st != 0 {
			t.Fatalf("alloc: %v", st)
		}
	}
	ab := []protocol.ProcessInfo{{PID: 101, UsedMemory: 8 * mib}, {PID: 202, UsedMemory: 4 * mib}}
	wantProcesses(t, "vm-x seen from a", a.processes(), ab...)
	wantProcesses(t, "vm-x seen from b", b.processes(), ab...)
	wantProcesses(t, "vm-y seen from c", c.processes(), protocol.ProcessInfo{PID: 303, UsedMemory: 16 * mib})

	// b's worker stuck: a's list comes without it, in bounded time.
	if err := syscall.Kill(wb, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got := a.processes()
	took := time.Since(start)
	syscall.Kill(wb, syscall.SIGCONT)
	wantProcesses(t, "vm-x from a while b's worker is stopped", got, ab[0])
	if took < worker.ProcessesTimeout || took > worker.ProcessesTimeout+5*time.Second {
		t.Fatalf("a's list with b's worker stopped took %v, want about %v", took, worker.ProcessesTimeout)
	}
	wantProcesses(t, "vm-x from a after b's worker goes on", a.processes(), ab...)

	// b's worker killed: a's list leaves it out; the slot of vm-x is free.
	if err := syscall.Kill(wb, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.served:
	case <-time.After(10 * time.Second):
		t.Fatal("b's session still served after its worker died")
	}
	wantProcesses(t, "vm-x from a after b's worker died", a.processes(), ab[0])
	c.end()
	a.end()
}

// TestProcessListSpansPerVMWorkers: with a worker per VM the VM's list
// still spans its workers: a poisoned worker, which serves its last
// sessions, and the fresh one its VM's new sessions go to.
func TestProcessListSpansPerVMWorkers(t *testing.T) {
	m := manager(t, "poison")
	a := connect(t, m, "vm-v")
	a.helloPID(11)
	first := servingWorker(t, m, "vm-v")
	testwait.For(t, 10*time.Second, "the first worker poisoned", func() bool {
		ws := m.Status().Workers
		return len(ws) == 1 && ws[0].Poisoned
	})
	b := connect(t, m, "vm-v")
	b.helloPID(22)
	servingWorker(t, m, "vm-v", first)
	o := connect(t, m, "vm-w")
	o.helloPID(33)
	for _, g := range []*guestProc{a, b, o} {
		if _, st := g.alloc(1 << 20); st != 0 {
			t.Fatalf("alloc: %v", st)
		}
	}
	both := []protocol.ProcessInfo{{PID: 11, UsedMemory: 1 << 20}, {PID: 22, UsedMemory: 1 << 20}}
	wantProcesses(t, "vm-v from the fresh worker", b.processes(), both...)
	wantProcesses(t, "vm-v from the poisoned worker", a.processes(), both...)
	wantProcesses(t, "vm-w", o.processes(), protocol.ProcessInfo{PID: 33, UsedMemory: 1 << 20})
}
