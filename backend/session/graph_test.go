package session_test

import (
	"bytes"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// A capture records instead of executing; its graph replays the work each
// time it is launched; what a capture cannot hold is refused; everything is
// the session's by handle.
func TestStreamCaptureAndGraphs(t *testing.T) { testStreamCapture(t, opts{}) }

func testStreamCapture(t *testing.T, o opts) {
	e := start(t, o)
	p := e.alloc(4096)
	q := e.alloc(4096)
	if st := e.htod(p, bytes.Repeat([]byte{0x11}, 64)); st != 0 {
		t.Fatalf("htod: %v", device.Result(st))
	}
	strm, _ := must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{}, nil)
	s := strm.Handle

	status := func() uint32 {
		r, _ := must[protocol.HandleReq, protocol.CaptureStatusReply](e, protocol.OpStreamIsCapturing, protocol.HandleReq{Handle: s}, nil)
		return r.Status
	}
	if got := status(); got != device.CaptureStatusNone {
		t.Fatalf("status before capture %d", got)
	}
	must[protocol.BeginCaptureReq, protocol.Empty](e, protocol.OpStreamBeginCapture, protocol.BeginCaptureReq{Stream: s, Mode: device.CaptureModeThreadLocal}, nil)
	if got := status(); got != device.CaptureStatusActive {
		t.Fatalf("status in capture %d", got)
	}
	st, _, _ := do[protocol.BeginCaptureReq, protocol.Empty](e, protocol.OpStreamBeginCapture, protocol.BeginCaptureReq{Stream: s}, nil)
	wantStatus(t, "begin twice", st, device.ErrIllegalState)

	// Recorded: q += p's bytes, then q[0:16] = 0x22.
	must[protocol.MemcpyDtoDReq, protocol.Empty](e, protocol.OpMemcpyDtoD, protocol.MemcpyDtoDReq{Dst: q, Src: p, Size: 64, Stream: s, Flags: protocol.CopyAsync}, nil)
	must[protocol.MemsetReq, protocol.Empty](e, protocol.OpMemset, protocol.MemsetReq{Dst: q, Count: 16, ElemSize: 1, Value: 0x22, Stream: s, Flags: protocol.CopyAsync}, nil)
	// Refused: guest memory in a graph, a host function.
	st, _, _ = do[protocol.MemcpyHtoDReq, protocol.Empty](e, protocol.OpMemcpyHtoD,
		protocol.MemcpyHtoDReq{Dst: q, Stream: s, Flags: protocol.CopyAsync, Src: protocol.BufRef{Kind: protocol.BufInline, Len: 4}}, []byte{1, 2, 3, 4})
	wantStatus(t, "htod in capture", st, device.ErrCaptureUnsupported)
	st, _, _ = do[protocol.HostFuncReq, protocol.Empty](e, protocol.OpHostFuncLaunch, protocol.HostFuncReq{Stream: s, CallbackID: 5}, nil)
	wantStatus(t, "host function in capture", st, device.ErrCaptureUnsupported)

	if _, got := e.dtoh(q, 64); !bytes.Equal(got, make([]byte, 64)) {
		t.Fatalf("the capture executed: % x", got[:16])
	}
	g, _ := must[protocol.HandleReq, protocol.HandleReply](e, protocol.OpStreamEndCapture, protocol.HandleReq{Handle: s}, nil)
	if got := status(); got != device.CaptureStatusNone {
		t.Fatalf("status after capture %d", got)
	}
	x, _ := must[protocol.GraphInstantiateReq, protocol.HandleReply](e, protocol.OpGraphInstantiate, protocol.GraphInstantiateReq{Graph: g.Handle}, nil)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpGraphDestroy, protocol.HandleReq{Handle: g.Handle}, nil)

	want := append(bytes.Repeat([]byte{0x22}, 16), bytes.Repeat([]byte{0x11}, 48)...)
	for i := 0; i < 2; i++ { // each launch replays the work
		must[protocol.MemsetReq, protocol.Empty](e, protocol.OpMemset, protocol.MemsetReq{Dst: q, Count: 64, ElemSize: 1, Value: 0}, nil)
		must[protocol.GraphLaunchReq, protocol.Empty](e, protocol.OpGraphLaunch, protocol.GraphLaunchReq{Exec: x.Handle, Stream: s}, nil)
		must[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamSynchronize, protocol.HandleReq{Handle: s}, nil)
		if _, got := e.dtoh(q, 64); !bytes.Equal(got, want) {
			t.Fatalf("launch %d: % x", i, got)
		}
	}
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpGraphExecDestroy, protocol.HandleReq{Handle: x.Handle}, nil)

	tests := []struct {
		name string
		op   protocol.Opcode
		req  []byte
		want device.Result
	}{
		{"begin on the default stream", protocol.OpStreamBeginCapture, protocol.Bytes(&protocol.BeginCaptureReq{Stream: 0}), device.ErrCaptureUnsupported},
		{"begin on a foreign stream", protocol.OpStreamBeginCapture, protocol.Bytes(&protocol.BeginCaptureReq{Stream: 0x9999}), device.ErrInvalidHandle},
		{"begin, bad mode", protocol.OpStreamBeginCapture, protocol.Bytes(&protocol.BeginCaptureReq{Stream: s, Mode: 3}), device.ErrInvalidValue},
		{"end without a capture", protocol.OpStreamEndCapture, protocol.Bytes(&protocol.HandleReq{Handle: s}), device.ErrIllegalState},
		{"instantiate a destroyed graph", protocol.OpGraphInstantiate, protocol.Bytes(&protocol.GraphInstantiateReq{Graph: g.Handle}), device.ErrInvalidHandle},
		{"instantiate, bad flags", protocol.OpGraphInstantiate, protocol.Bytes(&protocol.GraphInstantiateReq{Graph: g.Handle, Flags: 0x10}), device.ErrInvalidValue},
		{"launch a destroyed exec", protocol.OpGraphLaunch, protocol.Bytes(&protocol.GraphLaunchReq{Exec: x.Handle, Stream: s}), device.ErrInvalidHandle},
		{"destroy a destroyed exec", protocol.OpGraphExecDestroy, protocol.Bytes(&protocol.HandleReq{Handle: x.Handle}), device.ErrInvalidHandle},
		{"destroy a destroyed graph", protocol.OpGraphDestroy, protocol.Bytes(&protocol.HandleReq{Handle: g.Handle}), device.ErrInvalidHandle},
		{"status of a foreign stream", protocol.OpStreamIsCapturing, protocol.Bytes(&protocol.HandleReq{Handle: 0x9999}), device.ErrInvalidHandle},
	}
	for _, tc := range tests {
		f, err := e.c.Call(tc.op, 0, tc.req, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, tc.name, f.Status, tc.want)
	}

	// A synchronous call on a capturing stream ends the capture badly;
	// a stream destroyed while capturing takes its capture with it.
	must[protocol.BeginCaptureReq, protocol.Empty](e, protocol.OpStreamBeginCapture, protocol.BeginCaptureReq{Stream: s}, nil)
	st, _, _ = do[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamSynchronize, protocol.HandleReq{Handle: s}, nil)
	wantStatus(t, "synchronize in capture", st, device.ErrCaptureUnsupported)
	st, _, _ = do[protocol.HandleReq, protocol.HandleReply](e, protocol.OpStreamEndCapture, protocol.HandleReq{Handle: s}, nil)
	wantStatus(t, "end an invalidated capture", st, device.ErrCaptureInvalidated)
	must[protocol.BeginCaptureReq, protocol.Empty](e, protocol.OpStreamBeginCapture, protocol.BeginCaptureReq{Stream: s}, nil)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamDestroy, protocol.HandleReq{Handle: s}, nil)
	e.ping()
}

// A session that ends mid-capture, holding graphs, ends cleanly.
func TestGraphsReleasedAtEnd(t *testing.T) { testGraphsReleased(t, opts{}) }

func testGraphsReleased(t *testing.T, o opts) {
	e := start(t, o)
	p := e.alloc(4096)
	strm, _ := must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{}, nil)
	for i := 0; i < 2; i++ {
		must[protocol.BeginCaptureReq, protocol.Empty](e, protocol.OpStreamBeginCapture, protocol.BeginCaptureReq{Stream: strm.Handle}, nil)
		must[protocol.MemsetReq, protocol.Empty](e, protocol.OpMemset, protocol.MemsetReq{Dst: p, Count: 8, ElemSize: 1, Value: 1, Stream: strm.Handle, Flags: protocol.CopyAsync}, nil)
		if i == 1 {
			break // left capturing
		}
		g, _ := must[protocol.HandleReq, protocol.HandleReply](e, protocol.OpStreamEndCapture, protocol.HandleReq{Handle: strm.Handle}, nil)
		must[protocol.GraphInstantiateReq, protocol.HandleReply](e, protocol.OpGraphInstantiate, protocol.GraphInstantiateReq{Graph: g.Handle}, nil)
	}
	if err := e.close(); err != nil {
		t.Fatalf("session end: %v", err)
	}
}
