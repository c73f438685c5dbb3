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
