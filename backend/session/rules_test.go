package session_test

import (
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// Protocol and metrics rules the hostile client found broken (issue 20,
// item 7). Each of these failed before the fix.

// Nothing is served before HELLO; HELLO itself, and everything after it,
// is.
func TestNothingBeforeHello(t *testing.T) {
	e := start(t, opts{noHello: true})
	for _, op := range []protocol.Opcode{protocol.OpPing, protocol.OpMemAlloc, protocol.OpDeviceGetCount, protocol.OpHostFuncDone, protocol.OpStreamCreate} {
		info, _ := protocol.Lookup(op)
		f, err := e.c.Call(op, 0, make([]byte, info.ReqSize()), nil)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, op.String()+" before HELLO", f.Status, device.ErrNotInitialized)
	}
	// A continued segment list before HELLO is refused too.
	h := protocol.NewHeader(protocol.OpMemcpyHtoD, 77)
	h.Flags = protocol.FlagMoreSegments
	ch := e.c.Expect(77)
	if err := e.c.Send(protocol.AppendFrame(nil, h, protocol.Bytes(&protocol.MemcpyHtoDReq{}), nil)); err != nil {
		t.Fatal(err)
	}
	if f, err := waitReply(ch); err != nil || device.Result(f.Status) != device.ErrNotInitialized {
		t.Fatalf("continued frame before HELLO: %v %d", err, f.Status)
	}
	if _, err := e.c.Hello(); err != nil {
		t.Fatal(err)
	}
	e.ping()
	e.alloc(4096)
}

// Counters are indexed by the full opcode: an unknown 0x1101 is not
// DEVICE_GET_COUNT (0x0101), it is an unknown opcode.
func TestCountersByFullOpcode(t *testing.T) {
	e := start(t, opts{})
	for _, op := range []protocol.Opcode{0x1101, 0xf101, 0x8001} {
		f, err := e.c.Call(op, 0, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, "unknown opcode", f.Status, device.ErrNotSupported)
	}
	snap := e.stats.Snapshot()
	if n := snap.Ops["DEVICE_GET_COUNT"].Calls; n != 0 {
		t.Fatalf("DEVICE_GET_COUNT counted %d calls; only unknown opcodes were sent", n)
	}
	if n := snap.Ops["HELLO"].Calls; n != 1 {
		t.Fatalf("HELLO counted %d times (0x8001 must not count as 0x0001)", n)
	}
	if snap.UnknownOps != 3 {
		t.Fatalf("unknown opcodes counted %d, want 3", snap.UnknownOps)
	}
}

// A copy that was refused moved nothing: it is not counted in the bytes
// copied.
func TestRefusedCopiesNotCounted(t *testing.T) {
	e := start(t, opts{})
	p := e.alloc(4096)
	wantStatus(t, "copy past the allocation", e.htod(p+4000, make([]byte, 4096)), device.ErrInvalidValue)
	if st, _ := e.dtoh(p+1<<40, 4096); device.Result(st) != device.ErrInvalidValue {
		t.Fatalf("dtoh from a foreign pointer: %d", st)
	}
	// A valid range, but the inline bytes are not all there; a valid
	// range, from segments this connection may not send. (These two were
	// counted before: the bytes were added once the range was checked.)
	f, err := e.c.Call(protocol.OpMemcpyHtoD, 0, append(protocol.Bytes(&protocol.MemcpyHtoDReq{Dst: p, Src: protocol.BufRef{Kind: protocol.BufInline, Len: 4096}}), make([]byte, 8)...), nil)
	if err != nil || f.Status == 0 {
		t.Fatalf("short inline copy: %v %d", err, f.Status)
	}
	f, err = e.c.Call(protocol.OpMemcpyDtoH, 0, protocol.Bytes(&protocol.MemcpyDtoHReq{Src: p, Dst: protocol.BufRef{Kind: protocol.BufSegments, Len: 4096}}), nil)
	if err != nil || f.Status == 0 {
		t.Fatalf("segments without guest memory: %v %d", err, f.Status)
	}
	snap := e.stats.Snapshot()
	if snap.BytesHtoD != 0 || snap.BytesDtoH != 0 {
		t.Fatalf("refused copies counted: %d bytes in, %d out", snap.BytesHtoD, snap.BytesDtoH)
	}
	e.htod(p, make([]byte, 100))
	e.dtoh(p, 50)
	if snap := e.stats.Snapshot(); snap.BytesHtoD != 100 || snap.BytesDtoH != 50 {
		t.Fatalf("done copies: %d in, %d out; want 100, 50", snap.BytesHtoD, snap.BytesDtoH)
	}
}

// A frame whose first bytes arrived is not held for ever: after
// FrameTimeout the connection ends (and the session with it).
func TestHalfSentFrameTimesOut(t *testing.T) {
	e := start(t, opts{frameTimeout: 100 * time.Millisecond})
	p := e.alloc(4096)
	full := protocol.AppendFrame(nil, protocol.NewHeader(protocol.OpMemcpyHtoD, 9),
		append(protocol.Bytes(&protocol.MemcpyHtoDReq{Dst: p, Src: protocol.BufRef{Kind: protocol.BufInline, Len: 4096}}), make([]byte, 4096)...), nil)
	for _, cut := range []int{10, protocol.HeaderSize + 100} {
		e := start(t, opts{frameTimeout: 100 * time.Millisecond})
		if err := e.c.Send(full[:cut]); err != nil {
			t.Fatal(err)
		}
		select {
		case <-e.c.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("a frame cut after %d bytes was held open", cut)
		}
		if e.stats.Snapshot().FrameTimeouts != 1 {
			t.Fatalf("frame timeouts: %+v", e.stats.Snapshot())
		}
	}
	// An idle connection (between frames) is not a half-sent frame: e
	// was idle while both of those timed out.
	e.ping()
}
