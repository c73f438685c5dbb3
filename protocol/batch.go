package protocol

import (
	"fmt"
)

// BatchIter walks the sub-frames of an OpBatch or OpBatchSync payload.
type BatchIter struct {
	rest  []byte
	left  uint32
	lim   Limits
	index uint32
	err   error
	// lastSync: the last sub-frame is OpBatchSync's synchronous call
	// (RidesBatchSync), the others batchable.
	lastSync bool
}

// NewBatchIter checks the batch's fixed part and returns an iterator over its
// sub-frames. maxCalls bounds Count.
func NewBatchIter(payload []byte, lim Limits, maxCalls uint32) (*BatchIter, uint32, error) {
	req, tail, err := Decode[BatchReq](payload)
	if err != nil {
		return nil, 0, err
	}
	if req.Count > maxCalls {
		return nil, 0, fmt.Errorf("%w: batch of %d calls > %d", ErrTooLarge, req.Count, maxCalls)
	}
	return &BatchIter{rest: tail, left: req.Count, lim: lim}, req.Count, nil
}

// NewBatchSyncIter is NewBatchIter for an OpBatchSync payload: Count
// sub-frames (at least one), the last of them a call that RidesBatchSync.
func NewBatchSyncIter(payload []byte, lim Limits, maxCalls uint32) (*BatchIter, uint32, error) {
	it, n, err := NewBatchIter(payload, lim, maxCalls)
	if err != nil {
		return nil, 0, err
	}
	if n == 0 {
		return nil, 0, fmt.Errorf("%w: a BATCH_SYNC of no calls (its last is the synchronous one)", ErrPayload)
	}
	it.lastSync = true
	return it, n, nil
}

// RidesBatchSync says the call may be the last sub-frame of OpBatchSync:
// any request a library sends alone and waits for, except the session's
// own (HELLO, batches, rings, ...), calls that carry file descriptors, and
// HOST_FUNC_DONE (answered by the reader at once, never behind a call).
func (i *OpInfo) RidesBatchSync() bool {
	return i.Shape != ShapeNotify && !i.FD && i.Op.Area() != AreaSession && i.Op != OpHostFuncDone
}

// Next returns the next sub-frame, or false at the end or on error (see Err).
// Sub-frames must be batchable requests without segments.
func (it *BatchIter) Next() (Frame, bool) {
	if it.err != nil || it.left == 0 {
		if it.err == nil && len(it.rest) != 0 {
			it.err = fmt.Errorf("%w: %d stray bytes after the last call of a batch", ErrPayload, len(it.rest))
		}
		return Frame{}, false
	}
	f, n, err := ParseFrame(it.rest, it.lim)
	if err != nil {
		it.err = fmt.Errorf("batch call %d: %w", it.index, err)
		return Frame{}, false
	}
	if f.NumSegs != 0 || f.Flags&(FlagReply|FlagNotify) != 0 {
		it.err = fmt.Errorf("batch call %d: %w: flags %#x", it.index, ErrFlags, uint32(f.Flags))
		return Frame{}, false
	}
	info, ok := Lookup(f.Opcode)
	if it.lastSync && it.left == 1 {
		if !ok || !info.RidesBatchSync() || f.Flags&FlagNoReply != 0 {
			it.err = fmt.Errorf("batch call %d: %w: %v (flags %#x) cannot be a BATCH_SYNC's synchronous call", it.index, ErrPayload, f.Opcode, uint32(f.Flags))
			return Frame{}, false
		}
	} else if !ok || !info.Batchable() {
		it.err = fmt.Errorf("batch call %d: %w: %v is not batchable", it.index, ErrPayload, f.Opcode)
		return Frame{}, false
	}
	it.rest = it.rest[n:]
	it.left--
	it.index++
	return f, true
}

// Index is the index of the next sub-frame.
func (it *BatchIter) Index() uint32 { return it.index }

// Err returns the first decoding error.
func (it *BatchIter) Err() error { return it.err }

// AppendBatchCall appends one sub-frame to a batch payload under
// construction (start with Append(nil, &BatchReq{}) and fix Count at the end).
func AppendBatchCall(batch []byte, h Header, payload []byte) []byte {
	return AppendFrame(batch, h, payload, nil)
}

// SplitSegments splits a frame's segment list into per-buffer lists whose
// lengths must add up to lens[i] exactly, with no segment spanning two
// buffers and no empty segment. The result aliases segs.
func SplitSegments(segs []Segment, lens []uint64) ([][]Segment, error) {
	out := make([][]Segment, 0, len(lens))
	i := 0
	for b, want := range lens {
		start := i
		var got uint64
		for got < want {
			if i == len(segs) {
				return nil, fmt.Errorf("%w: buffer %d has %d of %d bytes", ErrSegmentRange, b, got, want)
			}
			l := segs[i].Len
			if l == 0 || l > want-got {
				return nil, fmt.Errorf("%w: segment %d (%d bytes) does not fit buffer %d", ErrSegmentRange, i, l, b)
			}
			if segs[i].GPA+l < segs[i].GPA {
				return nil, fmt.Errorf("%w: segment %d wraps around", ErrSegmentRange, i)
			}
			got += l
			i++
		}
		out = append(out, segs[start:i])
	}
	if i != len(segs) {
		return nil, fmt.Errorf("%w: %d segments left over", ErrSegmentRange, len(segs)-i)
	}
	return out, nil
}

// InlineBytes returns the bytes a BufInline ref names inside tail.
func InlineBytes(tail []byte, ref BufRef) ([]byte, error) {
	if ref.Kind != BufInline {
		return nil, fmt.Errorf("%w: buffer kind %d is not inline", ErrPayload, ref.Kind)
	}
	if ref.Offset > uint64(len(tail)) || ref.Len > uint64(len(tail))-ref.Offset {
		return nil, fmt.Errorf("%w: inline buffer [%d,+%d) outside a %d-byte tail", ErrPayload, ref.Offset, ref.Len, len(tail))
	}
	return tail[ref.Offset : ref.Offset+ref.Len], nil
}
