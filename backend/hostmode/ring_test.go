package hostmode_test

import (
	"bytes"
	"os"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/hostmode"
	"github.com/vgpu-project/vgpu/backend/hostmode/hostmodetest"
	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/protocol"
)

const ringFeatures = protocol.FeatureBatch | protocol.FeatureInline | protocol.FeatureHostShare | protocol.FeatureShmRing

// ringCopy copies n bytes inline to the device and back (frames larger
// than a small ring: they wrap and stream through it).
func ringCopy(t *testing.T, c *hostmodetest.Client, n int) {
	t.Helper()
	st, mem, _, err := sessiontest.Do[protocol.MemAllocReq, protocol.PtrReply](c.Client, protocol.OpMemAlloc, &protocol.MemAllocReq{Size: uint64(n)}, nil)
	if err != nil || st != 0 {
		t.Fatalf("MEM_ALLOC: %v %d", err, st)
	}
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i*13 + i>>10)
	}
	st, _, _, err = sessiontest.Do[protocol.MemcpyHtoDReq, protocol.Empty](c.Client, protocol.OpMemcpyHtoD,
		&protocol.MemcpyHtoDReq{Dst: mem.Ptr, Src: protocol.BufRef{Kind: protocol.BufInline, Len: uint64(n)}}, data)
	if err != nil || st != 0 {
		t.Fatalf("MEMCPY_HTOD inline: %v %d", err, st)
	}
	st, _, back, err := sessiontest.Do[protocol.MemcpyDtoHReq, protocol.Empty](c.Client, protocol.OpMemcpyDtoH,
		&protocol.MemcpyDtoHReq{Src: mem.Ptr, Dst: protocol.BufRef{Kind: protocol.BufInline, Len: uint64(n)}}, nil)
	if err != nil || st != 0 || !bytes.Equal(back, data) {
		t.Fatalf("MEMCPY_DTOH inline: %v %d, %d bytes back, equal %v", err, st, len(back), bytes.Equal(back, data))
	}
	st, _, _, err = sessiontest.Do[protocol.PtrReq, protocol.Empty](c.Client, protocol.OpMemFree, &protocol.PtrReq{Ptr: mem.Ptr}, nil)
	if err != nil || st != 0 {
		t.Fatalf("MEM_FREE: %v %d", err, st)
	}
}

// TestRingRoundTrip: HELLO offers rings; after RING_SETUP every frame
// travels on them: calls, copies larger than the ring (wrapping), a
// HOST_SHARE whose fd comes in a carrier, and the shared-memory round
// trip; the session ends cleanly and releases the rings.
func TestRingRoundTrip(t *testing.T) {
	b := serve(t, hostmode.Options{})
	c := hostmodetest.Dial(t, b.path)
	if f := c.HelloFeatures(t, ringFeatures); f&protocol.FeatureShmRing == 0 {
		t.Fatalf("HELLO features %#x: want SHM_RING", f)
	}
	before := hostmodetest.Mappings(t, "vgpu-ring")
	bells := eventfds(t)
	r := hostmodetest.StartRing(t, c, protocol.RingMinBytes, nil)
	r.Ping(t)
	// The test's own mapping, its ring endpoint's, and the backend's.
	if n := hostmodetest.Mappings(t, "vgpu-ring"); n != before+3 {
		t.Fatalf("the ring memfd is mapped %d times, want 3 (the test, its endpoint, the backend)", n-before)
	}
	ringCopy(t, r, 4096)
	ringCopy(t, r, 1<<20+3) // 16 times the ring, not a multiple of it
	hostmodetest.RoundTrip(t, r, 1<<40)
	// A second setup is refused, on the ring.
	p := hostmodetest.NewRingParts(t, protocol.RingMinBytes)
	if st := r.SendRingSetup(t, protocol.RingMinBytes, p.FDs()); device.Result(st) != device.ErrInvalidValue {
		t.Fatalf("second RING_SETUP: status %d, want %d", st, device.ErrInvalidValue)
	}
	// Stray fds in a carrier of a frame that takes none are closed.
	m := hostmodetest.NewMemfd(t, "vgpu-stray", 4096, 0)
	if f, err := r.CallFDs(protocol.OpPing, nil, m.FD); err != nil || f.Status != 0 {
		t.Fatalf("PING with a stray fd: %v %d", err, f.Status)
	}
	testwait.For(t, 10*time.Second, "the backend to close the stray fd", func() bool { return hostmodetest.Mappings(t, "vgpu-stray") == 1 })
	r.Ping(t)
	r.Close()
	// The second setup's memfd and the first one's test mapping remain.
	testwait.For(t, 10*time.Second, "the backend to unmap the rings", func() bool { return hostmodetest.Mappings(t, "vgpu-ring") == before+2 })
	// Of the eventfds, only the test's own two sets remain.
	testwait.For(t, 10*time.Second, "the backend to close the ring's eventfds", func() bool { return eventfds(t) == bells+8 })
}

// TestRingRefusals: bad setups are refused on the socket and the session
// goes on there.
func TestRingRefusals(t *testing.T) {
	b := serve(t, hostmode.Options{})
	c := hostmodetest.Dial(t, b.path)
	// Without the feature negotiated.
	c.HelloFeatures(t, protocol.FeatureBatch|protocol.FeatureInline)
	p := hostmodetest.NewRingParts(t, protocol.RingMinBytes)
	if st := c.SendRingSetup(t, protocol.RingMinBytes, p.FDs()); device.Result(st) != device.ErrNotSupported {
		t.Fatalf("RING_SETUP without the feature: status %d", st)
	}
	c.HelloFeatures(t, ringFeatures)
	pipe := make([]int, 2)
	if err := unix.Pipe2(pipe, unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pipe[0])
	defer unix.Close(pipe[1])
	blocking, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(blocking)
	unsealed := hostmodetest.NewMemfd(t, "vgpu-ring", int(protocol.RingHeaderSize+2*protocol.RingMinBytes), unix.F_SEAL_SHRINK)
	short := hostmodetest.NewMemfd(t, "vgpu-ring", int(protocol.RingHeaderSize+protocol.RingMinBytes), hostmodetest.Seals)
	with := func(i, fd int) []int { f := p.FDs(); f[i] = fd; return f }
	for _, tc := range []struct {
		name  string
		bytes uint64
		fds   []int
	}{
		{"no fds", protocol.RingMinBytes, nil},
		{"four fds", protocol.RingMinBytes, p.FDs()[:4]},
		{"size not a power of two", protocol.RingMinBytes + 4096, p.FDs()},
		{"size too small", protocol.RingMinBytes / 2, p.FDs()},
		{"size too large", protocol.RingMaxBytes * 2, p.FDs()},
		{"memfd of the wrong size", protocol.RingMinBytes * 2, p.FDs()},
		{"memfd not sealed against growing", protocol.RingMinBytes, with(0, unsealed.FD)},
		{"memfd too short", protocol.RingMinBytes, with(0, short.FD)},
		{"a pipe for a doorbell", protocol.RingMinBytes, with(2, pipe[1])},
		{"a blocking eventfd", protocol.RingMinBytes, with(4, blocking)},
		{"an eventfd for the memfd", protocol.RingMinBytes, with(0, p.Bells[0])},
	} {
		if st := c.SendRingSetup(t, tc.bytes, tc.fds); device.Result(st) != device.ErrInvalidValue {
			t.Errorf("%s: status %d, want %d", tc.name, st, device.ErrInvalidValue)
		}
		c.Ping(t)
	}
	// Flags.
	f, err := c.CallFDs(protocol.OpRingSetup, protocol.Append(nil, &protocol.RingSetupReq{RingBytes: protocol.RingMinBytes, Flags: 1}), p.FDs()...)
	if err != nil || device.Result(f.Status) != device.ErrInvalidValue {
		t.Fatalf("flags 1: %v %d", err, f.Status)
	}
	// Refused by the socket's options.
	b2 := serve(t, hostmode.Options{NoRing: true})
	c2 := hostmodetest.Dial(t, b2.path)
	if f := c2.HelloFeatures(t, ringFeatures); f&protocol.FeatureShmRing != 0 {
		t.Fatalf("NoRing: HELLO offers rings (%#x)", f)
	}
	if st := c2.SendRingSetup(t, protocol.RingMinBytes, p.FDs()); device.Result(st) != device.ErrNotSupported {
		t.Fatalf("NoRing: RING_SETUP status %d", st)
	}
	// After all that, a good setup works.
	r := hostmodetest.StartRing(t, c, protocol.RingMinBytes, nil)
	r.Ping(t)
}

// TestRingHostile: a client that corrupts the ring's positions ends its
// own session, never the backend, and nothing of it is left mapped.
func TestRingHostile(t *testing.T) {
	b := serve(t, hostmode.Options{})
	before := hostmodetest.Mappings(t, "vgpu-ring")
	for _, tc := range []struct {
		name string
		off  int
		val  func(size uint64) uint64
	}{
		{"request tail past the ring's size", protocol.RingOffReqTail, func(n uint64) uint64 { return n + 1 }},
		{"request tail far behind", protocol.RingOffReqTail, func(n uint64) uint64 { return ^uint64(0) - 5 }},
		{"completion head ahead of the tail", protocol.RingOffCompHead, func(n uint64) uint64 { return 1 << 40 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := hostmodetest.Dial(t, b.path)
			c.HelloFeatures(t, ringFeatures)
			p := hostmodetest.NewRingParts(t, protocol.RingMinBytes)
			r := hostmodetest.StartRing(t, c, protocol.RingMinBytes, p)
			r.Ping(t)
			const big = 2 * protocol.RingMinBytes
			st, mem, _, err := sessiontest.Do[protocol.MemAllocReq, protocol.PtrReply](r.Client, protocol.OpMemAlloc, &protocol.MemAllocReq{Size: big}, nil)
			if err != nil || st != 0 {
				t.Fatalf("MEM_ALLOC: %v %d", err, st)
			}
			w := (*uint64)(unsafe.Pointer(&p.Mem.Mem[tc.off]))
			atomic.StoreUint64(w, tc.val(protocol.RingMinBytes))
			var one = [8]byte{1}
			_, _ = unix.Write(p.Bells[0], one[:]) // wake the backend's reader
			if tc.off == protocol.RingOffCompHead {
				// The backend's writer reads the head again only when the
				// room it saw last is too small: a reply larger than the
				// ring (our reader, with nothing new to read, keeps the
				// corrupt head).
				req := protocol.MemcpyDtoHReq{Src: mem.Ptr, Dst: protocol.BufRef{Kind: protocol.BufInline, Len: big}}
				_ = r.Send(protocol.AppendFrame(nil, protocol.NewHeader(protocol.OpMemcpyDtoH, r.ID()), protocol.Append(nil, &req), nil))
			}
			select {
			case <-r.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the session did not end")
			}
		})
	}
	// The backend still serves, and released every ring.
	c := hostmodetest.Dial(t, b.path)
	c.HelloFeatures(t, ringFeatures)
	r := hostmodetest.StartRing(t, c, protocol.RingMinBytes, nil)
	r.Ping(t)
	r.Close()
	// The last client's own mapping remains.
	testwait.For(t, 10*time.Second, "the backend to unmap the rings", func() bool { return hostmodetest.Mappings(t, "vgpu-ring") == before+1 })
}

// TestRingClientGone: a client that goes away while the backend sleeps on
// the ring ends its session (the socket's end wakes the backend).
func TestRingClientGone(t *testing.T) {
	b := serve(t, hostmode.Options{})
	c := hostmodetest.Dial(t, b.path)
	c.HelloFeatures(t, ringFeatures)
	r := hostmodetest.StartRing(t, c, protocol.RingMinBytes, nil)
	r.Ping(t)
	time.Sleep(10 * time.Millisecond) // past the backend's spin: it sleeps on its doorbell
	r.Close()                         // the client's socket and ring
	testwait.For(t, 10*time.Second, "the session to end", func() bool { return b.srv.Stats().Snapshot().ActiveSessions == 0 })
}

// eventfds counts this process's open eventfds.
func eventfds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && l == "anon_inode:[eventfd]" {
			n++
		}
	}
	return n
}
