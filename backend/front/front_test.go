package front

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/backend/server"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/backend/transport"
	"github.com/vgpu-project/vgpu/protocol"
)

// sealedRAM is guest RAM in one memfd sealed against shrinking and
// growing, as QEMU's memory-backend-memfd makes it.
func sealedRAM(t *testing.T, size uint64) *guestmem.Table {
	t.Helper()
	fd := memfd(t, size, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW)
	tab, err := guestmem.NewTable([]guestmem.RegionSpec{{GuestPhys: 0, Size: size, UserAddr: 0x7000_0000_0000, FD: fd}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tab.Release)
	return tab
}

// memfd returns a memfd of size bytes with seals (0: none).
func memfd(t *testing.T, size uint64, seals int) int {
	t.Helper()
	fd, err := unix.MemfdCreate("vgpu-test-ram", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	if seals != 0 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
			t.Fatal(err)
		}
	}
	return fd
}

// qemuMemory is the VM's memory as the vhost-user server publishes it:
// set to nil when QEMU goes away.
type qemuMemory struct {
	mu sync.Mutex
	t  *guestmem.Table
}

func (q *qemuMemory) Acquire() (*guestmem.Table, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.t == nil {
		return nil, errors.New("QEMU is gone")
	}
	return q.t.Acquire()
}

func (q *qemuMemory) set(t *guestmem.Table) { q.mu.Lock(); q.t = t; q.mu.Unlock() }

// fakeDevice stands in for the vsock device's vGPU port: the forwarder
// listens on it while a backend is connected, and guest connections made
// while nobody listens are refused (the device would answer RST).
type fakeDevice struct {
	mu  sync.Mutex
	cur *fakeListener
	mem guestmem.Source
}

type fakeListener struct {
	d      *fakeDevice
	accept chan transport.Conn
	done   chan struct{}
	once   sync.Once
}

func (d *fakeDevice) listen() (transport.Listener, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cur != nil {
		return nil, syscall.EADDRINUSE
	}
	d.cur = &fakeListener{d: d, accept: make(chan transport.Conn, 8), done: make(chan struct{})}
	return d.cur, nil
}

func (d *fakeDevice) listening() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cur != nil
}

var errRefused = errors.New("connection refused (RST)")

// connect is a guest connecting from port; the guest's end is returned.
func (d *fakeDevice) connect(port uint32) (*sessiontest.Client, error) {
	d.mu.Lock()
	l := d.cur
	d.mu.Unlock()
	if l == nil {
		return nil, errRefused
	}
	bc, gc := sessiontest.Pipe(3, port, d.mem)
	bc.Name = "vm-under-test"
	select {
	case l.accept <- bc:
		return sessiontest.NewClient(gc), nil
	case <-l.done:
		return nil, errRefused
	}
}

func (l *fakeListener) Accept() (transport.Conn, error) {
	select {
	case c := <-l.accept:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *fakeListener) Close() error {
	l.once.Do(func() {
		l.d.mu.Lock()
		if l.d.cur == l {
			l.d.cur = nil
		}
		l.d.mu.Unlock()
		close(l.done)
	})
	return nil
}

func (l *fakeListener) Addr() net.Addr { return &net.UnixAddr{Name: "fake-vsock"} }

// testBackend is "vgpu serve --front-socket" in-process: a sim device, a
// server and a front Listener.
type testBackend struct {
	ln     *Listener
	srv    *server.Server
	drv    *sim.Driver
	cancel context.CancelFunc
	served chan error
}

func startBackend(t *testing.T, path string, opts ListenOptions) *testBackend {
	t.Helper()
	drv, err := sim.New(sim.Config{MemBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Driver: drv, Limits: protocol.DefaultLimits, Version: "fronttest"})
	if err != nil {
		t.Fatal(err)
	}
	if opts.Logger == nil {
		opts.Logger = hclog.New(&hclog.LoggerOptions{Name: "backend", Level: hclog.Error, Output: os.Stderr})
	}
	ln, err := Listen(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &testBackend{ln: ln, srv: srv, drv: drv, cancel: cancel, served: make(chan error, 1)}
	go func() { b.served <- srv.Serve(ctx, ln) }()
	return b
}

// stop is the backend going away: its fronts see their control socket
// end, its sessions end.
func (b *testBackend) stop(t *testing.T) {
	t.Helper()
	b.cancel()
	b.ln.Close()
	select {
	case <-b.served:
	case <-time.After(10 * time.Second):
		t.Fatal("backend did not stop")
	}
	b.drv.Close()
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// noFDLeak waits until the process holds no more fds than before.
func noFDLeak(t *testing.T, before int) {
	t.Helper()
	var now int
	deadline := time.Now().Add(10 * time.Second)
	for now = openFDs(t); now > before; now = openFDs(t) {
		if time.Now().After(deadline) {
			ents, _ := os.ReadDir("/proc/self/fd")
			var names []string
			for _, e := range ents {
				l, _ := os.Readlink("/proc/self/fd/" + e.Name())
				names = append(names, e.Name()+"->"+l)
			}
			t.Fatalf("fd leak: %d before, %d now: %s", before, now, strings.Join(names, " "))
		}
		runtime.GC()
		<-time.After(10 * time.Millisecond)
	}
	t.Logf("fds: %d before, %d after", before, now)
}

// roundTrip proves a guest connection works end to end: hello, an
// allocation filled from guest RAM by GPA (segments), read back inline.
func roundTrip(t *testing.T, c *sessiontest.Client, ram *guestmem.Table, seed byte) {
	t.Helper()
	st, hello, _, err := sessiontest.Do[protocol.HelloReq, protocol.HelloReply](c, protocol.OpHello, &protocol.HelloReq{Major: 1, Features: ^uint64(0)}, nil)
	if err != nil || st != 0 || hello.Features&protocol.FeatureSegments == 0 {
		t.Fatalf("hello through the front: %v %d %+v", err, st, hello)
	}
	page, _ := ram.Slice(8192, 4096)
	for i := range page {
		page[i] = seed + byte(i)
	}
	st, p, _, err := sessiontest.Do[protocol.MemAllocReq, protocol.PtrReply](c, protocol.OpMemAlloc, &protocol.MemAllocReq{Size: 4096}, nil)
	if err != nil || st != 0 {
		t.Fatalf("alloc: %v %d", err, st)
	}
	st, _, _, err = sessiontest.DoSegs[protocol.MemcpyHtoDReq, protocol.Empty](c, protocol.OpMemcpyHtoD,
		&protocol.MemcpyHtoDReq{Dst: p.Ptr, Src: protocol.BufRef{Kind: protocol.BufSegments, Len: 4096}}, []protocol.Segment{{GPA: 8192, Len: 4096}})
	if err != nil || st != 0 {
		t.Fatalf("htod from guest RAM through the front: %v %d", err, st)
	}
	req := protocol.MemcpyDtoHReq{Src: p.Ptr, Dst: protocol.BufRef{Kind: protocol.BufInline, Len: 4096}}
	f, err := c.Call(protocol.OpMemcpyDtoH, 0, protocol.Bytes(&req), nil)
	if err != nil || !bytes.Equal(f.Payload, page) {
		t.Fatalf("guest RAM did not reach the backend: %v", err)
	}
}

// TestBackendRestartBehindFront: a front forwards a guest connection to a
// backend; the backend goes away (the guest's connection ends, new ones
// are refused), a new backend serves the same socket, the front
// reconnects and re-sends guest memory, and a new guest connection works.
// Neither side leaks fds.
func TestBackendRestartBehindFront(t *testing.T) {
	before := openFDs(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "front.sock")
	ram := sealedRAM(t, 1<<20)
	qemu := &qemuMemory{t: ram}
	dev := &fakeDevice{mem: qemu}
	log := hclog.New(&hclog.LoggerOptions{Name: "front", Level: hclog.Error, Output: os.Stderr})

	b1 := startBackend(t, sock, ListenOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	fwd := newForwarder(Config{Backend: sock, VM: "vm-under-test", GuestCID: 3, MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}, log, dev.listen)
	fwd.mem = qemu
	done := make(chan struct{})
	go func() { fwd.run(ctx); close(done) }()

	testwait.For(t, 10*time.Second, "the front connected to backend 1", dev.listening)
	c1, err := dev.connect(1023)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c1, ram, 1)
	if fs := b1.ln.Fronts(); len(fs) != 1 || fs[0].VM != "vm-under-test" || fs[0].Streams != 1 || !fs[0].Memory || int(fs[0].PID) != os.Getpid() {
		t.Fatalf("backend 1's fronts: %+v", fs)
	}

	// The backend goes away under a running guest program.
	b1.stop(t)
	select {
	case <-c1.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the guest's connection is still open after its backend went away")
	}
	if _, err := c1.Call(protocol.OpPing, 0, nil, nil); err == nil {
		t.Fatal("a call on a connection whose backend is gone succeeded")
	}
	testwait.For(t, 10*time.Second, "the front stopped listening", func() bool { return !dev.listening() })
	if _, err := dev.connect(1022); !errors.Is(err, errRefused) {
		t.Fatalf("guest connection while no backend is up: %v, want refused", err)
	}
	testwait.For(t, 10*time.Second, "the front forwards nothing", func() bool {
		st := fwd.status()
		return !st.Connected && st.Streams == 0 && st.Connects == 1
	})

	// A new backend on the same socket: the front comes back by itself.
	b2 := startBackend(t, sock, ListenOptions{})
	testwait.For(t, 10*time.Second, "the front reconnected to backend 2", dev.listening)
	c2, err := dev.connect(1021)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c2, ram, 2)
	if st := fwd.status(); !st.Connected || st.Streams != 1 || st.Connects != 2 {
		t.Fatalf("front status after the restart: %+v", st)
	}
	c2.Close()
	testwait.For(t, 10*time.Second, "the stream ended on both sides", func() bool {
		fs := b2.ln.Fronts()
		return fwd.status().Streams == 0 && len(fs) == 1 && fs[0].Streams == 0 && len(b2.srv.Status().Sessions) == 0
	})
	// The VM is still there: its memory stays mapped for its next program.
	if fs := b2.ln.Fronts(); !fs[0].Memory {
		t.Fatal("the backend let go of the memory of a VM that is still running")
	}
	// QEMU goes away: within a few seconds neither side maps its RAM.
	qemu.set(nil)
	testwait.For(t, 10*time.Second, "the backend let go of the guest memory of a VM that is gone", func() bool {
		fs := b2.ln.Fronts()
		return len(fs) == 1 && !fs[0].Memory
	})

	cancel()
	<-done
	b2.stop(t)
	c1.Close()
	noFDLeak(t, before+1) // + the memfd of ram (released at cleanup)
}

// A guest connection made while the front is connected but its backend
// dies before the guest sends anything still ends (no hang).
func TestFrontClosesStreamsWhenBackendDies(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "front.sock")
	dev := &fakeDevice{} // no guest memory: host-mode-like streams
	b := startBackend(t, sock, ListenOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fwd := newForwarder(Config{Backend: sock, VM: "vm", MinBackoff: 5 * time.Millisecond}, hclog.NewNullLogger(), dev.listen)
	go fwd.run(ctx)
	testwait.For(t, 10*time.Second, "connected", dev.listening)
	var clients []*sessiontest.Client
	for port := uint32(1000); port < 1010; port++ {
		c, err := dev.connect(port)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	testwait.For(t, 10*time.Second, "10 streams forwarded", func() bool { return fwd.status().Streams == 10 })
	b.stop(t)
	for i, c := range clients {
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("guest connection %d still open", i)
		}
	}
}
