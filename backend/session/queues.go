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
//
// The fast path for small calls: a frame that arrives while nothing of the
// session is queued or executing runs at once on the goroutine that read
// it (tryInline), and a reply sent while nothing is queued or being written
// is written at once by the goroutine that made it (enqueueReply). Each
// queue has a token (execQueue.running, replyQueue.writing) that the
// executor or writer goroutine and such an inline caller take in turn, so
// frames still run, and replies still go out, one at a time and in order;
// a synchronous call then costs no goroutine hop and no queueing.

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
	// running: a frame is executing (the executor's, or one run inline).
	running bool
	ready   signal // an entry, the token free, or close: the executor
	room    signal // an entry left, or a host function started: the reader
}

// tryInline runs in on the calling goroutine if nothing of the session is
// queued or executing and no host function of the session is outstanding
// (a call run inline on the reader must not wait for a HOST_FUNC_DONE that
// only the reader could read). It reports whether it ran in (and freed it).
func (s *Session) tryInline(in *inFrame) bool {
	q := &s.eq
	q.mu.Lock()
	if len(q.q) > 0 || q.running || q.closed || s.hostFuncsOutstanding() {
		q.mu.Unlock()
		return false
	}
	q.running = true
	q.mu.Unlock()
	// Not counted in budget.RequestBytes: the frame is the only one of its
	// client in the session (nothing queued, nothing executing), which
	// the queue would always take, and the goroutine that read it reads
	// nothing more until it has run.
	s.runFrame(in, true)
	q.mu.Lock()
	q.running = false
	if len(q.q) > 0 {
		q.ready.fire()
	}
	q.mu.Unlock()
	in.free()
	return true
}

// hostFuncsOutstanding reports whether a host function of the session is
// launched and not yet done.
func (s *Session) hostFuncsOutstanding() bool {
	s.hfMu.Lock()
	n := len(s.hostFuncs)
	s.hfMu.Unlock()
	return n > 0
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

// pop returns the next frame, holding the execution token, or nil when
// the queue is closed and empty.
func (s *Session) pop() *inFrame {
	q := &s.eq
	q.mu.Lock()
	for len(q.q) == 0 || q.running {
		if q.closed && len(q.q) == 0 {
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
	q.running = true
	q.mu.Unlock()
	return in
}

// executed gives back a frame's bytes and the execution token once it
// has run.
func (s *Session) executed(in *inFrame) {
	q := &s.eq
	q.mu.Lock()
	q.running = false
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
	// writing: a frame is being written (by the writer, or directly).
	writing bool
	ready   signal // an entry, or the token free: the writer
	room    signal // an entry written: waiting senders
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
	if !force && b != nil && s.writeDirect(b) {
		return
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

// writeDirect writes b at once on the calling goroutine if no reply is
// queued or being written and the connection can try a write without
// waiting (the fast path: one write system call, no goroutine hop). What
// did not fit goes to the head of the queue for the writer; it reports
// false, leaving b to the queue, when the fast path does not apply. It
// never waits for the peer (the write deadline of the session's end
// bounds only the writer's blocking writes). Forced sends still go
// through the queue: they are ordered behind what the writer holds.
func (s *Session) writeDirect(b *[]byte) bool {
	if s.tw == nil {
		return false
	}
	q := &s.rq
	q.mu.Lock()
	if len(q.q) > 0 || q.writing {
		q.mu.Unlock()
		return false
	}
	q.writing = true
	q.mu.Unlock()
	var n int
	if !s.writeFailed.Load() {
		var err error
		n, err = s.tw.TryWrite(*b)
		if err != nil {
			s.writeFailed.Store(true)
			s.log.Debug("write failed; closing", "err", err)
			_ = s.conn.Close()
			n = len(*b)
		}
	} else {
		n = len(*b) // dropped, as the writer drops after a failure
	}
	q.mu.Lock()
	q.writing = false
	if n < len(*b) {
		// The rest goes first, before anything queued meanwhile (forced
		// notifications), and counts as queued: the writer waits for room.
		rest := copy(*b, (*b)[n:])
		*b = (*b)[:rest]
		s.pool.Force(budget.ReplyBytes, int64(rest))
		q.q = append(q.q, nil)
		copy(q.q[1:], q.q)
		q.q[0] = b
		q.bytes += int64(rest)
		b = nil
	}
	if len(q.q) > 0 {
		q.ready.fire()
	}
	q.mu.Unlock()
	if b != nil {
		putBuf(b)
	}
	return true
}

// nextReply returns the next frame to write, holding the writing token;
// ok is false when the queue is empty and the session is done.
func (s *Session) nextReply() (b *[]byte, ok bool) {
	q := &s.rq
	q.mu.Lock()
	for len(q.q) == 0 || q.writing {
		ready := q.ready.wait()
		q.mu.Unlock()
		over := false
		select {
		case <-ready:
		case <-s.done:
			over = true
		}
		q.mu.Lock()
		if over && len(q.q) == 0 && !q.writing {
			q.mu.Unlock()
			return nil, false
		}
	}
	b = q.q[0]
	q.q[0] = nil
	q.q = q.q[1:]
	q.writing = true
	q.mu.Unlock()
	return b, true
}

// written gives back a frame's bytes and the writing token once it is on
// the wire.
func (s *Session) written(n int64) {
	q := &s.rq
	q.mu.Lock()
	q.writing = false
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
