package session_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/engine"
	"github.com/vgpu-project/vgpu/backend/session"
	"github.com/vgpu-project/vgpu/protocol"
)

// Small device-to-host copies answered inline, in both ways of making them
// (vgpu serve --d2h-small), in a shared and an exclusive context: sizes
// around the bounce buffer's, unaligned device addresses, the default
// stream and a guest stream whose queued work the copy must follow, the
// async flag, and a bad address that fails without ending the session.
func TestInlineDtoHModes(t *testing.T) {
	for _, mode := range []session.DtoHMode{session.DtoHBounce, session.DtoHSync} {
		for _, excl := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/exclusive=%v", mode, excl), func(t *testing.T) {
				e := start(t, opts{d2hSmall: mode, exclusive: excl})
				const size = 256 << 10
				p := e.alloc(size)
				data := make([]byte, size)
				for i := range data {
					data[i] = byte(i*131 + i>>9)
				}
				if st := e.htod(p, data); st != 0 {
					t.Fatalf("htod: %v", device.Result(st))
				}
				for _, n := range []uint64{1, 4, 4095, engine.BounceSize - 1, engine.BounceSize, engine.BounceSize + 1, size - 3} {
					st, got := e.dtoh(p+3, n)
					if st != 0 || uint64(len(got)) != n || !bytes.Equal(got, data[3:3+n]) {
						t.Fatalf("%d bytes: status %v, %d bytes back, equal %v", n, device.Result(st), len(got), bytes.Equal(got, data[3:3+min(n, uint64(len(got)))]))
					}
				}
				// A guest stream: the copy follows the work queued on it.
				strm, _ := must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{Flags: 1}, nil)
				for i := 0; i < 20; i++ {
					v := byte(0x40 + i)
					must[protocol.MemsetReq, protocol.Empty](e, protocol.OpMemset, protocol.MemsetReq{Dst: p, Count: 4096, ElemSize: 1, Value: uint32(v), Stream: strm.Handle, Flags: protocol.CopyAsync}, nil)
					for _, flags := range []uint32{0, protocol.CopyAsync} {
						req := protocol.MemcpyDtoHReq{Src: p + 100, Stream: strm.Handle, Flags: flags, Dst: protocol.BufRef{Kind: protocol.BufInline, Len: 4}}
						f, err := e.c.Call(protocol.OpMemcpyDtoH, 0, protocol.Bytes(&req), nil)
						if err != nil || f.Status != 0 || !bytes.Equal(f.Payload, []byte{v, v, v, v}) {
							t.Fatalf("after memset %#x on the stream (flags %d): %v status %v payload %x", v, flags, err, device.Result(f.Status), f.Payload)
						}
					}
				}
				// A freed address fails; the session goes on.
				q := e.alloc(4096)
				must[protocol.PtrReq, protocol.Empty](e, protocol.OpMemFree, protocol.PtrReq{Ptr: q}, nil)
				if st, _ := e.dtoh(q, 4); st == 0 {
					t.Fatal("a copy from freed memory succeeded")
				}
				e.ping()
				if st, got := e.dtoh(p+100, 4); st != 0 || !bytes.Equal(got, []byte{0x53, 0x53, 0x53, 0x53}) {
					t.Fatalf("after the failure: status %v payload %x", device.Result(st), got)
				}
			})
		}
	}
}
