package session_test

import (
	"testing"

	"github.com/vgpu-project/vgpu/protocol"
)

// With tracing on, every request leaves a record whose stamps follow the
// layers in order, and OpGetStats' per-layer sums are those of the
// records before it.
func TestTraceRecords(t *testing.T) {
	for _, socket := range []bool{false, true} {
		e := start(t, opts{trace: true, socket: socket})
		p := e.alloc(64)
		for i := 0; i < 20; i++ {
			wantStatus(t, "htod", e.htod(p, []byte{1, 2, 3, 4}), 0)
			if st, _ := e.dtoh(p, 4); st != 0 {
				t.Fatal(st)
			}
		}
		k := newCollectSink()
		for i := 0; i < 10; i++ {
			if err := e.s.Submit(request(protocol.OpStreamSynchronize, uint64(100+i), 0, &protocol.HandleReq{}, nil), k); err != nil {
				t.Fatal(err)
			}
		}
		k.wait(t, 10)
		stats, _ := must[protocol.Empty, protocol.SessionStats](e, protocol.OpGetStats, protocol.Empty{}, nil)
		e.ping() // GET_STATS's own record is in once its successor is answered
		recs := e.s.TraceRecords()
		var before []int
		for i, r := range recs {
			if r.Op == protocol.OpGetStats {
				break
			}
			before = append(before, i)
		}
		// HELLO, the alloc, 40 copies, 10 syncs.
		if want := 2 + 40 + 10; len(before) != want || stats.Traced != uint64(want) {
			t.Fatalf("socket %v: %d records before GET_STATS, stats count %d; want %d", socket, len(before), stats.Traced, want)
		}
		var sum [5]uint64
		for _, i := range before {
			r := recs[i]
			st := []int64{r.First, r.Read, r.Start, r.Validated, r.Handled, r.Replied}
			for j := 1; j < len(st); j++ {
				if st[j] < st[j-1] || st[0] == 0 {
					t.Fatalf("record %d (%v): stamps out of order: %v", i, r.Op, st)
				}
				sum[j-1] += uint64(st[j] - st[j-1])
			}
			if r.Validated == r.Start && r.Op != protocol.OpHello {
				t.Errorf("record %d (%v): no validation stamp", i, r.Op)
			}
		}
		got := [5]uint64{stats.NanosRead, stats.NanosQueued, stats.NanosValidate, stats.NanosHandler, stats.NanosReply}
		if got != sum {
			t.Fatalf("socket %v: GET_STATS layers %v, the records' sums %v", socket, got, sum)
		}
		if sum[0] == 0 || sum[3] == 0 || sum[4] == 0 {
			t.Fatalf("socket %v: layers %v: read, handler and reply cannot all take no time", socket, sum)
		}
		e.close()
	}
}

// Without tracing nothing is stamped.
func TestNoTraceByDefault(t *testing.T) {
	e := start(t, opts{})
	e.ping()
	stats, _ := must[protocol.Empty, protocol.SessionStats](e, protocol.OpGetStats, protocol.Empty{}, nil)
	if stats.Traced != 0 || len(e.s.TraceRecords()) != 0 {
		t.Fatalf("traced %d, %d records", stats.Traced, len(e.s.TraceRecords()))
	}
}
