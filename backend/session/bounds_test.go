package session_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/budget"
	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/protocol"
)

func clientPool(r budget.Resource, n int64) *budget.Pool {
	var lim budget.Limits
	lim[r] = n
	return budget.NewRoot("process", budget.Limits{}).Child("vm", budget.Limits{}).Client("session", lim, budget.Limits{})
}

// A client that never reads its replies cannot grow the backend (issue
// 20, item 4: 64 inline 16 MiB MEMCPY_DTOH requests grew it by up to 750
// MiB): its unread replies stay within its bound, the session stops
// executing and then reading, and once the client reads every reply
// arrives intact.
func TestUnreadRepliesBounded(t *testing.T) {
	const reply, bound, n = 1 << 20, 4 << 20, 64
	pool := clientPool(budget.ReplyBytes, bound)
	e := start(t, opts{budget: pool})
	p := e.alloc(reply)
	want := bytes.Repeat([]byte("0123456789abcdef"), reply/16)
	wantStatus(t, "fill", e.htod(p, want), 0)

	release := e.c.Hold()
	var replies []<-chan protocol.Frame
	var frames []byte
	for i := 0; i < n; i++ {
		id := e.c.ID()
		replies = append(replies, e.c.Expect(id))
		frames = protocol.AppendFrame(frames, protocol.NewHeader(protocol.OpMemcpyDtoH, id),
			protocol.Bytes(&protocol.MemcpyDtoHReq{Src: p, Dst: protocol.BufRef{Kind: protocol.BufInline, Len: reply}}), nil)
	}
	go func() { _ = e.c.Send(frames) }()
	calls := func() uint64 { return e.stats.Snapshot().Ops["MEMCPY_DTOH"].Calls }
	testwait.For(t, 10*time.Second, "the session to fill its reply bound", func() bool { return calls() >= bound/reply })
	for end := time.After(200 * time.Millisecond); ; {
		if q := pool.Used(budget.ReplyBytes); q > bound+reply+protocol.HeaderSize+8 {
			t.Fatalf("%d reply bytes queued for a client that reads nothing (bound %d)", q, bound)
		}
		if c := calls(); c > bound/reply+2 {
			t.Fatalf("%d copies executed for a client that reads nothing (bound: %d replies)", c, bound/reply)
		}
		select {
		case <-end:
		default:
			continue
		}
		break
	}
	release()
	for i, ch := range replies {
		f, err := waitReply(ch)
		if err != nil || f.Status != 0 || !bytes.Equal(f.Payload, want) {
			t.Fatalf("reply %d: %v status %d, %d bytes", i, err, f.Status, len(f.Payload))
		}
	}
	testwait.For(t, 10*time.Second, "queued replies to be given back", func() bool { return pool.Used(budget.ReplyBytes) == 0 })
	e.ping()
}

// Every session has its reserve: a full process does not stop a client
// from being answered.
func TestReplyReserveWhenProcessFull(t *testing.T) {
	var global budget.Limits
	global[budget.ReplyBytes] = 1
	root := budget.NewRoot("process", global)
	hog := root.Client("hog", budget.Limits{}, budget.Limits{})
	if err := hog.Take(budget.ReplyBytes, 1); err != nil {
		t.Fatal(err)
	}
	var reserve budget.Limits
	reserve[budget.ReplyBytes] = 1 << 20
	e := start(t, opts{budget: root.Child("vm", budget.Limits{}).Client("session", budget.Limits{}, reserve)})
	p := e.alloc(4096)
	for i := 0; i < 10; i++ {
		if st, _ := e.dtoh(p, 4096); st != 0 {
			t.Fatalf("copy %d: %d", i, st)
		}
	}
}
