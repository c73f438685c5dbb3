package session

import (
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/engine"
	"github.com/vgpu-project/vgpu/protocol"
)

func memAlloc(s *Session, c *call, r *protocol.MemAllocReq) (protocol.PtrReply, error) {
	ctx, err := s.device(r.Device)
	if err != nil {
		return protocol.PtrReply{}, err
	}
	return s.allocate("OpMemAlloc", ctx, int(r.Device), r.Size, ctx.MemAlloc)
}

// allocate makes an allocation of size bytes on device dev with alloc,
// within the session's object budget and the VM's memory cap, and tracks
// it.
func (s *Session) allocate(op string, ctx device.Context, dev int, size uint64, alloc func(uint64) (device.Ptr, error)) (protocol.PtrReply, error) {
	if size == 0 {
		return protocol.PtrReply{}, device.Errorf(op, device.ErrInvalidValue, "size 0")
	}
	if err := s.newObject(op, len(s.st.ranges)); err != nil {
		return protocol.PtrReply{}, err
	}
	if !s.cfg.Quota.Reserve(size) {
		s.dropObject()
		return protocol.PtrReply{}, device.Errorf(op, device.ErrOutOfMemory, "%d bytes would exceed this VM's device memory cap of %d bytes (%d in use)", size, s.cfg.Quota.Limit, s.cfg.Quota.Used())
	}
	p, err := alloc(size)
	if err != nil {
		s.cfg.Quota.Release(size)
		s.dropObject()
		return protocol.PtrReply{}, err
	}
	if err := s.st.add(memRange{base: uint64(p), size: size, dev: dev, kind: kindAlloc}); err != nil {
		_ = ctx.MemFree(p)
		s.cfg.Quota.Release(size)
		s.dropObject()
		return protocol.PtrReply{}, err
	}
	s.proc.charge(dev, size)
	return protocol.PtrReply{Ptr: uint64(p)}, nil
}

// memAllocAsync is cuMemAllocAsync: an allocation from the device's
// default pool in a stream's order, tracked and capped as MEM_ALLOC's.
// The stream's device is the allocation's.
func memAllocAsync(s *Session, c *call, r *protocol.MemAllocAsyncReq) (protocol.PtrReply, error) {
	const op = "OpMemAllocAsync"
	dev := int(r.Device)
	if o, ok := s.st.streams[r.Stream]; ok {
		dev = o.dev
	}
	ctx, err := s.device(uint32(dev))
	if err != nil {
		return protocol.PtrReply{}, err
	}
	st, err := s.stream(r.Stream, dev, true)
	if err != nil {
		return protocol.PtrReply{}, err
	}
	if err := s.refuseCaptured(op, ctx, st, "a stream-ordered allocation"); err != nil {
		return protocol.PtrReply{}, err
	}
	return s.allocate(op, ctx, dev, r.Size, func(n uint64) (device.Ptr, error) { return ctx.MemAllocAsync(n, st) })
}

func memFree(s *Session, c *call, r *protocol.PtrReq) error {
	if r.Ptr == 0 {
		return nil // cudaFree(NULL)
	}
	m, err := s.st.find("OpMemFree", r.Ptr, 1)
	if err != nil {
		return err
	}
	if m.kind != kindAlloc || m.base != r.Ptr {
		return device.Errorf("OpMemFree", device.ErrInvalidValue, "%#x is not the start of an allocation", r.Ptr)
	}
	mr := *m
	if err := s.cfg.Devices[mr.dev].MemFree(device.Ptr(mr.base)); err != nil {
		return err
	}
	s.st.remove(mr.base)
	s.cfg.Quota.Release(mr.size)
	s.dropObject()
	s.proc.uncharge(mr.dev, mr.size)
	return nil
}

// memFreeAsync is cuMemFreeAsync: the allocation (MEM_ALLOC's or
// MEM_ALLOC_ASYNC's) is the session's no more from now on; the device
// frees it when the stream reaches the free.
func memFreeAsync(s *Session, c *call, r *protocol.MemFreeAsyncReq) error {
	const op = "OpMemFreeAsync"
	m, err := s.st.find(op, r.Ptr, 1)
	if err != nil {
		return err
	}
	if m.kind != kindAlloc || m.base != r.Ptr {
		return device.Errorf(op, device.ErrInvalidValue, "%#x is not the start of an allocation", r.Ptr)
	}
	mr := *m
	ctx := s.cfg.Devices[mr.dev]
	st, err := s.stream(r.Stream, mr.dev, true)
	if err != nil {
		return err
	}
	if err := s.refuseCaptured(op, ctx, st, "a stream-ordered free"); err != nil {
		return err
	}
	if err := ctx.MemFreeAsync(device.Ptr(mr.base), st); err != nil {
		return err
	}
	s.st.remove(mr.base)
	s.cfg.Quota.Release(mr.size)
	s.dropObject()
	s.proc.uncharge(mr.dev, mr.size)
	return nil
}

func memGetAddressRange(s *Session, c *call, r *protocol.PtrReq) (protocol.AddressRangeReply, error) {
	m, err := s.st.find("OpMemGetAddressRange", r.Ptr, 1)
	if err != nil {
		return protocol.AddressRangeReply{}, err
	}
	return protocol.AddressRangeReply{Base: m.base, Size: m.size, Device: uint32(m.dev)}, nil
}

// target validates [p, p+n) and returns its device and the stream to use.
func (s *Session) target(op string, p, n, stream uint64) (device.Context, int, device.Stream, error) {
	s.noteStream(stream) // a bad address fails the call in its capture too
	m, err := s.st.find(op, p, n)
	if err != nil {
		return nil, 0, 0, err
	}
	st, err := s.stream(stream, m.dev, true)
	if err != nil {
		return nil, 0, 0, err
	}
	return s.cfg.Devices[m.dev], m.dev, st, nil
}

func memcpyHtoD(s *Session, c *call, r *protocol.MemcpyHtoDReq) error {
	if r.Src.Len == 0 {
		return nil
	}
	ctx, _, st, err := s.target("OpMemcpyHtoD", r.Dst, r.Src.Len, r.Stream)
	if err != nil {
		return err
	}
	if o := s.captureOf(r.Stream); o != nil && r.Src.Kind == protocol.BufRegion {
		return s.captureCopy(o, ctx, st, engine.HtoD, r.Dst, r.Src)
	}
	if err := s.refuseCaptured("OpMemcpyHtoD", ctx, st, "a copy from guest memory"); err != nil {
		return err
	}
	async := r.Flags&protocol.CopyAsync != 0
	if r.Src.Kind == protocol.BufInline {
		data, err := protocol.InlineBytes(c.tail, r.Src)
		if err != nil {
			return device.Errorf("OpMemcpyHtoD", device.ErrInvalidValue, "%v", err)
		}
		// A copy that names a stream is ordered on it even when the
		// caller waits for it (host mode sends cudaMemcpyAsync that way):
		// the async form from pageable memory waits for the stream's
		// earlier work and returns once the bytes are staged.
		if isDefaultStream(r.Stream) {
			// cudaMemcpy: complete before the reply, as it always was.
			err = ordered(ctx, st, async, func(async bool) error { return ctx.MemcpyHtoD(device.Ptr(r.Dst), data, st, async) })
		} else {
			err = ctx.MemcpyHtoD(device.Ptr(r.Dst), data, st, true)
		}
		s.copied(engine.HtoD, r.Src.Len, err)
		return err
	}
	err = s.guestCopy(c, ctx, engine.HtoD, r.Dst, r.Src, st, async)
	s.copied(engine.HtoD, r.Src.Len, err)
	return err
}

// copied counts the bytes of a copy that was done (a refused or failed
// one moved nothing the guest can rely on).
func (s *Session) copied(dir engine.Dir, n uint64, err error) {
	if err != nil {
		return
	}
	if dir == engine.HtoD {
		s.stats.bytesHtoD.Add(n)
		s.own.bytesHtoD.Add(n)
	} else {
		s.stats.bytesDtoH.Add(n)
		s.own.bytesDtoH.Add(n)
	}
}

func memcpyDtoH(s *Session, c *call, r *protocol.MemcpyDtoHReq) error {
	if r.Dst.Len == 0 {
		return nil
	}
	ctx, _, st, err := s.target("OpMemcpyDtoH", r.Src, r.Dst.Len, r.Stream)
	if err != nil {
		return err
	}
	if o := s.captureOf(r.Stream); o != nil && r.Dst.Kind == protocol.BufRegion {
		return s.captureCopy(o, ctx, st, engine.DtoH, r.Src, r.Dst)
	}
	if err := s.refuseCaptured("OpMemcpyDtoH", ctx, st, "a copy to guest memory"); err != nil {
		return err
	}
	async := r.Flags&protocol.CopyAsync != 0
	if r.Dst.Kind == protocol.BufInline {
		if c.batch {
			return device.Errorf("OpMemcpyDtoH", device.ErrInvalidValue, "an inline device-to-host copy returns its bytes in the reply and cannot be batched")
		}
		if r.Dst.Len > uint64(s.lim.MaxPayload) {
			return device.Errorf("OpMemcpyDtoH", device.ErrInvalidValue, "%d bytes inline > the %d-byte payload limit: split the copy", r.Dst.Len, s.lim.MaxPayload)
		}
		// The bytes go straight into the reply frame's buffer.
		n := int(r.Dst.Len)
		c.frame, c.frameN = getBuf(protocol.HeaderSize+int(protocol.PadLen(uint32(n)))), n
		dst := (*c.frame)[protocol.HeaderSize : protocol.HeaderSize+n]
		if s.cfg.DtoHSmall == DtoHBounce && n <= engine.BounceSize {
			// In st's order through pinned memory, waited for: the
			// guest's async flag changes nothing (the bytes travel in
			// the reply).
			err = s.eng.ReadBounce(ctx, dst, device.Ptr(r.Src), st)
			s.copied(engine.DtoH, r.Dst.Len, err)
			return err
		}
		if async || st != device.DefaultStream {
			// Ordered after the stream's work and complete before the
			// reply; no asynchronous DMA into Go memory. A synchronous
			// copy alone runs on the legacy stream, which does not wait
			// for non-blocking streams: on the H100 a host-mode soak on
			// cudaStreamNonBlocking streams read bytes before the
			// stream's kernel and memset had written them whenever the
			// GPU stalled (another process's fault).
			if err := ctx.StreamSynchronize(st); err != nil {
				return err
			}
		}
		err = ctx.MemcpyDtoH(dst, device.Ptr(r.Src), st, false)
		s.copied(engine.DtoH, r.Dst.Len, err)
		return err
	}
	err = s.guestCopy(c, ctx, engine.DtoH, r.Src, r.Dst, st, async)
	s.copied(engine.DtoH, r.Dst.Len, err)
	return err
}

// guestCopy copies between device memory and guest memory named by a
// segment list or a registered region.
func (s *Session) guestCopy(c *call, ctx device.Context, dir engine.Dir, dev uint64, ref protocol.BufRef, st device.Stream, async bool) error {
	op := "OpMemcpyHtoD"
	if dir == engine.DtoH {
		op = "OpMemcpyDtoH"
	}
	if c.batch && ref.Kind == protocol.BufSegments {
		return device.Errorf(op, device.ErrInvalidValue, "segments cannot be batched")
	}
	if dir == engine.DtoH && ref.Kind == protocol.BufRegion {
		if rg, ok := s.st.regions[ref.Region]; ok && rg.readOnly {
			return device.Errorf(op, device.ErrInvalidValue, "region %d was registered read-only", ref.Region)
		}
	}
	src, pinned, err := s.guestSource(c, op, ref)
	if err != nil {
		return err
	}
	k, err := s.eng.Copy(ctx, dir, device.Ptr(dev), ref.Len, src, st)
	s.stats.engines[k].Add(1)
	if !pinned || !async || err != nil {
		// The guest unpins its pages when it has the reply: finish first
		// (also after a partial copy that failed).
		c.syncs = append(c.syncs, syncPoint{ctx, st})
	}
	return err
}

func memcpyDtoD(s *Session, c *call, r *protocol.MemcpyDtoDReq) error {
	if r.Size == 0 {
		return nil
	}
	ctx, dev, st, err := s.target("OpMemcpyDtoD", r.Dst, r.Size, r.Stream)
	if err != nil {
		return err
	}
	m, err := s.st.find("OpMemcpyDtoD", r.Src, r.Size)
	if err != nil {
		return err
	}
	if m.dev != dev {
		return device.Errorf("OpMemcpyDtoD", device.ErrNotSupported, "copies between devices (%d to %d) are not supported yet", m.dev, dev)
	}
	return ordered(ctx, st, r.Flags&protocol.CopyAsync != 0, func(async bool) error {
		return ctx.MemcpyDtoD(device.Ptr(r.Dst), device.Ptr(r.Src), r.Size, st, async)
	})
}

func memset(s *Session, c *call, r *protocol.MemsetReq) error {
	if r.ElemSize != 1 && r.ElemSize != 2 && r.ElemSize != 4 {
		return device.Errorf("OpMemset", device.ErrInvalidValue, "element size %d (want 1, 2 or 4)", r.ElemSize)
	}
	if r.Count == 0 {
		return nil
	}
	height := max(r.Height, 1)
	span, err := memsetSpan("OpMemset", r.ElemSize, r.Count, r.Height, r.Pitch)
	if err != nil {
		return err
	}
	ctx, _, st, err := s.target("OpMemset", r.Dst, span, r.Stream)
	if err != nil {
		return err
	}
	return ordered(ctx, st, r.Flags&protocol.CopyAsync != 0, func(async bool) error {
		return ctx.Memset(device.Ptr(r.Dst), r.Value, int(r.ElemSize), r.Count, height, r.Pitch, st, async)
	})
}

// memsetSpan is the bytes a memset of height rows of count elements of
// elemSize bytes, pitch bytes apart, reaches (height 0: one row, pitch
// unused).
func memsetSpan(op string, elemSize uint32, count, height, pitch uint64) (uint64, error) {
	if elemSize != 1 && elemSize != 2 && elemSize != 4 {
		return 0, device.Errorf(op, device.ErrInvalidValue, "element size %d (want 1, 2 or 4)", elemSize)
	}
	if count == 0 {
		return 0, device.Errorf(op, device.ErrInvalidValue, "a memset of 0 elements")
	}
	row := count * uint64(elemSize)
	if row/uint64(elemSize) != count {
		return 0, device.Errorf(op, device.ErrInvalidValue, "%d elements overflow", count)
	}
	if height == 0 {
		return row, nil
	}
	if pitch < row {
		return 0, device.Errorf(op, device.ErrInvalidValue, "pitch %d < row of %d bytes", pitch, row)
	}
	hi := (height - 1) * pitch
	if hi/pitch != height-1 || hi+row < hi {
		return 0, device.Errorf(op, device.ErrInvalidValue, "%d rows of pitch %d overflow", height, pitch)
	}
	return hi + row, nil
}

// memGetGranularity answers cuMemGetAllocationGranularity for memory on a
// session device (the request's enums are checked by checkGranularity).
func memGetGranularity(s *Session, c *call, r *protocol.GranularityReq) (protocol.GranularityReply, error) {
	ctx, err := s.device(r.Device)
	if err != nil {
		return protocol.GranularityReply{}, err
	}
	p := device.AllocProp{Type: r.Type, HandleTypes: r.HandleTypes, Compression: r.Compression, RDMA: r.RDMA, Usage: r.Usage}
	g, err := ctx.MemGetGranularity(p, r.Option)
	return protocol.GranularityReply{Granularity: g}, err
}
