package session_test

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/engine"
	"github.com/vgpu-project/vgpu/backend/session"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/protocol"
)

// collectSink keeps the replies written to it.
type collectSink struct {
	mu      sync.Mutex
	replies []protocol.Frame
	got     chan struct{}
}

func newCollectSink() *collectSink { return &collectSink{got: make(chan struct{}, 1024)} }

func (k *collectSink) WriteReply(b []byte) error {
	f, n, err := protocol.ParseFrame(append([]byte(nil), b...), protocol.DefaultLimits)
	if err != nil || n != len(b) {
		return errors.New("collectSink: not one whole frame")
	}
	k.mu.Lock()
	k.replies = append(k.replies, f)
	k.mu.Unlock()
	k.got <- struct{}{}
	return nil
}

// wait returns the first n replies, failing the test after 10 s.
func (k *collectSink) wait(t *testing.T, n int) []protocol.Frame {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-k.got:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d replies on the sink", i, n)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]protocol.Frame(nil), k.replies...)
}

func request[Req any](op protocol.Opcode, id uint64, flags protocol.Flags, req *Req, tail []byte) []byte {
	h := protocol.NewHeader(op, id)
	h.Flags = flags
	return protocol.AppendFrame(nil, h, append(protocol.Bytes(req), tail...), nil)
}

// Frames submitted on another path than the stream run in order with the
// stream's and are answered on their sink; the stream still works.
func TestSubmitAnswersOnSink(t *testing.T) {
	e := start(t, opts{})
	p := e.alloc(64)
	k := newCollectSink()
	frames := [][]byte{
		request(protocol.OpMemset, 1, 0, &protocol.MemsetReq{Dst: p, Count: 16, ElemSize: 4, Value: 0x01020304}, nil),
		request(protocol.OpMemcpyDtoH, 2, 0, &protocol.MemcpyDtoHReq{Src: p, Dst: protocol.BufRef{Kind: protocol.BufInline, Len: 4}}, nil),
		request(protocol.OpStreamSynchronize, 3, 0, &protocol.HandleReq{}, nil),
		request(protocol.OpMemFree, 4, 0, &protocol.HandleReq{Handle: 0xdead0000}, nil),
		request(protocol.OpMemset, 5, protocol.FlagNoReply, &protocol.MemsetReq{Dst: p, Count: 1, ElemSize: 4, Value: 9}, nil),
		request(protocol.OpPing, 6, 0, &protocol.Empty{}, nil),
	}
	for _, f := range frames {
		if err := e.s.Submit(f, k); err != nil {
			t.Fatal(err)
		}
	}
	got := k.wait(t, 5)
	wantIDs := []uint64{1, 2, 3, 4, 6}
	if len(got) != len(wantIDs) {
		t.Fatalf("%d replies, want %d", len(got), len(wantIDs))
	}
	for i, f := range got {
		if f.RequestID != wantIDs[i] || f.Flags&protocol.FlagReply == 0 {
			t.Fatalf("reply %d: request %d flags %#x, want request %d", i, f.RequestID, f.Flags, wantIDs[i])
		}
	}
	if got[1].Status != 0 || string(got[1].Payload) != "\x04\x03\x02\x01" {
		t.Fatalf("D2H reply: status %d payload % x", got[1].Status, got[1].Payload)
	}
	wantStatus(t, "free of a foreign pointer", got[3].Status, device.ErrInvalidValue)
	if st, b := e.dtoh(p, 4); st != 0 || string(b) != "\x09\x00\x00\x00" {
		t.Fatalf("stream D2H after the sink's memset: status %d % x", st, b)
	}
}

// A submitted frame with a bad header is refused with an error; one whose
// request id is known is answered on the sink.
func TestSubmitRefusesBadFrames(t *testing.T) {
	e := start(t, opts{})
	k := newCollectSink()
	f := request(protocol.OpPing, 11, 0, &protocol.Empty{}, nil)
	f[8] = 0x80 // an unknown flag
	if err := e.s.Submit(f, k); !errors.Is(err, protocol.ErrFlags) {
		t.Fatalf("unknown flag: %v", err)
	}
	got := k.wait(t, 1)
	if got[0].RequestID != 11 {
		t.Fatalf("reply to request %d", got[0].RequestID)
	}
	wantStatus(t, "unknown flag", got[0].Status, device.ErrInvalidValue)
	f = request(protocol.OpPing, 12, 0, &protocol.Empty{}, nil)
	if err := e.s.Submit(append(f, 0, 0, 0, 0, 0, 0, 0, 0), k); err == nil {
		t.Fatal("a frame longer than its header says was taken")
	}
	if err := e.s.Submit(f[:protocol.HeaderSize-1], k); !errors.Is(err, protocol.ErrShort) {
		t.Fatalf("short frame: %v", err)
	}
	if err := e.s.Submit(f, nil); err == nil {
		t.Fatal("Submit without a sink was taken")
	}
	e.ping()
	if err := e.close(); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Submit(f, k); !errors.Is(err, session.ErrSessionOver) {
		t.Fatalf("Submit after the end: %v", err)
	}
}

// discardSink drops replies (the hot-path measurements).
type discardSink struct{ n int }

func (d *discardSink) WriteReply([]byte) error { d.n++; return nil }

// The fast path allocates nothing per synchronous call: a frame that
// arrives while the session is idle runs on the caller's goroutine with
// pooled buffers. (The device is nopCopies: the sim's own copies
// allocate; this counts the session's.)
func TestHotPathAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop entries: allocation counts mean nothing")
	}
	c, _, s, stop := benchSessionOn(t, engine.Auto, false, false)
	defer stop()
	_, rep, _, err := sessiontest.Do[protocol.MemAllocReq, protocol.PtrReply](c, protocol.OpMemAlloc, &protocol.MemAllocReq{Size: 64}, nil)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string][]byte{
		"d2h-4B":      request(protocol.OpMemcpyDtoH, 1, 0, &protocol.MemcpyDtoHReq{Src: rep.Ptr, Dst: protocol.BufRef{Kind: protocol.BufInline, Len: 4}}, nil),
		"stream-sync": request(protocol.OpStreamSynchronize, 2, 0, &protocol.HandleReq{}, nil),
		"no-reply":    request(protocol.OpPing, 3, protocol.FlagNoReply, &protocol.Empty{}, nil),
	}
	for name, f := range calls {
		k := &discardSink{}
		if err := s.Submit(f, k); err != nil { // warm the pools
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(200, func() {
			if err := s.Submit(f, k); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %.1f allocations per call, want 0", name, allocs)
		}
	}
}

// Over a socket, replies are written directly when it has room; a reply
// larger than the socket's buffer is finished by the writer, before any
// later reply, and notifications sent meanwhile stay in order behind it.
func TestDirectWritesOverSocket(t *testing.T) {
	e := start(t, opts{socket: true})
	const big = 8 << 20 // far beyond a unix socket's buffer
	p := e.alloc(big)
	want := bytes.Repeat([]byte("fast path 0123.."), big/16)
	wantStatus(t, "fill", e.htod(p, want), 0)
	for i := 0; i < 3; i++ {
		var replies []<-chan protocol.Frame
		var frames []byte
		for j := 0; j < 20; j++ {
			id := e.c.ID()
			replies = append(replies, e.c.Expect(id))
			n := uint64(4)
			if j%5 == 0 {
				n = big
			}
			frames = protocol.AppendFrame(frames, protocol.NewHeader(protocol.OpMemcpyDtoH, id),
				protocol.Bytes(&protocol.MemcpyDtoHReq{Src: p, Dst: protocol.BufRef{Kind: protocol.BufInline, Len: n}}), nil)
		}
		if err := e.c.Send(frames); err != nil {
			t.Fatal(err)
		}
		for j, ch := range replies {
			f, err := waitReply(ch)
			n := 4
			if j%5 == 0 {
				n = big
			}
			if err != nil || f.Status != 0 || !bytes.Equal(f.Payload, want[:n]) {
				t.Fatalf("round %d reply %d: %v status %d, %d bytes", i, j, err, f.Status, len(f.Payload))
			}
		}
	}
	for i := 0; i < 100; i++ {
		if st, b := e.dtoh(p, 4); st != 0 || !bytes.Equal(b, want[:4]) {
			t.Fatalf("call %d: status %d % x", i, st, b)
		}
	}
	if err := e.close(); err != nil {
		t.Fatal(err)
	}
}
