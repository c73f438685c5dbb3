package hostmode_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/backend/hostmode"
	"github.com/vgpu-project/vgpu/backend/hostmode/hostmodetest"
	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/backend/server"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/protocol"
)

// backend serves a sim device on a host-mode socket, as
// "vgpu serve --device sim --unix PATH" does; stop ends it and waits.
type backend struct {
	srv  *server.Server
	path string
	stop func()
}

func serve(t *testing.T, opt hostmode.Options) *backend {
	t.Helper()
	drv, err := sim.New(sim.Config{Devices: 1, MemBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Driver: drv, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "vgpu.sock")
	ln, err := hostmode.Listen(path, opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	b := &backend{srv: srv, path: path}
	var stopped bool
	b.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		drv.Close()
	}
	t.Cleanup(b.stop)
	return b
}

func TestShareRoundTrip(t *testing.T) {
	b := serve(t, hostmode.Options{})
	c := hostmodetest.Dial(t, b.path)
	if f := c.Hello(t); f&protocol.FeatureHostShare == 0 || f&protocol.FeatureSegments != 0 {
		t.Fatalf("HELLO features %#x: want HOST_SHARE and not SEGMENTS", f)
	}
	hostmodetest.RoundTrip(t, c, 1<<40)
	// The backend's mappings of the share are gone once it is unshared
	// and unregistered (the client still has its own).
	testwait.For(t, 10*time.Second, "the backend to unmap the share", func() bool { return hostmodetest.Mappings(t, "vgpu-hostmodetest") == 1 })
	c.Ping(t)
}

// TestNoShareOption: with Options.NoShare the backend offers no sharing
// and refuses HOST_SHARE (the library then sends data inline).
func TestNoShareOption(t *testing.T) {
	b := serve(t, hostmode.Options{NoShare: true})
	c := hostmodetest.Dial(t, b.path)
	if f := c.Hello(t); f&protocol.FeatureHostShare != 0 {
		t.Fatalf("HELLO features %#x with NoShare", f)
	}
	m := hostmodetest.NewMemfd(t, "vgpu-noshare", 4096, hostmodetest.Seals)
	if st := c.Share(t, 0, 4096, m.FD); device.Result(st) != device.ErrNotSupported {
		t.Fatalf("HOST_SHARE without sharing: status %d, want 801", st)
	}
	c.Ping(t)
}

// TestShareBadInput: every way a share can be wrong is answered with its
// documented error, the fds are closed, and the session keeps serving.
func TestShareBadInput(t *testing.T) {
	const page = 4096
	b := serve(t, hostmode.Options{MaxShares: 3, MaxShareBytes: 64 << 10})
	c := hostmodetest.Dial(t, b.path)
	c.Hello(t)
	good := func() int { return hostmodetest.NewMemfd(t, "vgpu-bad", 16*page, hostmodetest.Seals).FD }
	if st := c.Share(t, 1<<30, 4*page, good()); st != 0 {
		t.Fatalf("a good share: status %d", st)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	file, err := os.CreateTemp(t.TempDir(), "plain")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if err := file.Truncate(16 * page); err != nil {
		t.Fatal(err)
	}
	inv, oom := int32(device.ErrInvalidValue), int32(device.ErrOutOfMemory)
	cases := []struct {
		name       string
		base, size uint64
		fds        func() []int
		want       int32
	}{
		{"no seals", 2 << 30, page, func() []int { return []int{hostmodetest.NewMemfd(t, "vgpu-unsealed", page, 0).FD} }, inv},
		{"growable but shrinkable", 2 << 30, page, func() []int {
			return []int{hostmodetest.NewMemfd(t, "vgpu-grow", page, unix.F_SEAL_GROW|unix.F_SEAL_SEAL).FD}
		}, inv},
		{"a pipe, not a memfd", 2 << 30, page, func() []int { return []int{int(pr.Fd())} }, inv},
		{"a regular file, not a memfd", 2 << 30, page, func() []int { return []int{int(file.Fd())} }, inv},
		{"size larger than the file", 2 << 30, 32 * page, func() []int { return []int{good()} }, inv},
		{"size 0", 2 << 30, 0, func() []int { return []int{good()} }, inv},
		{"misaligned base", 2<<30 + 8, page, func() []int { return []int{good()} }, inv},
		{"misaligned size", 2 << 30, page + 1, func() []int { return []int{good()} }, inv},
		{"wraps around", ^uint64(0) - page + 1, 2 * page, func() []int { return []int{good()} }, inv},
		{"overlaps the first share", 1<<30 + 2*page, 4 * page, func() []int { return []int{good()} }, inv},
		{"frame without fd", 2 << 30, page, func() []int { return nil }, inv},
		{"two fds", 2 << 30, page, func() []int { return []int{good(), good()} }, inv},
		{"over the byte cap", 2 << 30, 16 * page, func() []int { return []int{good()} }, oom},
	}
	before := hostmodetest.CountFDs(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fds := tc.fds()
			if st := c.Share(t, tc.base, tc.size, fds...); st != tc.want {
				t.Fatalf("status %d, want %d", st, tc.want)
			}
			c.Ping(t)
		})
	}
	// Every fd the backend received for those was closed: only the
	// memfds this test created (and holds) are new.
	created := 0
	for _, tc := range cases {
		if tc.name != "a pipe, not a memfd" && tc.name != "a regular file, not a memfd" && tc.name != "frame without fd" {
			created++
			if tc.name == "two fds" {
				created++
			}
		}
	}
	if got := hostmodetest.CountFDs(t); got != before+created {
		t.Fatalf("%d fds open, want %d (%d before + %d memfds of the test): the backend leaked some", got, before+created, before, created)
	}

	// Too many: two more fit under MaxShares 3, the next does not.
	for i := uint64(0); i < 2; i++ {
		if st := c.Share(t, 4<<30+i*(1<<20), page, good()); st != 0 {
			t.Fatalf("share %d: status %d", i+2, st)
		}
	}
	if st := c.Share(t, 5<<30, page, good()); st != oom {
		t.Fatalf("a fourth share: status %d, want %d", st, oom)
	}
	// An unknown base, and a flag, are refused too.
	if st, _, _, _ := sessiontest.Do[protocol.HostUnshareReq, protocol.Empty](c.Client, protocol.OpHostUnshare, &protocol.HostUnshareReq{Base: 3 << 30}, nil); st != inv {
		t.Fatalf("HOST_UNSHARE of nothing: status %d", st)
	}
	f, err := c.CallFDs(protocol.OpHostShare, protocol.Append(nil, &protocol.HostShareReq{Base: 6 << 30, Size: page, Flags: 1}), good())
	if err != nil || f.Status != inv {
		t.Fatalf("HOST_SHARE with flags: %v status %d", err, f.Status)
	}
	// Unsharing makes room again.
	if st, _, _, _ := sessiontest.Do[protocol.HostUnshareReq, protocol.Empty](c.Client, protocol.OpHostUnshare, &protocol.HostUnshareReq{Base: 1 << 30}, nil); st != 0 {
		t.Fatalf("HOST_UNSHARE: status %d", st)
	}
	if st := c.Share(t, 5<<30, page, good()); st != 0 {
		t.Fatalf("a share after an unshare: status %d", st)
	}
	c.Ping(t)
}

// TestStrayFDs: fds sent with frames that take none are closed, and the
// frames are served as if they had come alone.
func TestStrayFDs(t *testing.T) {
	b := serve(t, hostmode.Options{})
	c := hostmodetest.Dial(t, b.path)
	c.Hello(t)
	m := hostmodetest.NewMemfd(t, "vgpu-stray", 4096, hostmodetest.Seals)
	before := hostmodetest.CountFDs(t)
	for i := 0; i < 20; i++ {
		f, err := c.CallFDs(protocol.OpPing, nil, m.FD, m.FD)
		if err != nil || f.Status != 0 {
			t.Fatalf("PING with fds: %v status %d", err, f.Status)
		}
	}
	if got := hostmodetest.CountFDs(t); got != before {
		t.Fatalf("%d fds open after stray fds, %d before", got, before)
	}
	if n := b.srv.Stats().Snapshot().StrayFDs; n != 40 {
		t.Fatalf("StrayFDs = %d, want 40", n)
	}
	// A share still takes the right fd afterwards.
	if st := c.Share(t, 0, 4096, m.FD); st != 0 {
		t.Fatalf("HOST_SHARE after stray fds: status %d", st)
	}
}

// TestNoLeaks: connections that share memory, register it and go away
// (cleanly or not) leave no fd and no mapping behind.
func TestNoLeaks(t *testing.T) {
	b := serve(t, hostmode.Options{})
	// A session that stays keeps the VM ("unix:PATH") and its registry of
	// device-registered memory alive: each share must still be forgotten
	// there when its connection ends.
	keeper := hostmodetest.Dial(t, b.path)
	keeper.Hello(t)
	before := hostmodetest.CountFDs(t)
	for i := 0; i < 5; i++ {
		func() {
			c := hostmodetest.Dial(t, b.path)
			c.Hello(t)
			m := hostmodetest.NewMemfd(t, "vgpu-leak", 1<<20, hostmodetest.Seals)
			if st := c.Share(t, 1<<40, 1<<20, m.FD); st != 0 {
				t.Fatalf("share: %d", st)
			}
			st, reg, _, err := sessiontest.DoSegs[protocol.GuestRegisterReq, protocol.GuestRegisterReply](c.Client, protocol.OpGuestRegister,
				&protocol.GuestRegisterReq{Flags: protocol.RegisterMapped, Size: 1 << 20}, []protocol.Segment{{GPA: 1 << 40, Len: 1 << 20}})
			if err != nil || st != 0 || reg.DevPtr == 0 {
				t.Fatalf("register: %v %d", err, st)
			}
			_, p, _, _ := sessiontest.Do[protocol.MemAllocReq, protocol.PtrReply](c.Client, protocol.OpMemAlloc, &protocol.MemAllocReq{Size: 4096}, nil)
			if st, _, _, _ := sessiontest.DoSegs[protocol.MemcpyHtoDReq, protocol.Empty](c.Client, protocol.OpMemcpyHtoD,
				&protocol.MemcpyHtoDReq{Dst: p.Ptr, Src: protocol.BufRef{Kind: protocol.BufSegments, Len: 4096}}, []protocol.Segment{{GPA: 1 << 40, Len: 4096}}); st != 0 {
				t.Fatalf("htod: %d", st)
			}
			if i%2 == 0 { // half of them leave with a stray fd in flight
				_, _, _ = c.UC.WriteMsgUnix(protocol.AppendFrame(nil, protocol.NewHeader(protocol.OpPing, 999), nil, nil), unix.UnixRights(m.FD), nil)
			}
			c.Close()
			// The test's own memfd is closed here; then nothing of it may remain.
			_ = unix.Munmap(m.Mem)
			_ = unix.Close(m.FD)
			m.Mem, m.FD = nil, -1
		}()
		testwait.For(t, 10*time.Second, "the session to end", func() bool { return len(b.srv.Status().Sessions) == 1 })
		testwait.For(t, 10*time.Second, "the backend to unmap the share", func() bool { return hostmodetest.Mappings(t, "vgpu-leak") == 0 })
		if s := b.srv.Status(); s.Devices[0].Allocations != 0 {
			t.Fatalf("allocations or host registrations left after session %d: %+v", i, s.Devices[0])
		}
	}
	testwait.For(t, 10*time.Second, "every fd to be closed", func() bool { return hostmodetest.CountFDs(t) == before })
	keeper.Ping(t)
}
