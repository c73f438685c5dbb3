package session

import (
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// Memory pools (cuMemPoolCreate, ...). A pool the guest creates is the
// session's, named by a session handle; Pool 0 with a device is that
// device's default pool. Memory allocated from any pool is tracked and
// capped exactly as MEM_ALLOC's (Session.allocate): it counts against the
// VM's memory cap from the allocation to its free, and a pool's
// destruction leaves its live allocations the session's until freed.
//
// The release threshold is the one attribute kept here and never given to
// the driver: a pool above its threshold returns freed memory to the
// device at each synchronization, and memory a pool keeps in reserve
// would be device memory no cap counts. So every pool on the host keeps
// the driver's default threshold (0), the guest reads back the threshold
// it set, and its programs see what they would see on a device under
// memory pressure: the same results, memory given back sooner.

type poolObj struct {
	dev       int
	h         device.MemPool
	threshold uint64
}

// memPool resolves a pool named by a request: handle (0: the default pool of
// dev) and the device the guest says it is on. It returns the context, the
// device's handle of the pool and where its release threshold is kept.
func (s *Session) memPool(op string, handle uint64, dev uint32) (device.Context, int, device.MemPool, *uint64, error) {
	ctx, err := s.device(dev)
	if err != nil {
		return nil, 0, 0, nil, err
	}
	if handle == 0 {
		if s.st.defThreshold == nil {
			s.st.defThreshold = map[int]*uint64{}
		}
		t := s.st.defThreshold[int(dev)]
		if t == nil {
			t = new(uint64)
			s.st.defThreshold[int(dev)] = t
		}
		return ctx, int(dev), device.DefaultPool, t, nil
	}
	o, ok := s.st.pools[handle]
	if !ok {
		return nil, 0, 0, nil, device.Errorf(op, device.ErrInvalidHandle, "memory pool %#x is not this session's (destroyed, foreign or never created)", handle)
	}
	if o.dev != int(dev) {
		return nil, 0, 0, nil, device.Errorf(op, device.ErrInvalidValue, "memory pool %#x is device %d's, not device %d's", handle, o.dev, dev)
	}
	return ctx, o.dev, o.h, &o.threshold, nil
}

func memPoolCreate(s *Session, c *call, r *protocol.MemPoolCreateReq) (protocol.HandleReply, error) {
	const op = "OpMemPoolCreate"
	ctx, err := s.device(r.Device)
	if err != nil {
		return protocol.HandleReply{}, err
	}
	if err := s.newObject(op, len(s.st.pools)); err != nil {
		return protocol.HandleReply{}, err
	}
	h, err := ctx.MemPoolCreate(device.PoolProps{MaxSize: r.MaxSize, Usage: r.Usage})
	if err != nil {
		s.dropObject()
		return protocol.HandleReply{}, err
	}
	id := s.st.handle()
	s.st.pools[id] = &poolObj{dev: int(r.Device), h: h}
	return protocol.HandleReply{Handle: id}, nil
}

func memPoolDestroy(s *Session, c *call, r *protocol.HandleReq) error {
	const op = "OpMemPoolDestroy"
	o, ok := s.st.pools[r.Handle]
	if !ok {
		return device.Errorf(op, device.ErrInvalidHandle, "memory pool %#x is not this session's (destroyed, foreign or never created)", r.Handle)
	}
	if err := s.cfg.Devices[o.dev].MemPoolDestroy(o.h); err != nil {
		return err
	}
	delete(s.st.pools, r.Handle)
	s.dropObject()
	return nil
}

func memPoolSetAttribute(s *Session, c *call, r *protocol.MemPoolAttrReq) error {
	ctx, _, h, threshold, err := s.memPool("OpMemPoolSetAttribute", r.Pool, r.Device)
	if err != nil {
		return err
	}
	if r.Attr == device.PoolReleaseThreshold {
		*threshold = r.Value
		return nil
	}
	return ctx.MemPoolSetAttribute(h, int(r.Attr), r.Value)
}

func memPoolGetAttribute(s *Session, c *call, r *protocol.MemPoolAttrReq) (protocol.ValueReply, error) {
	ctx, _, h, threshold, err := s.memPool("OpMemPoolGetAttribute", r.Pool, r.Device)
	if err != nil {
		return protocol.ValueReply{}, err
	}
	if r.Attr == device.PoolReleaseThreshold {
		return protocol.ValueReply{Value: *threshold}, nil
	}
	v, err := ctx.MemPoolGetAttribute(h, int(r.Attr))
	return protocol.ValueReply{Value: v}, err
}

func memPoolTrimTo(s *Session, c *call, r *protocol.MemPoolTrimReq) error {
	ctx, _, h, _, err := s.memPool("OpMemPoolTrimTo", r.Pool, r.Device)
	if err != nil {
		return err
	}
	return ctx.MemPoolTrimTo(h, r.Keep)
}

// memPoolSetAccess sets the pool's own device's access (the driver's
// answer). Another device's access stays none: vgpu gives no peer access
// (checkMemPoolAccess refuses to grant it), so setting it to none is
// already done.
func memPoolSetAccess(s *Session, c *call, r *protocol.MemPoolAccessReq) error {
	ctx, _, h, _, err := s.memPool("OpMemPoolSetAccess", r.Pool, r.Device)
	if err != nil || r.Peer != r.Device {
		return err
	}
	return ctx.MemPoolSetAccess(h, r.Flags)
}

// memPoolGetAccess reads the pool's own device's access from the driver;
// another device's is none (no peer access).
func memPoolGetAccess(s *Session, c *call, r *protocol.MemPoolAccessReq) (protocol.AccessReply, error) {
	ctx, _, h, _, err := s.memPool("OpMemPoolGetAccess", r.Pool, r.Device)
	if err != nil || r.Peer != r.Device {
		return protocol.AccessReply{}, err
	}
	f, err := ctx.MemPoolGetAccess(h)
	return protocol.AccessReply{Flags: f}, err
}

// memAllocFromPool is cuMemAllocFromPoolAsync on a pool the guest created
// (the default pool's allocations are MEM_ALLOC_ASYNC's): tracked and
// capped as MEM_ALLOC's. The pool's device is the allocation's and must be
// the stream's.
func memAllocFromPool(s *Session, c *call, r *protocol.MemAllocFromPoolReq) (protocol.PtrReply, error) {
	const op = "OpMemAllocFromPool"
	o, ok := s.st.pools[r.Pool]
	if !ok {
		return protocol.PtrReply{}, device.Errorf(op, device.ErrInvalidHandle, "memory pool %#x is not this session's (destroyed, foreign or never created)", r.Pool)
	}
	ctx := s.cfg.Devices[o.dev]
	if err := checkFitsDevice(s, op, o.dev, r.Size); err != nil {
		return protocol.PtrReply{}, err
	}
	st, err := s.stream(r.Stream, o.dev, true)
	if err != nil {
		return protocol.PtrReply{}, err
	}
	if err := s.refuseCaptured(op, ctx, st, "a stream-ordered allocation"); err != nil {
		return protocol.PtrReply{}, err
	}
	return s.allocate(op, ctx, o.dev, r.Size, func(n uint64) (device.Ptr, error) { return ctx.MemAllocFromPoolAsync(n, o.h, st) })
}

// releasePools destroys the session's pools on the devices match accepts
// (after their allocations were freed).
func (s *Session) releasePools(match func(int) bool) {
	for id, o := range s.st.pools {
		if match(o.dev) {
			if err := s.cfg.Devices[o.dev].MemPoolDestroy(o.h); err != nil {
				s.log.Warn("destroying a memory pool at session end failed", "pool", id, "err", err)
			}
			delete(s.st.pools, id)
			s.dropObject()
		}
	}
	for dev := range s.st.defThreshold {
		if match(dev) {
			delete(s.st.defThreshold, dev)
		}
	}
}
