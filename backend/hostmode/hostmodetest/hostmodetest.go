// Package hostmodetest plays a host-mode client that shares memory with the
// backend (OpHostShare over SCM_RIGHTS): memfds, a protocol client on a unix
// socket, and the round trip that backend/hostmode and backend/worker test
// against the sim device.
package hostmodetest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
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
