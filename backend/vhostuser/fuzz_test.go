package vhostuser

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"testing"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/vsock"
)

// fuzzSeeds are well-formed and malformed requests (header + body) in the
// order QEMU sends them; FuzzVhostUserMessage starts from them.
func fuzzSeeds() [][]byte {
	msg := func(req, flags uint32, body []byte) []byte {
		b := make([]byte, 12, 12+len(body))
		binary.LittleEndian.PutUint32(b[0:], req)
		binary.LittleEndian.PutUint32(b[4:], flagVersion|flags)
		binary.LittleEndian.PutUint32(b[8:], uint32(len(body)))
		return append(b, body...)
	}
	u64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	st := func(i, n uint32) []byte {
		return binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, i), n)
	}
	mt := binary.LittleEndian.AppendUint32(nil, 1)
	mt = binary.LittleEndian.AppendUint32(mt, 0)
	for _, x := range []uint64{0, 1 << 20, 0x7f0000000000, 0} {
		mt = binary.LittleEndian.AppendUint64(mt, x)
	}
	addr := func(i uint32, d, u, a uint64) []byte {
		b := st(i, 0)
		for _, x := range []uint64{d, u, a, 0} {
			b = binary.LittleEndian.AppendUint64(b, x)
		}
		return b
	}
	cfg := append(st(0, 8), make([]byte, 12)...)[:20]
	var session []byte
	for _, m := range [][]byte{
		msg(reqGetFeatures, 0, nil),
		msg(reqGetProtocolFeatures, 0, nil),
		msg(reqSetProtocolFeatures, 0, u64(protoFeatures)),
		msg(reqSetOwner, flagNeedReply, nil),
		msg(reqGetConfig, 0, cfg),
		msg(reqSetFeatures, 0, u64(1<<32|1<<29)),
		msg(reqSetMemTable, flagNeedReply, mt),
		msg(reqSetVringNum, flagNeedReply, st(0, 8)),
		msg(reqSetVringAddr, flagNeedReply, addr(0, 0x7f0000000000, 0x7f0000001000, 0x7f0000000800)),
		msg(reqSetVringKick, flagNeedReply, u64(0)),
		msg(reqGetVringBase, 0, st(0, 0)),
	} {
		session = append(session, m...)
	}
	return [][]byte{
		session,
		msg(reqGetConfig, 0, append(st(0, 300), 0, 0, 0, 0)),
		msg(reqSetMemTable, 0, make([]byte, 8)),
		msg(99, flagNeedReply, nil),
		{1, 0, 0, 0, 3},
	}
}

// FuzzVhostUserMessage feeds a byte stream (one or more requests) with nfds
// fds attached (memfds and eventfds) through the real read path and
// dispatcher. The server must never panic, and must free every fd.
func FuzzVhostUserMessage(f *testing.F) {
	for i, s := range fuzzSeeds() {
		f.Add(s, uint8(i%3))
	}
	f.Fuzz(func(t *testing.T, stream []byte, nfds uint8) {
		if len(stream) > 32<<10 {
			return
		}
		dev, err := vsock.NewDevice(vsock.Config{GuestCID: 3})
		if err != nil {
			t.Fatal(err)
		}
		s := &Server{backend: dev, log: hclog.NewNullLogger()}
		ours, theirs := socketPair(t)
		defer ours.Close()
		var fds []int
		for i := 0; i < int(nfds%9); i++ {
			var fd int
			if i%2 == 0 {
				fd, err = unix.MemfdCreate("fuzz", unix.MFD_CLOEXEC)
				if err == nil {
					err = unix.Ftruncate(fd, 1<<20)
				}
			} else {
				fd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
			}
			if err != nil {
				t.Fatal(err)
			}
			fds = append(fds, fd)
		}
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			if len(stream) > 0 || len(oob) > 0 {
				theirs.WriteMsgUnix(append([]byte{}, stream...), oob, nil)
			}
			for _, fd := range fds {
				unix.Close(fd)
			}
			theirs.CloseWrite()
			io.Copy(io.Discard, theirs)
			theirs.Close()
		}()
		_ = s.serveConn(ours)
		ours.Close()
		<-done
		s.mem.Set(nil)
	})
}

func socketPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conv := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "sp")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	return conv(fds[0]), conv(fds[1])
}
