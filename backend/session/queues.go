package session

import (
	"sync"

	"github.com/vgpu-project/vgpu/backend/budget"
)

// The session's two queues are bounded by bytes, per client, per VM and
// per process (budget.RequestBytes, budget.ReplyBytes), not by count: a
// 16 MiB reply weighs what it weighs. A queue that holds nothing of its
// client (nothing queued, executing or being written) always takes one
// more entry, so a client never waits for others; past that, a full level
// makes the producer wait for its own queue to drain:
//
//   - replies: the executor waits when its client does not read its
//     replies, so it stops executing, the request queue fills and the
//     reader stops reading (backpressure down to the socket);
//   - requests: the reader waits when the executor is behind, except
//     while a host function of this session is running — then the
//     HOST_FUNC_DONE the executor may be waiting for can be behind the
//     frames it would not read, so it reads on up to hostFuncReadAhead
//     times its bound (and the host-function deadline ends the wait if
//     even that fills).

// hostFuncReadAhead is how far past its bound the reader reads while a
// host function of the session is running.
const hostFuncReadAhead = 4

// signal is a broadcast: wait on the channel of the moment, close it to
// wake every waiter.
type signal struct {
	ch chan struct{}
}

func (s *signal) wait() <-chan struct{} {
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *signal) fire() {
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// execQueue holds frames read and not yet executed.
type execQueue struct {
	mu     sync.Mutex
	q      []*inFrame
	bytes  int64
	closed bool
	ready  signal // an entry or close: the executor
	room   signal // an entry left, or a host function started: the reader
}

// push admits a frame of n bytes, waiting while the queue is over its
// budget (see above); it reports false when the session ends first.
func (s *Session) push(in *inFrame) bool {
	q := &s.eq
	n := in.size
	for {
		q.mu.Lock()
		err := s.pool.Take(budget.RequestBytes, n)
		if err != nil && (q.bytes == 0 || (s.hfRunning.Load() > 0 && q.bytes < hostFuncReadAhead*max(s.pool.Limit(budget.RequestBytes), n))) {
			s.pool.Force(budget.RequestBytes, n)
			err = nil
		}
		if err == nil {
			q.q = append(q.q, in)
			q.bytes += n
			q.ready.fire()
			q.mu.Unlock()
			return true
		}
		room := q.room.wait()
		q.mu.Unlock()
		select {
		case <-room:
		case <-s.closing:
			return false
		}
	}
}

// pop returns the next frame, or nil when the queue is closed and empty.
func (s *Session) pop() *inFrame {
	q := &s.eq
	q.mu.Lock()
	for len(q.q) == 0 {
		if q.closed {
			q.mu.Unlock()
			return nil
		}
		ready := q.ready.wait()
		q.mu.Unlock()
		<-ready
		q.mu.Lock()
	}
	in := q.q[0]
	q.q[0] = nil
	q.q = q.q[1:]
	q.mu.Unlock()
	return in
}

// executed gives back a frame's bytes once it has run.
func (s *Session) executed(in *inFrame) {
	q := &s.eq
	q.mu.Lock()
	q.bytes -= in.size
	s.pool.Give(budget.RequestBytes, in.size)
	q.room.fire()
	q.mu.Unlock()
}

// wakeReader lets a waiting reader re-check (a host function started).
func (s *Session) wakeReader() {
	s.eq.mu.Lock()
	s.eq.room.fire()
	s.eq.mu.Unlock()
}

func (s *Session) closeExec() {
	s.eq.mu.Lock()
	s.eq.closed = true
	s.eq.ready.fire()
	s.eq.mu.Unlock()
}

// replyQueue holds encoded frames not yet written; a nil entry asks the
// writer to hang up.
type replyQueue struct {
	mu    sync.Mutex
	q     []*[]byte
	bytes int64
	ready signal // an entry: the writer
	room  signal // an entry written: waiting senders
}

// send queues an encoded frame for the writer, waiting while the client's
// unread replies are over budget; it drops the frame if the session is
// over. force never waits (notifications from device threads, which must
// not block a stream).
func (s *Session) send(b *[]byte) { s.enqueueReply(b, false) }

func (s *Session) sendForced(b *[]byte) { s.enqueueReply(b, true) }

func (s *Session) enqueueReply(b *[]byte, force bool) {
	q := &s.rq
	var n int64
	if b != nil {
		n = int64(len(*b))
	}
	for {
		q.mu.Lock()
		err := s.pool.Take(budget.ReplyBytes, n)
		if err != nil && (force || q.bytes == 0) {
			s.pool.Force(budget.ReplyBytes, n)
			err = nil
		}
		if err == nil {
			q.q = append(q.q, b)
			q.bytes += n
			q.ready.fire()
			q.mu.Unlock()
			return
		}
		room := q.room.wait()
		q.mu.Unlock()
		select {
		case <-room:
		case <-s.done:
			if b != nil {
				putBuf(b)
			}
			return
		}
	}
}

// nextReply returns the next frame to write; ok is false when the queue
// is empty and the session is done.
func (s *Session) nextReply() (b *[]byte, ok bool) {
	q := &s.rq
	q.mu.Lock()
	for len(q.q) == 0 {
		ready := q.ready.wait()
		q.mu.Unlock()
		over := false
		select {
		case <-ready:
		case <-s.done:
			over = true
		}
		q.mu.Lock()
		if over && len(q.q) == 0 {
			q.mu.Unlock()
			return nil, false
		}
	}
	b = q.q[0]
	q.q[0] = nil
	q.q = q.q[1:]
	q.mu.Unlock()
	return b, true
}

// written gives back a frame's bytes once it is on the wire.
func (s *Session) written(n int64) {
	q := &s.rq
	q.mu.Lock()
	q.bytes -= n
	s.pool.Give(budget.ReplyBytes, n)
	q.room.fire()
	q.mu.Unlock()
}

// QueuedReplyBytes is what the session holds of replies not yet written.
func (s *Session) QueuedReplyBytes() int64 {
	s.rq.mu.Lock()
	defer s.rq.mu.Unlock()
	return s.rq.bytes
}
