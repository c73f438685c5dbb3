package worker_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/hostmode"
	"github.com/vgpu-project/vgpu/backend/hostmode/hostmodetest"
	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/backend/worker"
	"github.com/vgpu-project/vgpu/protocol"
)

// helloAs says HELLO as vgpu.ko does for a file of /dev/vgpu that guest
// process pid opened (role driver, from a privileged port: connect's 1023).
func (g *guestProc) helloAs(pid uint32) device.Result {
	g.t.Helper()
	st, _, _, err := sessiontest.Do[protocol.HelloReq, protocol.HelloReply](g.c, protocol.OpHello,
		&protocol.HelloReq{Major: 1, Role: protocol.RoleDriver, PID: pid, Features: protocol.FeatureBatch}, nil)
	if err != nil && st == 0 {
		g.t.Fatalf("hello as guest pid %d: %v", pid, err)
	}
	return device.Result(st)
}

func (g *guestProc) ping() error {
	f, err := g.c.Call(protocol.OpPing, 0, nil, nil)
	if err == nil && f.Status != 0 {
		err = fmt.Errorf("ping: %v", device.Result(f.Status))
	}
	return err
}

// workersOf returns vm's live workers.
func workersOf(m *worker.Manager, vm string) []worker.WorkerStatus {
	var out []worker.WorkerStatus
	for _, w := range m.Status().Workers {
		if w.VM == vm {
			out = append(out, w)
		}
	}
	return out
}

func vmShare(m *worker.Manager, vm string) worker.VMShare {
	for _, v := range m.Status().VMs {
		if v.VM == vm {
			return v
		}
	}
	return worker.VMShare{}
}

// TestConnectionFloodTakesOneSlot reproduces the H100 reliability run's
// failure (bench/results/2026-11-25-h100-reliability): one guest process
// opened /dev/vgpu ~1000 times and took all of its VM's --max-processes
// worker slots, so the next program was refused. The connections of one
// guest process now share its worker: the flood holds one slot, another
// guest process is served beside it, a third is refused only because
// MaxPerVM is 2 (slots count processes), one connection's end leaves the
// process's others served, and when the flood ends its slot serves the
// next process.
func TestConnectionFloodTakesOneSlot(t *testing.T) {
	m := manager(t, "process")
	m.MaxPerVM = 2
	const flood = 24
	var conns []*guestProc
	for i := 0; i < flood; i++ {
		g := connect(t, m, "vm-f")
		if st := g.helloAs(77); st != 0 {
			t.Fatalf("connection %d of guest pid 77: %v", i, st)
		}
		conns = append(conns, g)
	}
	ws := workersOf(m, "vm-f")
	if len(ws) != 1 || ws[0].Process != "guest pid 77" || ws[0].Sessions != flood || vmShare(m, "vm-f").Workers != 1 {
		t.Fatalf("guest pid 77's %d connections: workers %+v, VM %+v; want one worker with every session", flood, ws, vmShare(m, "vm-f"))
	}

	other := connect(t, m, "vm-f")
	if st := other.helloAs(78); st != 0 {
		t.Fatalf("another guest process beside the flood: %v", st)
	}
	third := connect(t, m, "vm-f")
	if st := third.helloAs(79); st != device.ErrDeviceUnavailable {
		t.Fatalf("a third guest process with MaxPerVM 2: %v, want CUDA_ERROR_DEVICE_UNAVAILABLE", st)
	}
	if err := <-third.served; !errors.Is(err, worker.ErrTooManyProcesses) {
		t.Fatalf("the third process: %v, want ErrTooManyProcesses", err)
	}

	conns[0].end()
	if err := conns[1].ping(); err != nil {
		t.Fatalf("guest pid 77's other connections after one ended: %v", err)
	}
	if n := len(workersOf(m, "vm-f")); n != 2 {
		t.Fatalf("workers of vm-f after one of pid 77's connections ended: %d, want 2", n)
	}
	for _, g := range conns[1:] {
		g.end()
	}
	next := connect(t, m, "vm-f")
	if st := next.helloAs(79); st != 0 {
		t.Fatalf("a process after the flood ended: %v", st)
	}
	if err := other.ping(); err != nil {
		t.Fatalf("guest pid 78 after the flood: %v", err)
	}
}

// TestNewProcessWaitsForASlot: a new guest process of a VM at MaxPerVM
// waits (up to SlotWait) for one of the VM's processes to end, as the
// reliability soak did right after the flood, instead of being refused.
func TestNewProcessWaitsForASlot(t *testing.T) {
	m := manager(t, "process")
	m.MaxPerVM, m.SlotWait = 1, time.Minute // ended below, long before
	a := connect(t, m, "vm-w")
	if st := a.helloAs(10); st != 0 {
		t.Fatal(st)
	}
	b := connect(t, m, "vm-w")
	got := make(chan device.Result, 1)
	go func() { got <- b.helloAs(11) }()
	testwait.For(t, 10*time.Second, "guest pid 11 waiting for a slot", func() bool { return vmShare(m, "vm-w").Waiting == 1 })
	a.end()
	select {
	case st := <-got:
		if st != 0 {
			t.Fatalf("the waiting process after a slot freed: %v", st)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting process was not served after a slot freed")
	}
	if ws := workersOf(m, "vm-w"); len(ws) != 1 || ws[0].Process != "guest pid 11" {
		t.Fatalf("vm-w's workers: %+v", ws)
	}
}

// Identities are taken from what only the guest kernel can say: a HELLO of
// role driver from a privileged port. A library's HELLO, or a driver's from
// an unprivileged port, is a process of its own whatever PID it names.
func TestUnvouchedConnectionsAreProcessesOfTheirOwn(t *testing.T) {
	m := manager(t, "process")
	for _, port := range []uint32{1023, 4000} {
		bc, gc := sessiontest.Pipe(3, port, nil)
		bc.Name = "vm-u"
		go func() { _ = m.ServeConn(context.Background(), bc, uint64(port)) }()
		c := sessiontest.NewClient(gc)
		t.Cleanup(func() { c.Close() })
		role := protocol.RoleLibrary
		if port >= 1024 {
			role = protocol.RoleDriver
		}
		if st, _, _, err := sessiontest.Do[protocol.HelloReq, protocol.HelloReply](c, protocol.OpHello, &protocol.HelloReq{Major: 1, Role: role, PID: 5}, nil); err != nil || st != 0 {
			t.Fatalf("port %d: %v %v", port, err, device.Result(st))
		}
	}
	if ws := workersOf(m, "vm-u"); len(ws) != 2 || ws[0].Process != "" || ws[1].Process != "" {
		t.Fatalf("two unvouched connections naming PID 5: %+v, want two workers of their own", ws)
	}
}

// In host mode a client process's connections share its worker too: the
// process is the socket peer's PID (SO_PEERCRED), here this test's.
func TestHostModeConnectionsOfOneProcessShareAWorker(t *testing.T) {
	m := manager(t, "process")
	path := filepath.Join(t.TempDir(), "vgpu.sock")
	ln, err := hostmode.Listen(path, hostmode.Options{MaxShares: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for id := uint64(1); id <= 3; id++ {
		go func() {
			conn, err := ln.Accept()
			if err == nil {
				_ = m.ServeConn(context.Background(), conn, id)
			}
		}()
		c := hostmodetest.Dial(t, path)
		c.Hello(t)
	}
	ws := workersOf(m, "unix:"+path)
	if len(ws) != 1 || ws[0].Sessions != 3 || ws[0].Process == "" {
		t.Fatalf("three host-mode connections of one process: %+v, want one worker", ws)
	}
}

// guest-attack.py's flood: root in the guest connects from every
// privileged port and pings without a HELLO. Frames before HELLO are
// answered by the manager (CUDA_ERROR_NOT_INITIALIZED, as a session would)
// without a worker, so such connections take no slot; one that says HELLO
// afterwards is served as any other.
func TestFramesBeforeHelloTakeNoWorker(t *testing.T) {
	m := manager(t, "process")
	m.MaxPerVM = 1
	var conns []*guestProc
	for i := 0; i < 8; i++ {
		g := connect(t, m, "vm-n")
		if err := g.ping(); err == nil || !strings.Contains(err.Error(), "NOT_INITIALIZED") {
			t.Fatalf("ping before HELLO through the manager: %v, want CUDA_ERROR_NOT_INITIALIZED", err)
		}
		conns = append(conns, g)
	}
	if n := len(workersOf(m, "vm-n")); n != 0 {
		t.Fatalf("connections that said no HELLO hold %d workers", n)
	}
	g := conns[0]
	if st := g.helloAs(40); st != 0 {
		t.Fatalf("HELLO after a ping: %v", st)
	}
	if err := g.ping(); err != nil {
		t.Fatalf("ping after HELLO: %v", err)
	}
	if ws := workersOf(m, "vm-n"); len(ws) != 1 || ws[0].Process != "guest pid 40" {
		t.Fatalf("vm-n's workers: %+v", ws)
	}
}
