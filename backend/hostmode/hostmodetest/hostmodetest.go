// Package hostmodetest plays a host-mode client that shares memory with the
// backend (OpHostShare over SCM_RIGHTS): memfds, a protocol client on a unix
// socket, and the round trip that backend/hostmode and backend/worker test
// against the sim device.
package hostmodetest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/backend/shmring"
	"github.com/vgpu-project/vgpu/protocol"
)

// Seals a well-behaved client sets on a shared memfd.
const Seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// Memfd is a memfd of the test process and its mapping.
type Memfd struct {
	FD   int
	Mem  []byte
	Name string
}

// NewMemfd creates a memfd of size bytes with seals (0: none), mapped
// shared. It is closed and unmapped at the end of the test.
func NewMemfd(t testing.TB, name string, size int, seals int) *Memfd {
	t.Helper()
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatalf("memfd_create: %v", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatalf("ftruncate: %v", err)
	}
	if seals != 0 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
			t.Fatalf("F_ADD_SEALS: %v", err)
		}
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	m := &Memfd{FD: fd, Mem: mem, Name: name}
	t.Cleanup(func() { _ = unix.Munmap(mem); _ = unix.Close(fd) })
	return m
}

// Client is a protocol client on a host-mode unix socket that can attach
// fds to a frame.
type Client struct {
	*sessiontest.Client
	UC *net.UnixConn
	// Ring is set once the client moved onto shared-memory rings
	// (StartRing): frames travel there, fds in carriers on UC.
	Ring *shmring.Endpoint
}

// Dial connects to a host-mode socket.
func Dial(t testing.TB, path string) *Client {
	t.Helper()
	uc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{Client: sessiontest.NewClient(uc), UC: uc}
	t.Cleanup(func() { c.Close() })
	return c
}

// CallFDs sends a request with fds attached to its first byte and waits
// for the reply.
func (c *Client) CallFDs(op protocol.Opcode, payload []byte, fds ...int) (protocol.Frame, error) {
	id := c.ID()
	ch := c.Expect(id)
	b := protocol.AppendFrame(nil, protocol.NewHeader(op, id), payload, nil)
	if c.Ring != nil {
		if len(fds) > 0 {
			var pos [protocol.RingCarrierSize]byte
			binary.LittleEndian.PutUint64(pos[:], c.Ring.WritePos())
			if _, _, err := c.UC.WriteMsgUnix(pos[:], unix.UnixRights(fds...), nil); err != nil {
				return protocol.Frame{}, err
			}
			c.Ring.NoteCarrier()
		}
		if _, err := c.Ring.Write(b); err != nil {
			return protocol.Frame{}, err
		}
		return sessiontest.Wait(ch, sessiontest.Timeout)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.UC.WriteMsgUnix(b, oob, nil); err != nil {
		return protocol.Frame{}, err
	}
	return sessiontest.Wait(ch, sessiontest.Timeout)
}

// Share sends HOST_SHARE{base, size} with fds and returns the status.
func (c *Client) Share(t testing.TB, base, size uint64, fds ...int) int32 {
	t.Helper()
	f, err := c.CallFDs(protocol.OpHostShare, protocol.Append(nil, &protocol.HostShareReq{Base: base, Size: size}), fds...)
	if err != nil {
		t.Fatalf("HOST_SHARE: %v", err)
	}
	return f.Status
}

// Hello opens the session asking for host sharing; it returns the
// features the backend accepted.
func (c *Client) Hello(t testing.TB) uint64 {
	t.Helper()
	st, rep, _, err := sessiontest.Do[protocol.HelloReq, protocol.HelloReply](c.Client, protocol.OpHello,
		&protocol.HelloReq{Major: uint16(protocol.Major), Role: protocol.RoleLibrary, Features: protocol.FeatureBatch | protocol.FeatureInline | protocol.FeatureHostShare}, nil)
	if err != nil || st != 0 {
		t.Fatalf("HELLO: %v status %d", err, st)
	}
	return rep.Features
}

// HelloFeatures opens the session asking for features.
func (c *Client) HelloFeatures(t testing.TB, features uint64) uint64 {
	t.Helper()
	st, rep, _, err := sessiontest.Do[protocol.HelloReq, protocol.HelloReply](c.Client, protocol.OpHello,
		&protocol.HelloReq{Major: uint16(protocol.Major), Role: protocol.RoleLibrary, Features: features}, nil)
	if err != nil || st != 0 {
		t.Fatalf("HELLO: %v status %d", err, st)
	}
	return rep.Features
}

// RingParts are what a client shares for rings: the memfd and the four
// eventfds, in OpRingSetup's order.
type RingParts struct {
	Mem   *Memfd
	Bells [4]int
}

// FDs lists them in OpRingSetup's order.
func (p *RingParts) FDs() []int { return append([]int{p.Mem.FD}, p.Bells[:]...) }

// NewRingParts makes a well-formed set for rings of ringBytes each.
func NewRingParts(t testing.TB, ringBytes uint64) *RingParts {
	t.Helper()
	p := &RingParts{Mem: NewMemfd(t, "vgpu-ring", int(shmring.MemfdSize(ringBytes)), Seals)}
	shmring.InitMemfd(p.Mem.Mem, ringBytes)
	for i := range p.Bells {
		fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		p.Bells[i] = fd
		t.Cleanup(func() { _ = unix.Close(fd) })
	}
	return p
}

// SendRingSetup sends OPRING_SETUP with fds on the socket and returns the
// reply read there (a refusal: the session stays on the socket).
func (c *Client) SendRingSetup(t testing.TB, ringBytes uint64, fds []int) int32 {
	t.Helper()
	f, err := c.CallFDs(protocol.OpRingSetup, protocol.Append(nil, &protocol.RingSetupReq{RingBytes: ringBytes}), fds...)
	if err != nil {
		t.Fatalf("RING_SETUP: %v", err)
	}
	return f.Status
}

// StartRing moves the session onto rings of ringBytes each (HELLO must
// have negotiated FeatureShmRing) and returns a client that speaks on
// them; c must not be used any more.
func StartRing(t testing.TB, c *Client, ringBytes uint64, parts *RingParts) *Client {
	t.Helper()
	if parts == nil {
		parts = NewRingParts(t, ringBytes)
	}
	sock, err := dupConn(c.UC)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := shmring.NewClient(parts.FDs(), ringBytes, shmring.Options{Sock: sock, OnSock: func() bool { return sockEnded(sock) }})
	if err != nil {
		_ = unix.Close(sock)
		t.Fatalf("ring client: %v", err)
	}
	rc := sessiontest.NewClient(&ringConn{ep: ep, uc: c.UC})
	nc := &Client{Client: rc, UC: c.UC}
	t.Cleanup(func() { nc.Close() })
	// The reply comes on the ring.
	id := c.ID() | 1<<62
	ch := rc.Expect(id)
	b := protocol.AppendFrame(nil, protocol.NewHeader(protocol.OpRingSetup, id), protocol.Append(nil, &protocol.RingSetupReq{RingBytes: ringBytes}), nil)
	if _, _, err := c.UC.WriteMsgUnix(b, unix.UnixRights(parts.FDs()...), nil); err != nil {
		t.Fatal(err)
	}
	f, err := sessiontest.Wait(ch, sessiontest.Timeout)
	if err != nil || f.Status != 0 {
		t.Fatalf("RING_SETUP: %v status %d (on the ring)", err, f.Status)
	}
	nc.Ring = ep
	return nc
}

func dupConn(uc *net.UnixConn) (int, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	cerr := rc.Control(func(s uintptr) { fd, err = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) })
	if cerr != nil {
		return -1, cerr
	}
	return fd, err
}

// sockEnded: has the peer closed the socket (nothing else comes on it in
// ring mode)?
func sockEnded(fd int) bool {
	var b [1]byte
	n, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	return err != unix.EAGAIN && err != unix.EINTR && (err != nil || n == 0)
}

// ringConn is a net.Conn on a ring endpoint (the client's side).
type ringConn struct {
	ep *shmring.Endpoint
	uc *net.UnixConn
}

func (r *ringConn) Read(b []byte) (int, error)         { return r.ep.Read(b) }
func (r *ringConn) Write(b []byte) (int, error)        { return r.ep.Write(b) }
func (r *ringConn) Close() error                       { _ = r.ep.Close(); return r.uc.Close() }
func (r *ringConn) LocalAddr() net.Addr                { return r.uc.LocalAddr() }
func (r *ringConn) RemoteAddr() net.Addr               { return r.uc.RemoteAddr() }
func (r *ringConn) SetDeadline(time.Time) error        { return nil }
func (r *ringConn) SetReadDeadline(time.Time) error    { return nil }
func (r *ringConn) SetWriteDeadline(t time.Time) error { r.ep.SetWriteDeadline(t); return nil }

// Ping checks that the session still serves.
func (c *Client) Ping(t testing.TB) {
	t.Helper()
	f, err := c.Call(protocol.OpPing, 0, nil, nil)
	if err != nil || f.Status != 0 {
		t.Fatalf("PING after that: %v status %d", err, f.Status)
	}
}

func do[Req, Rep any](t testing.TB, c *Client, op protocol.Opcode, req *Req, segs []protocol.Segment) Rep {
	t.Helper()
	st, rep, _, err := sessiontest.DoSegs[Req, Rep](c.Client, op, req, segs)
	if err != nil || st != 0 {
		t.Fatalf("%v: %v status %d", op, err, st)
	}
	return rep
}

// RoundTrip shares a 1 MiB memfd at base and checks, against a backend on
// the sim device: HtoD and DtoH through segments, a registered region,
// and a device-mapped registration (zero copy: the device reads and
// writes the shared pages through its device address); then it unshares.
func RoundTrip(t testing.TB, c *Client, base uint64) {
	t.Helper()
	const size = 1 << 20
	m := NewMemfd(t, "vgpu-hostmodetest", size, Seals)
	for i := range m.Mem {
		m.Mem[i] = byte(i*7 + i>>12)
	}
	if st := c.Share(t, base, size, m.FD); st != 0 {
		t.Fatalf("HOST_SHARE of a sealed memfd: status %d", st)
	}
	const n = 256 << 10
	dev := do[protocol.MemAllocReq, protocol.PtrReply](t, c, protocol.OpMemAlloc, &protocol.MemAllocReq{Size: n}, nil).Ptr
	// HtoD from [0, n) of the share, DtoH into [n, 2n), by segments.
	do[protocol.MemcpyHtoDReq, protocol.Empty](t, c, protocol.OpMemcpyHtoD,
		&protocol.MemcpyHtoDReq{Dst: dev, Src: protocol.BufRef{Kind: protocol.BufSegments, Len: n}},
		[]protocol.Segment{{GPA: base, Len: n / 2}, {GPA: base + n/2, Len: n / 2}})
	do[protocol.MemcpyDtoHReq, protocol.Empty](t, c, protocol.OpMemcpyDtoH,
		&protocol.MemcpyDtoHReq{Src: dev, Dst: protocol.BufRef{Kind: protocol.BufSegments, Len: n}},
		[]protocol.Segment{{GPA: base + n, Len: n}})
	if !bytes.Equal(m.Mem[n:2*n], m.Mem[:n]) {
		t.Fatal("HtoD then DtoH through shared memory: the bytes differ")
	}
	// A mapped registration of the whole share: a device address for it.
	reg := do[protocol.GuestRegisterReq, protocol.GuestRegisterReply](t, c, protocol.OpGuestRegister,
		&protocol.GuestRegisterReq{Flags: protocol.RegisterMapped, Size: size}, []protocol.Segment{{GPA: base, Len: size}})
	if reg.Region == 0 || reg.DevPtr == 0 {
		t.Fatalf("mapped registration: %+v", reg)
	}
	// The device writes the shared pages through that address ...
	copy(m.Mem[2*n:3*n], bytes.Repeat([]byte{0}, n))
	do[protocol.MemcpyDtoDReq, protocol.Empty](t, c, protocol.OpMemcpyDtoD, &protocol.MemcpyDtoDReq{Dst: reg.DevPtr + 2*n, Src: dev, Size: n}, nil)
	if !bytes.Equal(m.Mem[2*n:3*n], m.Mem[:n]) {
		t.Fatal("device write through the mapped address did not reach the shared pages")
	}
	// ... and reads them: the client changes them, the device sees it.
	for i := 3 * n; i < 4*n; i++ {
		m.Mem[i] = byte(i ^ 0x5a)
	}
	do[protocol.MemcpyDtoDReq, protocol.Empty](t, c, protocol.OpMemcpyDtoD, &protocol.MemcpyDtoDReq{Dst: dev, Src: reg.DevPtr + 3*n, Size: n}, nil)
	// Region copy back into [0, n).
	do[protocol.MemcpyDtoHReq, protocol.Empty](t, c, protocol.OpMemcpyDtoH,
		&protocol.MemcpyDtoHReq{Src: dev, Dst: protocol.BufRef{Kind: protocol.BufRegion, Region: reg.Region, Offset: 0, Len: n}}, nil)
	if !bytes.Equal(m.Mem[:n], m.Mem[3*n:4*n]) {
		t.Fatal("device read through the mapped address, copied back by region: the bytes differ")
	}
	do[protocol.HandleReq, protocol.Empty](t, c, protocol.OpGuestUnregister, &protocol.HandleReq{Handle: reg.Region}, nil)
	do[protocol.HostUnshareReq, protocol.Empty](t, c, protocol.OpHostUnshare, &protocol.HostUnshareReq{Base: base}, nil)
	// Gone: segments there are refused now.
	st, _, _, err := sessiontest.DoSegs[protocol.MemcpyHtoDReq, protocol.Empty](c.Client, protocol.OpMemcpyHtoD,
		&protocol.MemcpyHtoDReq{Dst: dev, Src: protocol.BufRef{Kind: protocol.BufSegments, Len: 4096}}, []protocol.Segment{{GPA: base, Len: 4096}})
	if err != nil || st != 1 {
		t.Fatalf("segments in an ended share: %v status %d, want 1", err, st)
	}
	do[protocol.PtrReq, protocol.Empty](t, c, protocol.OpMemFree, &protocol.PtrReq{Ptr: dev}, nil)
}

// CountFDs returns the number of open fds of this process.
func CountFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents) - 1 // the directory's own fd
}

// Mappings counts this process's mappings of memfds named name.
func Mappings(t testing.TB, name string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), fmt.Sprintf("/memfd:%s (deleted)", name))
}
