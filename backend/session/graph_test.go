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

	// What a capture cannot hold is refused (guest memory in a graph, a
	// host function, a synchronous call on the stream) and invalidates
	// the capture, as natively: later calls on the stream and the end of
	// the capture answer 901, no graph is made, and the stream is usable
	// again.
	refused := map[string]func() int32{
		"htod in capture": func() int32 {
			st, _, _ := do[protocol.MemcpyHtoDReq, protocol.Empty](e, protocol.OpMemcpyHtoD,
				protocol.MemcpyHtoDReq{Dst: q, Stream: s, Flags: protocol.CopyAsync, Src: protocol.BufRef{Kind: protocol.BufInline, Len: 4}}, []byte{1, 2, 3, 4})
			return st
		},
		"host function in capture": func() int32 {
			st, _, _ := do[protocol.HostFuncReq, protocol.Empty](e, protocol.OpHostFuncLaunch, protocol.HostFuncReq{Stream: s, CallbackID: 5}, nil)
			return st
		},
		"synchronize in capture": func() int32 {
			st, _, _ := do[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamSynchronize, protocol.HandleReq{Handle: s}, nil)
			return st
		},
		"query in capture": func() int32 {
			st, _, _ := do[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamQuery, protocol.HandleReq{Handle: s}, nil)
			return st
		},
	}
	for name, call := range refused {
		wantCaptureInvalidated(t, e, s, q, name, call, device.ErrCaptureUnsupported)
	}
	// A stream destroyed while capturing takes its capture with it.
	must[protocol.BeginCaptureReq, protocol.Empty](e, protocol.OpStreamBeginCapture, protocol.BeginCaptureReq{Stream: s}, nil)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamDestroy, protocol.HandleReq{Handle: s}, nil)
	e.ping()
}

// wantCaptureInvalidated begins a capture on stream s, captures a memset
// of q, makes call (which must fail with want) and checks the capture is
// invalidated: its status, a later call on s and its end answer 901, and
// afterwards s works and nothing captured ran.
func wantCaptureInvalidated(t *testing.T, e *env, s, q uint64, name string, call func() int32, want device.Result) {
	t.Helper()
	status := func() uint32 {
		r, _ := must[protocol.HandleReq, protocol.CaptureStatusReply](e, protocol.OpStreamIsCapturing, protocol.HandleReq{Handle: s}, nil)
		return r.Status
	}
	memset := func(v uint32) int32 {
		st, _, _ := do[protocol.MemsetReq, protocol.Empty](e, protocol.OpMemset, protocol.MemsetReq{Dst: q, Count: 64, ElemSize: 1, Value: v, Stream: s, Flags: protocol.CopyAsync}, nil)
		return st
	}
	if st := memset(0); st != 0 {
		t.Fatalf("%s: memset before the capture: %v", name, device.Result(st))
	}
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamSynchronize, protocol.HandleReq{Handle: s}, nil)
	must[protocol.BeginCaptureReq, protocol.Empty](e, protocol.OpStreamBeginCapture, protocol.BeginCaptureReq{Stream: s}, nil)
	if st := memset(0x31); st != 0 {
		t.Fatalf("%s: memset in the capture: %v", name, device.Result(st))
	}
	wantStatus(t, name, call(), want)
	if got := status(); got != device.CaptureStatusInvalidated {
		t.Fatalf("%s: capture status %d, want %d (invalidated)", name, got, device.CaptureStatusInvalidated)
	}
	wantStatus(t, name+": a call after it", memset(0x32), device.ErrCaptureInvalidated)
	st, _, _ := do[protocol.HandleReq, protocol.HandleReply](e, protocol.OpStreamEndCapture, protocol.HandleReq{Handle: s}, nil)
	wantStatus(t, name+": end capture", st, device.ErrCaptureInvalidated)
	if got := status(); got != device.CaptureStatusNone {
		t.Fatalf("%s: status after the capture %d", name, got)
	}
	if _, got := e.dtoh(q, 64); !bytes.Equal(got, make([]byte, 64)) {
		t.Fatalf("%s: the invalidated capture executed: % x", name, got[:16])
	}
	if st := memset(0x33); st != 0 {
		t.Fatalf("%s: memset after the capture: %v", name, device.Result(st))
	}
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamSynchronize, protocol.HandleReq{Handle: s}, nil)
	if _, got := e.dtoh(q, 64); !bytes.Equal(got, bytes.Repeat([]byte{0x33}, 64)) {
		t.Fatalf("%s: the stream after the capture: % x", name, got[:16])
	}
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

// A queued call refused in a capture (the guest's async copies travel in
// batches, their errors deferred) invalidates it too: END_CAPTURE, carried
// by the BATCH_SYNC that holds the refused copy or sent after a batch
// without a reply, answers 901 while the copy's own error is reported once,
// as a batch's.
func TestCaptureInvalidatedByQueuedCall(t *testing.T) { testCaptureInvalidatedByQueuedCall(t, opts{}) }

func testCaptureInvalidatedByQueuedCall(t *testing.T, o opts) {
	e := start(t, o)
	q := e.alloc(64)
	strm, _ := must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{}, nil)
	s := strm.Handle
	var body []byte
	add := func(op protocol.Opcode, id uint64, payload []byte) {
		body = protocol.AppendBatchCall(body, protocol.NewHeader(op, id), payload)
	}
	memset := protocol.Bytes(&protocol.MemsetReq{Dst: q, Count: 64, ElemSize: 1, Value: 0x44, Stream: s, Flags: protocol.CopyAsync})
	htod := append(protocol.Bytes(&protocol.MemcpyHtoDReq{Dst: q, Stream: s, Flags: protocol.CopyAsync,
		Src: protocol.BufRef{Kind: protocol.BufInline, Len: 4}}), 1, 2, 3, 4)

	// BATCH_SYNC: memset, refused copy, memset (skipped), END_CAPTURE.
	must[protocol.BeginCaptureReq, protocol.Empty](e, protocol.OpStreamBeginCapture, protocol.BeginCaptureReq{Stream: s}, nil)
	add(protocol.OpMemset, 200, memset)
	add(protocol.OpMemcpyHtoD, 201, htod)
	add(protocol.OpMemset, 202, memset)
	add(protocol.OpStreamEndCapture, 203, protocol.Bytes(&protocol.HandleReq{Handle: s}))
	rep, inner := e.batchSync(4, body)
	if rep != (protocol.BatchSyncReply{Executed: 1, FailedIndex: 1, FirstError: int32(device.ErrCaptureUnsupported), Ran: 1, FailedRequestID: 201}) {
		t.Fatalf("batch reply %+v", rep)
	}
	if inner.RequestID != 203 || device.Result(inner.Status) != device.ErrCaptureInvalidated || len(inner.Payload) != 0 {
		t.Fatalf("END_CAPTURE after a refused queued copy: %+v (want 901, no graph)", inner.Header)
	}

	// A batch without a reply: its error arrives as a notification; the
	// calls after it on the stream, and END_CAPTURE, answer 901.
	must[protocol.BeginCaptureReq, protocol.Empty](e, protocol.OpStreamBeginCapture, protocol.BeginCaptureReq{Stream: s}, nil)
	body = nil
	add(protocol.OpMemset, 210, memset)
	add(protocol.OpMemcpyHtoD, 211, htod)
	if en := e.batchDeferredError(append(protocol.Bytes(&protocol.BatchReq{Count: 2}), body...)); en.RequestID != 211 || device.Result(en.Error) != device.ErrCaptureUnsupported {
		t.Fatalf("deferred error %+v", en)
	}
	st, _, _ := do[protocol.MemsetReq, protocol.Empty](e, protocol.OpMemset, protocol.MemsetReq{Dst: q, Count: 64, ElemSize: 1, Value: 0x45, Stream: s, Flags: protocol.CopyAsync}, nil)
	wantStatus(t, "a call after the refused one", st, device.ErrCaptureInvalidated)
	st, _, _ = do[protocol.HandleReq, protocol.HandleReply](e, protocol.OpStreamEndCapture, protocol.HandleReq{Handle: s}, nil)
	wantStatus(t, "end capture", st, device.ErrCaptureInvalidated)
	select {
	case n := <-e.c.Notes:
		t.Fatalf("a second notification %v: the refused copy's error is reported once", n.Opcode)
	default:
	}
	if _, got := e.dtoh(q, 64); !bytes.Equal(got, make([]byte, 64)) {
		t.Fatalf("the invalidated captures executed: % x", got[:16])
	}
	e.ping()
}
