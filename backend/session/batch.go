package session

import (
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// runBatched runs f, the call at index idx of a batch, on the session's
// sub-call (batch frames are not batchable: batches never nest): counted,
// accounted and, when it fails, logged as a batched call.
func (s *Session) runBatched(f *protocol.Frame, idx uint32) error {
	sub := &s.sub
	sub.reset(f)
	sub.batch = true
	err := s.run(sub)
	sub.release()
	s.stats.count(f.Opcode, err != nil, 0)
	s.account(f.Opcode, err == nil, 0)
	if err != nil {
		s.guestWarn("batched call failed", "op", f.Opcode, "req", f.RequestID, "index", idx, "err", err)
	}
	return err
}

// batch executes an OpBatch's sub-frames in order and stops at the first
// failure. The reply (or, with FlagNoReply, an OpNotifyError) says how far
// it got.
func batch(s *Session, c *call) error {
	it, count, err := protocol.NewBatchIter(c.f.Payload, s.lim, s.cfg.MaxBatch)
	if err != nil {
		return device.Errorf("OpBatch", device.ErrInvalidValue, "%v", err)
	}
	rep := protocol.BatchReply{FailedIndex: count}
	failedOp := protocol.OpBatch
	for {
		f, ok := it.Next()
		if !ok {
			break
		}
		idx := it.Index() - 1
		if err := s.runBatched(&f, idx); err != nil {
			rep.FailedIndex, rep.FirstError, rep.FailedRequestID = idx, int32(device.ResultOf(err)), f.RequestID
			failedOp = f.Opcode
			break
		}
		rep.Executed++
	}
	if rep.FirstError == 0 && it.Err() != nil {
		s.guestWarn("malformed batch", "req", c.f.RequestID, "err", it.Err())
		rep.FailedIndex, rep.FirstError = it.Index(), int32(device.ErrInvalidValue)
	}
	if rep.FirstError != 0 {
		c.status = device.Result(rep.FirstError)
		if c.f.Flags&protocol.FlagNoReply != 0 {
			// finish() reports c.status with the batch's id; name the
			// failed call instead.
			id := rep.FailedRequestID
			if id == 0 {
				id = c.f.RequestID
			}
			s.notifyError(id, failedOp, c.status)
			c.status = device.Success
		}
	}
	c.out = protocol.Append(c.out, &rep)
	return nil
}

// batchSync executes an OpBatchSync: the queued calls in order as batch
// does (stopping at the first failure), then the last, synchronous call,
// whose own reply frame becomes the tail of the BatchSyncReply. The last
// call runs whether or not a queued one failed, as it would have had the
// two travelled in two frames. Nothing runs unless every sub-frame is well
// formed (a frame whose last call cannot be found is refused whole). The
// last call does not run while a host function of the session is
// outstanding (Ran 0): it may wait for a HOST_FUNC_DONE that only the
// goroutine running this frame could read; the library sends it alone.
func batchSync(s *Session, c *call) error {
	check, count, err := protocol.NewBatchSyncIter(c.f.Payload, s.lim, s.cfg.MaxBatch)
	if err != nil {
		return device.Errorf("OpBatchSync", device.ErrInvalidValue, "%v", err)
	}
	for {
		if _, ok := check.Next(); !ok {
			break
		}
	}
	if err := check.Err(); err != nil {
		return device.Errorf("OpBatchSync", device.ErrInvalidValue, "%v", err)
	}
	it, _, _ := protocol.NewBatchSyncIter(c.f.Payload, s.lim, s.cfg.MaxBatch)
	queued := count - 1
	rep := protocol.BatchSyncReply{FailedIndex: queued}
	sub := &s.sub // OpBatchSync is not batchable: batches never nest
	failed := false
	for i := uint32(0); i < queued; i++ {
		f, _ := it.Next()
		if failed {
			continue // skipped after the first failure, as in batch
		}
		if err := s.runBatched(&f, i); err != nil {
			rep.FailedIndex, rep.FirstError, rep.FailedRequestID = i, int32(device.ResultOf(err)), f.RequestID
			failed = true
			continue
		}
		rep.Executed++
	}
	last, _ := it.Next()
	c.out = c.out[:0]
	if s.hostFuncsOutstanding() {
		c.out = protocol.Append(c.out, &rep)
		return nil
	}
	rep.Ran = 1
	c.out = protocol.Append(c.out, &rep)
	capture := &captureSink{buf: c.out}
	sub.reset(&last)
	sub.sink = capture
	err = s.run(sub)
	sub.release()
	s.finish(sub, &last, err)
	sub.sink = nil
	s.stats.count(last.Opcode, err != nil || sub.status != 0, 0)
	s.account(last.Opcode, err == nil, 0)
	c.out = capture.buf
	return nil
}

// captureSink appends a reply to buf (OpBatchSync's last call).
type captureSink struct{ buf []byte }

func (k *captureSink) WriteReply(b []byte) error {
	k.buf = append(k.buf, b...)
	return nil
}
