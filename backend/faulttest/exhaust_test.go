package faulttest_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/budget"
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/backend/engine"
	"github.com/vgpu-project/vgpu/backend/hostmode"
	"github.com/vgpu-project/vgpu/backend/hostmode/hostmodetest"
	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/backend/server"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/protocol"
	"golang.org/x/sys/unix"
)

// Resource exhaustion, one resource at a time (issue 20, items 3-5): an
// attacker takes all it may of one resource; it gets the right error
// (OUT_OF_MEMORY for what the backend ran short of), another VM's client
// keeps working, and everything comes back when the attacker leaves, so
// a new client gets the whole bound again.

// tight returns default bounds with one resource's levels set (client,
// VM, process) and no reserve for it.
func tight(r budget.Resource, client, vm, global int64) *budget.Bounds {
	b := budget.DefaultBounds(budget.Facts{NoFile: 1 << 16, MaxMapCount: 65530, MaxFrame: 2 << 20})
	b.Client[r], b.VM[r], b.Global[r], b.Reserve[r] = client, vm, global, 0
	return &b
}

func newBoundedBackend(t *testing.T, b *budget.Bounds) *backend {
	t.Helper()
	drv, err := sim.New(sim.Config{Devices: 1, MemBytes: simMem})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Driver: drv, Engine: engine.Auto, Bounds: b, AllowUnprivilegedSegments: true,
		Limits: protocol.Limits{MaxPayload: 1 << 20, MaxSegments: 4096}, Version: "faulttest"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	be := &backend{t: t, drv: drv, srv: srv, ctx: ctx}
	t.Cleanup(func() {
		cancel()
		testwait.For(t, 10*time.Second, "every session ended", func() bool { return len(srv.Status().Sessions) == 0 })
		be.wg.Wait()
		drv.Close()
	})
	return be
}

// drained waits until the process's pool holds nothing of r.
func (b *backend) drained(r budget.Resource) {
	b.t.Helper()
	testwait.For(b.t, 10*time.Second, "the backend to get back every "+r.String(), func() bool { return b.srv.Pool().Used(r) == 0 })
}

func status(f protocol.Frame) device.Result { return device.Result(f.Status) }

func TestExhaustSessions(t *testing.T) {
	b := newBoundedBackend(t, tight(budget.Sessions, 0, 3, 5))
	var a []*guest
	for i := 0; i < 3; i++ {
		a = append(a, b.connect("vm-a", 1023, nil))
	}
	// The fourth connection of vm-a is closed at once; the client sees the
	// connection end at HELLO.
	bc, gc := sessiontest.Pipe(3, 1023, nil)
	bc.Name = "vm-a"
	refused := make(chan error, 1)
	go func() { refused <- b.srv.ServeConn(b.ctx, bc) }()
	if _, err := sessiontest.NewClient(gc).Hello(); err == nil {
		t.Fatalf("a connection over the VM's bound: %v", err)
	}
	var ex *budget.Exhausted
	if err := <-refused; !errors.As(err, &ex) || ex.Resource != budget.Sessions {
		t.Fatalf("refusal: %v", err)
	}
	// Another VM still has the process's last two.
	other := []*guest{b.connect("vm-b", 1023, nil), b.connect("vm-b", 1023, nil)}
	other[1].roundTrip(1)
	for _, g := range a {
		g.close()
	}
	b.connect("vm-a", 1023, nil).roundTrip(2)
	if b.srv.Status().RefusedSessions != 1 {
		t.Fatalf("refused sessions: %d", b.srv.Status().RefusedSessions)
	}
}

// Host mode: 20 connections x 1,024 one-page memfds exhausted the
// backend's fd table and new clients timed out at HELLO (item 3). Shared
// fds are bounded per client, per VM (the socket) and in all; a refused
// HOST_SHARE is OUT_OF_MEMORY; when the attackers leave, every fd comes
// back.
func TestExhaustSharedFDs(t *testing.T) {
	b := tight(budget.FDs, 6, 10, 10)
	b.Reserve[budget.FDs] = 2 // every client can share two buffers, however full the socket is
	be := newBoundedBackend(t, b)
	path := filepath.Join(t.TempDir(), "vgpu.sock")
	ln, err := hostmode.Listen(path, hostmode.Options{})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = be.srv.Serve(be.ctx, ln) }()
	before := hostmodetest.CountFDs(t)
	share := func(c *hostmodetest.Client, i int) int32 {
		fd, err := unix.MemfdCreate("vgpu-exhaust", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		if err := unix.Ftruncate(fd, 4096); err != nil {
			t.Fatal(err)
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, hostmodetest.Seals); err != nil {
			t.Fatal(err)
		}
		return c.Share(t, uint64(1<<30+i*4096), 4096, fd)
	}
	var attackers []*hostmodetest.Client
	oom := int32(device.ErrOutOfMemory)
	accepted := 0
	for a := 0; a < 3; a++ {
		c := hostmodetest.Dial(t, path)
		c.Hello(t)
		attackers = append(attackers, c)
		for i := 0; i < 8; i++ {
			switch st := share(c, i); st {
			case 0:
				accepted++
			case oom:
			default:
				t.Fatalf("attacker %d share %d: status %d, want 0 or %d", a, i, st, oom)
			}
		}
	}
	// The socket's 10, and each attacker's reserve of 2.
	if accepted > 10+3*2 {
		t.Fatalf("the attackers' shares took %d fds (bound 10 + reserves 6)", accepted)
	}
	if used := be.srv.Pool().Used(budget.FDs); used > 10 {
		t.Fatalf("attackers hold %d shared fds beyond their reserves (bound 10)", used)
	}
	// A new client still says HELLO and is served, and its reserve lets it
	// share a buffer.
	good := hostmodetest.Dial(t, path)
	good.Hello(t)
	if st := share(good, 0); st != 0 {
		t.Fatalf("a good client's first share with the socket's bound reached: %d", st)
	}
	hostmodetest.RoundTrip(t, good, 1<<40)
	for _, c := range attackers {
		c.Close()
	}
	good.Close()
	be.drained(budget.FDs)
	// (RoundTrip's own memfd stays open in the test until it ends.)
	testwait.For(t, 10*time.Second, "the backend to close every shared fd", func() bool { return hostmodetest.CountFDs(t) <= before+1 })
	again := hostmodetest.Dial(t, path)
	again.Hello(t)
	for i := 0; i < 6; i++ {
		if st := share(again, i); st != 0 {
			t.Fatalf("after the attackers left, share %d: %d", i, st)
		}
	}
}

// One client registering (mapped) one page many times took the process to
// vm.max_map_count, and the Go runtime then aborted (item 5). Mappings are
// counted: past the bound a registration is OUT_OF_MEMORY, another VM is
// unaffected, and they all come back.
func TestExhaustMappings(t *testing.T) {
	be := newBoundedBackend(t, tight(budget.Mappings, 16, 24, 40))
	ram, ram2 := q35RAM(t), q35RAM(t)
	defer ram.Release()
	defer ram2.Release()
	before := countResources(t)
	att := be.connect("vm-a", 1023, ram)
	reg := protocol.Bytes(&protocol.GuestRegisterReq{Flags: protocol.RegisterMapped, Size: 4096})
	page := []protocol.Segment{{GPA: lowStart, Len: 4096}}
	n := 0
	for ; n < 100; n++ {
		f := att.call(protocol.OpGuestRegister, reg, page)
		if f.Status != 0 {
			if status(f) != device.ErrOutOfMemory {
				t.Fatalf("registration %d: %v, want CUDA_ERROR_OUT_OF_MEMORY", n, status(f))
			}
			break
		}
	}
	if n != 16 {
		t.Fatalf("%d mapped registrations before the refusal, want the client's bound 16", n)
	}
	// Another VM's client maps and copies.
	good := be.connect("vm-b", 1023, ram2)
	mustOK(t, "another VM's mapped registration", good.call(protocol.OpGuestRegister, reg, page))
	good.roundTrip(3)
	att.close()
	good.close()
	be.drained(budget.Mappings)
	noLeaks(t, before, 16)
	again := be.connect("vm-a", 1023, ram)
	for i := 0; i < 16; i++ {
		mustOK(t, "registration after the attacker left", again.call(protocol.OpGuestRegister, reg, page))
	}
}

// Streams, events, modules and allocations count against one bound.
func TestExhaustObjects(t *testing.T) {
	be := newBoundedBackend(t, tight(budget.Objects, 50, 80, 1000))
	att := be.connect("vm-a", 1023, nil)
	att2 := be.connect("vm-a", 1023, nil)
	made := 0
	for _, g := range []*guest{att, att2} {
		for i := 0; i < 60; i++ {
			op, payload := protocol.OpStreamCreate, protocol.Bytes(&protocol.StreamCreateReq{})
			if i%2 == 1 {
				op, payload = protocol.OpEventCreate, protocol.Bytes(&protocol.EventCreateReq{})
			}
			f := g.call(op, payload, nil)
			if f.Status != 0 {
				if status(f) != device.ErrOutOfMemory {
					t.Fatalf("object %d: %v", i, status(f))
				}
				break
			}
			made++
		}
	}
	if made != 80 {
		t.Fatalf("%d objects made by the VM's two clients, want its bound 80", made)
	}
	if f := att2.call(protocol.OpMemAlloc, protocol.Bytes(&protocol.MemAllocReq{Size: 4096}), nil); status(f) != device.ErrOutOfMemory {
		t.Fatalf("an allocation past the VM's object bound: %v", status(f))
	}
	other := be.connect("vm-b", 1023, nil)
	other.stream()
	other.roundTrip(4)
	att.close()
	att2.close()
	other.close()
	be.drained(budget.Objects)
	again := be.connect("vm-a", 1023, nil)
	for i := 0; i < 50; i++ {
		again.event()
	}
}

// Pending host-function waits are bounded too.
func TestExhaustHostFuncs(t *testing.T) {
	be := newBoundedBackend(t, tight(budget.HostFuncs, 8, 8, 8))
	att := be.connect("vm-a", 1023, nil)
	s := att.stream()
	n := 0
	for ; n < 20; n++ {
		f := att.call(protocol.OpHostFuncLaunch, protocol.Bytes(&protocol.HostFuncReq{Stream: s, CallbackID: uint64(n)}), nil)
		if f.Status != 0 {
			if status(f) != device.ErrOutOfMemory {
				t.Fatalf("host function %d: %v", n, status(f))
			}
			break
		}
	}
	if n != 8 {
		t.Fatalf("%d host functions pending before the refusal, want 8", n)
	}
	att.close() // never answered any: the session's end releases them
	be.drained(budget.HostFuncs)
	again := be.connect("vm-a", 1023, nil)
	s = again.stream()
	for i := 0; i < 8; i++ {
		mustOK(t, "host function after the attacker left", again.call(protocol.OpHostFuncLaunch, protocol.Bytes(&protocol.HostFuncReq{Stream: s, CallbackID: uint64(i)}), nil))
	}
}

// Clients that never read their replies hold at most their bound each;
// another VM's client is answered at once.
func TestExhaustReplyBytes(t *testing.T) {
	be := newBoundedBackend(t, tight(budget.ReplyBytes, 1<<20, 2<<20, 3<<20))
	var attackers []*guest
	for i := 0; i < 4; i++ {
		g := be.connect("vm-a", 1023, nil)
		p := g.alloc(256 << 10)
		release := g.c.Hold()
		t.Cleanup(release)
		var frames []byte
		for j := 0; j < 32; j++ {
			frames = protocol.AppendFrame(frames, protocol.NewHeader(protocol.OpMemcpyDtoH, g.c.ID()),
				protocol.Bytes(&protocol.MemcpyDtoHReq{Src: p, Dst: protocol.BufRef{Kind: protocol.BufInline, Len: 256 << 10}}), nil)
		}
		go func() { _ = g.c.Send(frames) }()
		attackers = append(attackers, g)
	}
	testwait.For(t, 10*time.Second, "the attackers to fill their VM's bound", func() bool {
		return be.srv.Pool().Used(budget.ReplyBytes) >= 2<<20-(256<<10)
	})
	other := be.connect("vm-b", 1023, nil)
	other.roundTrip(5)
	// The VM's bound, and at most one reply each beyond it (a client with
	// nothing queued is always answered).
	if used := be.srv.Pool().Used(budget.ReplyBytes); used > 2<<20+4*(256<<10+64) {
		t.Fatalf("%d reply bytes queued (vm bound 2 MiB)", used)
	}
	for _, g := range attackers {
		g.close()
	}
	other.close()
	be.drained(budget.ReplyBytes)
}
