package bench

import (
	"math"
	"testing"
)

// The breakdown is per program call: 1000 launches in 2 traced frames
// carry a five-hundredth of a frame each, and the rest is what the
// backend did not see.
func TestLayersPerCall(t *testing.T) {
	before := BackendStats{Traced: 10, NanosRead: 5000, NanosHandler: 1000}
	after := BackendStats{Traced: 12, NanosRead: 7000, NanosQueued: 1000, NanosValidate: 500, NanosHandler: 5000, NanosReply: 1500}
	l := layers(before, after, 1000, 0.5)
	if l == nil || l.FramesPerCall != 0.002 {
		t.Fatalf("layers %+v", l)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(l.ReadUS, 0.002) || !near(l.QueuedUS, 0.001) || !near(l.ValidateUS, 0.0005) || !near(l.HandlerUS, 0.004) || !near(l.ReplyUS, 0.0015) {
		t.Fatalf("layers %+v", l)
	}
	if !near(l.BackendUS(), 0.009) || !near(l.RestUS, 0.491) {
		t.Fatalf("backend %v rest %v", l.BackendUS(), l.RestUS)
	}
	if layers(after, after, 10, 1) != nil {
		t.Fatal("a breakdown without traced frames")
	}
}
