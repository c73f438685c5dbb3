package hostmode_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/backend/hostmode"
	"github.com/vgpu-project/vgpu/backend/session"
	"github.com/vgpu-project/vgpu/protocol"
)

func frame[T any](op protocol.Opcode, id uint64, req *T, segs []protocol.Segment) []byte {
	return protocol.AppendFrame(nil, protocol.NewHeader(op, id), protocol.Bytes(req), segs)
}

// FuzzHostShare feeds a host-mode session (sim device) arbitrary frames,
// with a memfd attached to the i-th frame where bit i of sealed (a memfd
// sealed against shrinking) or unsealed (one that is not) is set. The
// session must neither panic nor hang, and once it ends no fd and no
// mapping of those memfds may be left.
func FuzzHostShare(f *testing.F) {
	const base = 1 << 40
	var conv []byte
	add := func(b []byte) { conv = append(conv, b...) }
	add(frame(protocol.OpHello, 1, &protocol.HelloReq{Major: 1, Features: protocol.FeatureHostShare | protocol.FeatureInline}, nil))
	add(frame(protocol.OpHostShare, 2, &protocol.HostShareReq{Base: base, Size: 64 << 10}, nil))
	add(frame(protocol.OpMemAlloc, 3, &protocol.MemAllocReq{Size: 64 << 10}, nil))
	add(frame(protocol.OpMemcpyHtoD, 4, &protocol.MemcpyHtoDReq{Dst: 0x7f0000000000, Src: protocol.BufRef{Kind: protocol.BufSegments, Len: 8192}}, []protocol.Segment{{GPA: base, Len: 8192}}))
	add(frame(protocol.OpGuestRegister, 5, &protocol.GuestRegisterReq{Flags: protocol.RegisterMapped, Size: 64 << 10}, []protocol.Segment{{GPA: base, Len: 64 << 10}}))
	add(frame(protocol.OpMemcpyDtoH, 6, &protocol.MemcpyDtoHReq{Src: 0x7f0000000000, Dst: protocol.BufRef{Kind: protocol.BufRegion, Region: 0x1002, Len: 4096}}, nil))
	add(frame(protocol.OpHostUnshare, 7, &protocol.HostUnshareReq{Base: base}, nil))
	add(frame(protocol.OpHostShare, 8, &protocol.HostShareReq{Base: base + 4096, Size: 8192}, nil))
	add(frame(protocol.OpPing, 9, &protocol.Empty{}, nil))
	f.Add(conv, uint64(1<<1|1<<7|1<<8), uint64(0))
	f.Add(conv, uint64(1<<1), uint64(1<<7))
	f.Add(conv, uint64(0), uint64(0))

	drv, err := sim.New(sim.Config{Devices: 1, MemBytes: 64 << 20})
	if err != nil {
		f.Fatal(err)
	}
	dev, _ := drv.Context(0)
	f.Fuzz(func(t *testing.T, data []byte, sealed, unsealed uint64) {
		before := openFDs(t)
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		backendEnd, clientEnd := fileConn(t, fds[0]), fileConn(t, fds[1])
		conn := hostmode.NewConn(backendEnd, "unix:fuzz", hostmode.Options{MaxShares: 4, MaxShareBytes: 1 << 20})
		s := session.New(conn, session.Config{Devices: []device.Context{dev}, DeviceKind: "sim", Limits: protocol.Limits{MaxPayload: 1 << 20, MaxSegments: 4096}})
		done := make(chan error, 1)
		go func() { done <- s.Serve(context.Background()) }()
		go io.Copy(io.Discard, clientEnd) //nolint:errcheck // drain replies
		for i := 0; len(data) > 0; i++ {
			n := len(data)
			if n >= protocol.HeaderSize {
				payload := uint64(binary.LittleEndian.Uint32(data[24:]))
				nsegs := uint64(binary.LittleEndian.Uint32(data[12:]))
				if fl := protocol.HeaderSize + (payload+7)&^7 + nsegs*protocol.SegmentSize; fl < uint64(n) {
					n = int(fl)
				}
			}
			var attach []int
			if i < 64 && sealed&(1<<i) != 0 {
				attach = append(attach, memfd(t, 64<<10, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW))
			}
			if i < 64 && unsealed&(1<<i) != 0 {
				attach = append(attach, memfd(t, 64<<10, 0))
			}
			var oob []byte
			if len(attach) > 0 {
				oob = unix.UnixRights(attach...)
			}
			_, _, err := clientEnd.WriteMsgUnix(data[:n], oob, nil)
			for _, fd := range attach {
				unix.Close(fd)
			}
			if err != nil {
				break // the session hung up
			}
			data = data[n:]
		}
		clientEnd.CloseWrite()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("session did not end after its input ended")
		}
		clientEnd.Close()
		// The session's goroutines close their descriptors as they
		// return, which may be just after done: wait for the count to
		// come back (a leak never does).
		after := openFDs(t)
		for deadline := time.Now().Add(5 * time.Second); after != before && time.Now().Before(deadline); after = openFDs(t) {
			time.Sleep(5 * time.Millisecond)
		}
		if after != before {
			t.Fatalf("%d fds open 5 s after the session, %d before", after, before)
		}
	})
}

func memfd(t *testing.T, size int64, seals int) int {
	fd, err := unix.MemfdCreate("vgpu-fuzz", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		t.Fatal(err)
	}
	if seals != 0 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
			t.Fatal(err)
		}
	}
	return fd
}

func fileConn(t *testing.T, fd int) *net.UnixConn {
	f := os.NewFile(uintptr(fd), "socketpair")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	return c.(*net.UnixConn)
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
