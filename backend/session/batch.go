package session

import (
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

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
	sub := &s.sub // OpBatch is not batchable: batches never nest
	for {
		f, ok := it.Next()
		if !ok {
			break
		}
		idx := it.Index() - 1
		sub.reset(&f)
		sub.batch = true
		err := s.run(sub)
		sub.release()
		s.stats.count(f.Opcode, err != nil, 0)
		s.account(f.Opcode, err == nil, 0)
		if err != nil {
			s.guestWarn("batched call failed", "op", f.Opcode, "req", f.RequestID, "index", idx, "err", err)
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
