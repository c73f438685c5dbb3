package worker_test

import (
	"context"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/backend/worker"
	"github.com/vgpu-project/vgpu/protocol"
)

// helloAsUser says HELLO as vgpu.ko does for a file of /dev/vgpu that
// guest process pid of guest user uid opened.
func (g *guestProc) helloAsUser(pid, uid uint32) device.Result {
	g.t.Helper()
	st, _, _, err := sessiontest.Do[protocol.HelloReq, protocol.HelloReply](g.c, protocol.OpHello,
		&protocol.HelloReq{Major: 1, Role: protocol.RoleDriver, PID: pid, UID: uid, Features: protocol.FeatureBatch}, nil)
	if err != nil && st == 0 {
		g.t.Fatalf("hello as guest pid %d uid %d: %v", pid, uid, err)
	}
	return device.Result(st)
}

// connectFrom is connect from guest port port.
func connectFrom(t *testing.T, m *worker.Manager, vm string, port uint32, id uint64) *guestProc {
	t.Helper()
	bc, gc := sessiontest.Pipe(3, port, nil)
	bc.Name = vm
	g := &guestProc{t: t, c: sessiontest.NewClient(gc), served: make(chan error, 1)}
	go func() { g.served <- m.ServeConn(context.Background(), bc, id) }()
	t.Cleanup(func() { g.c.Close() })
	return g
}

// TestProcessSlotsPerGuestUser: one guest user cannot take all of its VM's
// process slots (issue 17: any guest user could deny the VM's others the
// GPU; vgpu.ko's cap on open files per user, 64, is above the VM's 32
// slots). vgpu.ko sends the opener's uid in HELLO; a user other than root
// holds at most MaxPerUser slots, and such users leave RootReserve free.
func TestProcessSlotsPerGuestUser(t *testing.T) {
	m := manager(t, "process")
	m.MaxPerVM, m.MaxPerUser, m.RootReserve = 5, 2, 1
	want := func(g *guestProc, pid, uid uint32, st device.Result) {
		t.Helper()
		if got := g.helloAsUser(pid, uid); got != st {
			t.Fatalf("guest pid %d of uid %d: %v, want %v", pid, uid, got, st)
		}
	}
	a1 := connect(t, m, "vm-u")
	want(a1, 11, 1000, 0)
	want(connect(t, m, "vm-u"), 12, 1000, 0)
	want(connect(t, m, "vm-u"), 13, 1000, device.ErrDeviceUnavailable) // uid 1000 holds its 2
	want(connect(t, m, "vm-u"), 21, 1001, 0)
	want(connect(t, m, "vm-u"), 22, 1001, 0)
	want(connect(t, m, "vm-u"), 31, 1002, device.ErrDeviceUnavailable) // only root's reserve is left
	want(connect(t, m, "vm-u"), 1, 0, 0)                               // root takes it
	// A second connection of a process that has its slot is not a new one.
	a1b := connect(t, m, "vm-u")
	want(a1b, 11, 1000, 0)
	// Another VM's users are not this VM's.
	want(connect(t, m, "vm-other"), 11, 1000, 0)
	// One of uid 1000's processes ends: its slot is the next user's.
	a1.end()
	a1b.end()
	want(connect(t, m, "vm-u"), 31, 1002, 0)
	users := map[string]int{}
	for _, w := range workersOf(m, "vm-u") {
		users[w.User]++
	}
	if users["guest uid 1000"] != 1 || users["guest uid 1001"] != 2 || users["guest uid 1002"] != 1 || users[""] != 1 {
		t.Fatalf("slots per user: %v", users)
	}
}

// Connections from unprivileged guest ports (a guest program that
// bypasses vgpu.ko) count as one user together.
func TestUnprivilegedPortsAreOneUser(t *testing.T) {
	m := manager(t, "process")
	m.MaxPerVM, m.MaxPerUser = 8, 2
	for i, want := range []device.Result{0, 0, device.ErrDeviceUnavailable} {
		g := connectFrom(t, m, "vm-p", 40000+uint32(i), 9000+uint64(i))
		st, _, _, err := sessiontest.Do[protocol.HelloReq, protocol.HelloReply](g.c, protocol.OpHello,
			&protocol.HelloReq{Major: 1, Role: protocol.RoleDriver, PID: 50 + uint32(i), Features: protocol.FeatureBatch}, nil)
		if device.Result(st) != want || (err != nil && st == 0) {
			t.Fatalf("unprivileged connection %d: %v %v, want %v", i, err, device.Result(st), want)
		}
	}
	// Root's own connections (a privileged port) are not that user's.
	connect(t, m, "vm-p").helloAs(77)
}
