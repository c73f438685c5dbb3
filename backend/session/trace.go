package session

import (
	"sync"
	"time"

	"github.com/vgpu-project/vgpu/protocol"
)

// TraceKeep is how many trace records a session keeps (the latest).
const TraceKeep = 4096

// TraceRecord is one request's timestamps at the session's layer
// boundaries (unix ns), with Config.Trace on. Each is at or after the one
// before:
//
//	First      its first header byte was read (Submit: when it was handed over)
//	Read       the whole frame was read
//	Start      its execution started (after earlier frames)
//	Validated  table checks and validation done: the handler starts
//	Handled    the handler (argument translation, the device call) returned
//	Replied    its reply was written, or queued behind earlier replies (or,
//	           FlagNoReply, its completion was accounted)
//
// A request refused before its handler has Validated = Start.
type TraceRecord struct {
	Op                                              protocol.Opcode
	RequestID                                       uint64
	First, Read, Start, Validated, Handled, Replied int64
}

// traceRing keeps the latest records.
type traceRing struct {
	mu   sync.Mutex
	recs []TraceRecord
	next int
	full bool
}

func (r *traceRing) add(rec TraceRecord) {
	r.mu.Lock()
	if r.recs == nil {
		r.recs = make([]TraceRecord, TraceKeep)
	}
	r.recs[r.next] = rec
	r.next++
	if r.next == len(r.recs) {
		r.next, r.full = 0, true
	}
	r.mu.Unlock()
}

// TraceRecords returns the session's latest trace records, oldest first
// (none unless Config.Trace is on).
func (s *Session) TraceRecords() []TraceRecord {
	r := &s.traces
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.full {
		return append([]TraceRecord(nil), r.recs[:r.next]...)
	}
	return append(append([]TraceRecord(nil), r.recs[r.next:]...), r.recs[:r.next]...)
}

// trace records one executed request: recv is its receipt, start,
// handled and end the execution's start, the handler's end and the reply
// sent. Stamps a path does not know (a Submit frame has no read time)
// take the one before, so each layer is at least zero.
func (s *Session) trace(c *call, f *protocol.Frame, recv, start, handled, end time.Time) {
	rec := TraceRecord{Op: f.Opcode, RequestID: f.RequestID, First: c.first, Read: c.read,
		Start: start.UnixNano(), Validated: c.validated, Handled: handled.UnixNano(), Replied: end.UnixNano()}
	if rec.First == 0 || rec.First > rec.Start {
		rec.First = recv.UnixNano()
	}
	rec.First = min(rec.First, rec.Start)
	if rec.Read < rec.First || rec.Read > rec.Start {
		rec.Read = max(rec.First, min(recv.UnixNano(), rec.Start))
	}
	if rec.Validated < rec.Start || rec.Validated > rec.Handled {
		rec.Validated = rec.Start
	}
	o := &s.own
	o.traced.Add(1)
	o.nanosRead.Add(uint64(rec.Read - rec.First))
	o.nanosQueued.Add(uint64(rec.Start - rec.Read))
	o.nanosValidate.Add(uint64(rec.Validated - rec.Start))
	o.nanosHandler.Add(uint64(rec.Handled - rec.Validated))
	o.nanosReply.Add(uint64(rec.Replied - rec.Handled))
	s.traces.add(rec)
}
