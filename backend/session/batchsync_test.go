package session_test

import (
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// batchSync sends an OpBatchSync of body (count sub-frames) and returns
// its BatchSyncReply and the last call's reply frame (zero when it did not
// run).
func (e *env) batchSync(count uint32, body []byte) (protocol.BatchSyncReply, protocol.Frame) {
	e.t.Helper()
	f, err := e.c.Call(protocol.OpBatchSync, 0, append(protocol.Bytes(&protocol.BatchReq{Count: count}), body...), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	if f.Status != 0 {
		e.t.Fatalf("BATCH_SYNC: status %d", f.Status)
	}
	rep, tail, err := protocol.Decode[protocol.BatchSyncReply](f.Payload)
	if err != nil {
		e.t.Fatal(err)
	}
	if rep.Ran == 0 {
		if len(tail) != 0 {
			e.t.Fatalf("a last call that did not run left %d reply bytes", len(tail))
		}
		return rep, protocol.Frame{}
	}
	inner, n, err := protocol.ParseFrame(tail, protocol.Limits{MaxPayload: 1 << 20, MaxSegments: 0})
	if err != nil || n != len(tail) {
		e.t.Fatalf("the last call's reply: %v (%d of %d bytes)", err, n, len(tail))
	}
	return rep, inner
}

func TestBatchSync(t *testing.T) {
	e := start(t, opts{})
	p := e.alloc(64)
	var body []byte
	add := func(op protocol.Opcode, id uint64, payload []byte) {
		body = protocol.AppendBatchCall(body, protocol.NewHeader(op, id), payload)
	}
	dtoh := protocol.Bytes(&protocol.MemcpyDtoHReq{Src: p, Dst: protocol.BufRef{Kind: protocol.BufInline, Len: 8}})

	// Queued calls run in order, then the synchronous one: its reply is
	// the one it would have had alone.
	add(protocol.OpMemset, 100, protocol.Bytes(&protocol.MemsetReq{Dst: p, Count: 64, ElemSize: 1, Value: 0x11}))
	cp := protocol.MemcpyHtoDReq{Dst: p, Src: protocol.BufRef{Kind: protocol.BufInline, Len: 4}}
	add(protocol.OpMemcpyHtoD, 101, append(protocol.Bytes(&cp), "WXYZ"...))
	add(protocol.OpMemcpyDtoH, 102, dtoh)
	rep, inner := e.batchSync(3, body)
	if rep != (protocol.BatchSyncReply{Executed: 2, FailedIndex: 2, Ran: 1}) {
		t.Fatalf("reply %+v", rep)
	}
	if inner.Flags&protocol.FlagReply == 0 || inner.RequestID != 102 || inner.Opcode != protocol.OpMemcpyDtoH || inner.Status != 0 ||
		string(inner.Payload) != "WXYZ\x11\x11\x11\x11" {
		t.Fatalf("the last call's reply: %+v %q", inner.Header, inner.Payload)
	}

	// A queued call fails: the rest of the queue is skipped, the failure
	// reported as a batch's is, and the synchronous call still runs.
	body = nil
	add(protocol.OpMemset, 110, protocol.Bytes(&protocol.MemsetReq{Dst: p + 1<<40, Count: 1, ElemSize: 1}))
	add(protocol.OpMemset, 111, protocol.Bytes(&protocol.MemsetReq{Dst: p, Count: 64, ElemSize: 1, Value: 0x22}))
	add(protocol.OpMemcpyDtoH, 112, dtoh)
	rep, inner = e.batchSync(3, body)
	if rep != (protocol.BatchSyncReply{FailedIndex: 0, FirstError: int32(device.ErrInvalidValue), Ran: 1, FailedRequestID: 110}) {
		t.Fatalf("reply after a failed queued call %+v", rep)
	}
	if inner.RequestID != 112 || inner.Status != 0 || string(inner.Payload) != "WXYZ\x11\x11\x11\x11" {
		t.Fatalf("the last call after a failed queued one: %+v %q (the skipped memset must not run)", inner.Header, inner.Payload)
	}

	// The synchronous call fails: its own reply says so, the frame does not.
	body = nil
	add(protocol.OpMemcpyDtoH, 120, protocol.Bytes(&protocol.MemcpyDtoHReq{Src: p + 1<<40, Dst: protocol.BufRef{Kind: protocol.BufInline, Len: 8}}))
	rep, inner = e.batchSync(1, body)
	if rep.Ran != 1 || rep.FirstError != 0 || device.Result(inner.Status) != device.ErrInvalidValue || len(inner.Payload) != 0 {
		t.Fatalf("a failing last call: %+v, inner %+v", rep, inner.Header)
	}

	// A synchronous call with no queued calls; one with a reply struct.
	body = nil
	add(protocol.OpMemGetInfo, 130, protocol.Bytes(&protocol.DeviceReq{}))
	rep, inner = e.batchSync(1, body)
	mi, _, err := protocol.Decode[protocol.MemInfoReply](inner.Payload)
	if rep.Ran != 1 || inner.Status != 0 || err != nil || mi.Total == 0 {
		t.Fatalf("MEM_GET_INFO as the last call: %+v %+v %v", rep, mi, err)
	}
	e.ping()
}

// TestBatchSyncHostFunc: with a host function outstanding the last call
// does not run (it could wait for a HOST_FUNC_DONE behind it); the library
// sends it alone.
func TestBatchSyncHostFunc(t *testing.T) {
	e := start(t, opts{})
	s1, _ := must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{}, nil)
	body := protocol.AppendBatchCall(nil, protocol.NewHeader(protocol.OpHostFuncLaunch, 200), protocol.Bytes(&protocol.HostFuncReq{Stream: s1.Handle, CallbackID: 7}))
	body = protocol.AppendBatchCall(body, protocol.NewHeader(protocol.OpStreamSynchronize, 201), protocol.Bytes(&protocol.HandleReq{Handle: s1.Handle}))
	rep, _ := e.batchSync(2, body)
	if rep != (protocol.BatchSyncReply{Executed: 1, FailedIndex: 1, Ran: 0}) {
		t.Fatalf("reply with a host function outstanding %+v", rep)
	}
	select {
	case n := <-e.c.Notes:
		if n.Opcode != protocol.OpNotifyHostFunc {
			t.Fatalf("notification %v", n.Opcode)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no host function notification")
	}
	must[protocol.HostFuncDoneReq, protocol.Empty](e, protocol.OpHostFuncDone, protocol.HostFuncDoneReq{CallbackID: 7}, nil)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamSynchronize, protocol.HandleReq{Handle: s1.Handle}, nil)
}
