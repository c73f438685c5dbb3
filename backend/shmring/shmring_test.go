package shmring_test

import (
	"bytes"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/shmring"
	"github.com/vgpu-project/vgpu/protocol"
)

// pair makes a server and a client endpoint on one memfd of rings of n
// bytes each (in one process: the test plays both sides).
func pair(t *testing.T, n uint64, spin int64) (srv, cli *shmring.Endpoint, mem []byte) {
	t.Helper()
	mfd, err := unix.MemfdCreate("shmring-test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(mfd, int64(shmring.MemfdSize(n))); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(mfd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		t.Fatal(err)
	}
	mem, err = unix.Mmap(mfd, 0, int(shmring.MemfdSize(n)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(mem) })
	shmring.InitMemfd(mem, n)
	fds := []int{mfd}
	for i := 0; i < 4; i++ {
		fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
	}
	opt := shmring.Options{Sock: -1, Spin: 20 * time.Microsecond} // spinning whatever the machine
	if spin < 0 {
		opt.Spin = -1
	}
	cli, err = shmring.NewClient(fds, n, opt)
	if err != nil {
		t.Fatal(err)
	}
	srv, err = shmring.NewServer(fds, n, opt) // takes fds
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(); _ = cli.Close() })
	return srv, cli, mem
}

// TestStreamBothWays: writes much larger than the ring stream through it
// in both directions, byte-exact, with and without spinning.
func TestStreamBothWays(t *testing.T) {
	for _, spin := range []int64{0, -1} {
		srv, cli, _ := pair(t, protocol.RingMinBytes, spin)
		data := make([]byte, 5*protocol.RingMinBytes+12345)
		for i := range data {
			data[i] = byte(i*31 + i>>9)
		}
		for _, dir := range []struct{ w, r *shmring.Endpoint }{{cli, srv}, {srv, cli}} {
			errc := make(chan error, 1)
			go func() { _, err := dir.w.Write(data); errc <- err }()
			got := make([]byte, len(data))
			if _, err := io.ReadFull(dir.r, got); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("spin %d: the bytes differ", spin)
			}
		}
		if srv.ReadPos() != uint64(len(data)) || cli.WritePos() != uint64(len(data)) {
			t.Fatalf("positions %d %d, want %d", srv.ReadPos(), cli.WritePos(), len(data))
		}
	}
}

// TestCorruptPositions: a peer's position out of range ends the stream
// with ErrCorrupt, never a read outside the ring.
func TestCorruptPositions(t *testing.T) {
	for _, tc := range []struct {
		name string
		off  int
		val  uint64
		read bool
	}{
		{"request tail one past the ring", protocol.RingOffReqTail, protocol.RingMinBytes + 1, true},
		{"request tail wrapped below the head", protocol.RingOffReqTail, ^uint64(0), true},
		{"completion head ahead of the tail", protocol.RingOffCompHead, 1 << 40, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _, mem := pair(t, protocol.RingMinBytes, 0)
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&mem[tc.off])), tc.val)
			var err error
			if tc.read {
				_, err = srv.Read(make([]byte, 16))
			} else {
				_, err = srv.Write(make([]byte, 16))
			}
			if !errors.Is(err, shmring.ErrCorrupt) {
				t.Fatalf("got %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestCloseWakesReader: Close ends a Read that sleeps on its doorbell.
func TestCloseWakesReader(t *testing.T) {
	srv, _, _ := pair(t, protocol.RingMinBytes, -1)
	errc := make(chan error, 1)
	go func() { _, err := srv.Read(make([]byte, 8)); errc <- err }()
	_ = srv.Close()
	if err := <-errc; err == nil {
		t.Fatal("Read after Close succeeded")
	}
}

// guestPair makes a server and a client endpoint over rings of n bytes
// each in pages scattered in reverse order over one buffer (as a guest's
// pages may lie), the doorbells wired to each other's Kick.
func guestPair(t *testing.T, n uint64, spin time.Duration) (srv, cli *shmring.Endpoint, released *atomic.Bool) {
	t.Helper()
	k := int(n / protocol.RingPageSize)
	buf := make([]byte, (2*k+1)*protocol.RingPageSize)
	page := func(i int) []byte { return buf[i*protocol.RingPageSize : (i+1)*protocol.RingPageSize] }
	pg := shmring.GuestPages{Header: page(2 * k)}
	for i := 0; i < k; i++ {
		pg.Req = append(pg.Req, page(2*k-1-i))
		pg.Comp = append(pg.Comp, page(k-1-i))
	}
	released = new(atomic.Bool)
	var s, c atomic.Pointer[shmring.Endpoint]
	opt := shmring.Options{Spin: spin}
	var err error
	srv, err = shmring.NewGuestServer(pg, n, func(b shmring.Bell) { c.Load().Kick(b) }, func() { released.Store(true) }, opt)
	if err != nil {
		t.Fatal(err)
	}
	cli, err = shmring.NewGuestClient(pg, n, func(b shmring.Bell) { s.Load().Kick(b) }, opt)
	if err != nil {
		t.Fatal(err)
	}
	s.Store(srv)
	c.Store(cli)
	t.Cleanup(func() { _ = srv.Close(); _ = cli.Close() })
	return srv, cli, released
}

// TestGuestPagesStream: rings over scattered pages with doorbells that are
// function calls (a guest's vsock frames) stream byte-exact both ways,
// with and without spinning, and Close releases the pages once.
func TestGuestPagesStream(t *testing.T) {
	for _, spin := range []time.Duration{20 * time.Microsecond, -1} {
		srv, cli, released := guestPair(t, protocol.RingMinBytes, spin)
		data := make([]byte, 5*protocol.RingMinBytes+12345)
		for i := range data {
			data[i] = byte(i*29 + i>>11)
		}
		for _, dir := range []struct{ w, r *shmring.Endpoint }{{cli, srv}, {srv, cli}} {
			errc := make(chan error, 1)
			go func() { _, err := dir.w.Write(data); errc <- err }()
			got := make([]byte, len(data))
			if _, err := io.ReadFull(dir.r, got); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("spin %v: the bytes differ", spin)
			}
		}
		srv.NoteTaken(srv.ReadPos())
		_ = srv.Close()
		_ = srv.Close()
		if !released.Load() {
			t.Fatal("Close did not release the guest pages")
		}
		srv.Kick(shmring.BellRequests) // after release: nothing happens
		srv.NoteTaken(1)
	}
}

// TestGuestPagesRefused: pages that do not make up the rings are refused.
func TestGuestPagesRefused(t *testing.T) {
	n := uint64(protocol.RingMinBytes)
	k := int(n / protocol.RingPageSize)
	mk := func(req, comp, size int) shmring.GuestPages {
		pg := shmring.GuestPages{Header: make([]byte, protocol.RingHeaderSize)}
		for i := 0; i < req; i++ {
			pg.Req = append(pg.Req, make([]byte, size))
		}
		for i := 0; i < comp; i++ {
			pg.Comp = append(pg.Comp, make([]byte, size))
		}
		return pg
	}
	for name, pg := range map[string]shmring.GuestPages{
		"a page short":   mk(k-1, k, protocol.RingPageSize),
		"a page over":    mk(k, k+1, protocol.RingPageSize),
		"short pages":    mk(k, k, protocol.RingPageSize/2),
		"no header page": {Req: mk(k, k, protocol.RingPageSize).Req, Comp: mk(k, k, protocol.RingPageSize).Comp},
	} {
		if _, err := shmring.NewGuestServer(pg, n, func(shmring.Bell) {}, nil, shmring.Options{}); !errors.Is(err, shmring.ErrBadSetup) {
			t.Errorf("%s: got %v, want ErrBadSetup", name, err)
		}
	}
	if _, err := shmring.NewGuestServer(mk(k, k, protocol.RingPageSize), n+1, func(shmring.Bell) {}, nil, shmring.Options{}); !errors.Is(err, shmring.ErrBadSetup) {
		t.Errorf("a ring size that is not a power of two: got %v", err)
	}
}
