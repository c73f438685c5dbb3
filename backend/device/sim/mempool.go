package sim

import "github.com/vgpu-project/vgpu/backend/device"

// Stream-ordered allocation and memory pools. The simulated device's
// default pool is its memory: an allocation is made at once (it is usable
// by work queued after it on any stream, which stream order allows), and a
// free takes the address away at once while the memory itself goes only
// when every stream has passed the work queued before it (as MemFree
// does). A pool here keeps no freed memory in reserve: what a real pool
// with release threshold 0 does at each synchronization, the simulated one
// does at each free, so its reserved bytes are its used bytes and a trim
// has nothing to release. Its attributes, its size limit and its
// counters are real. A capture cannot hold an allocation here.

// memPool is a pool: its attributes (CUmemPool_attribute) and counters.
type memPool struct {
	maxSize   uint64    // 0: no limit but the device's memory
	attrs     [5]uint64 // the three reuse flags and the release threshold, by attribute
	used      uint64
	usedHigh  uint64
	resvdHigh uint64
}

// newMemPool returns a pool with the driver's defaults: the three reuse
// policies on, release threshold 0.
func newMemPool(maxSize uint64) *memPool {
	p := &memPool{maxSize: maxSize}
	p.attrs[device.PoolReuseFollowEventDeps] = 1
	p.attrs[device.PoolReuseAllowOpportunistic] = 1
	p.attrs[device.PoolReuseAllowInternalDeps] = 1
	return p
}

// MemAllocAsync allocates n bytes in s's order from the default pool.
func (c *Context) MemAllocAsync(n uint64, h device.Stream) (device.Ptr, error) {
	return c.allocFrom("cuMemAllocAsync", n, device.DefaultPool, h)
}

// MemAllocFromPoolAsync allocates n bytes in s's order from pool p.
func (c *Context) MemAllocFromPoolAsync(n uint64, p device.MemPool, h device.Stream) (device.Ptr, error) {
	return c.allocFrom("cuMemAllocFromPoolAsync", n, p, h)
}

func (c *Context) allocFrom(op string, n uint64, p device.MemPool, h device.Stream) (device.Ptr, error) {
	if err := c.orderedOn(op, h); err != nil {
		return 0, err
	}
	c.mu.Lock()
	pool, err := c.poolLocked(op, p)
	if err == nil && pool.maxSize != 0 && n > pool.maxSize-pool.used {
		err = device.Errorf(op, device.ErrOutOfMemory, "%d bytes from a pool of at most %d bytes (%d in use)", n, pool.maxSize, pool.used)
	}
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	ptr, err := c.MemAlloc(n)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, a := c.findLocked(ptr); a != nil {
		a.pool = pool
		pool.used += n
		pool.usedHigh = max(pool.usedHigh, pool.used)
		pool.resvdHigh = max(pool.resvdHigh, pool.used)
	}
	return ptr, nil
}

// MemFreeAsync frees p in s's order.
func (c *Context) MemFreeAsync(p device.Ptr, h device.Stream) error {
	const op = "cuMemFreeAsync"
	if err := c.orderedOn(op, h); err != nil {
		return err
	}
	return c.MemFree(p)
}

// orderedOn checks the stream of a stream-ordered allocation call.
func (c *Context) orderedOn(op string, h device.Stream) error {
	if err := c.broken(op); err != nil {
		return err
	}
	s, err := c.stream(op, h)
	if err != nil {
		return err
	}
	if s.capturing() != nil {
		return device.Errorf(op, device.ErrCaptureUnsupported, "the simulated device does not capture allocations")
	}
	return nil
}

// poolLocked looks up pool p (DefaultPool: the default pool).
func (c *Context) poolLocked(op string, p device.MemPool) (*memPool, error) {
	if p == device.DefaultPool {
		return c.defPool, nil
	}
	pool, ok := c.pools[p]
	if !ok {
		return nil, device.Errorf(op, device.ErrInvalidValue, "%#x is not a memory pool of device %d", uintptr(p), c.ord)
	}
	return pool, nil
}

// MemPoolCreate makes a pool of at most p.MaxSize bytes (0: the device's
// memory).
func (c *Context) MemPoolCreate(p device.PoolProps) (device.MemPool, error) {
	const op = "cuMemPoolCreate"
	if err := c.broken(op); err != nil {
		return 0, err
	}
	if p.Usage != 0 {
		return 0, device.Errorf(op, device.ErrInvalidValue, "pool usage %#x (0)", p.Usage)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.MaxSize > c.total {
		return 0, device.Errorf(op, device.ErrInvalidValue, "a pool of at most %d bytes on a device of %d", p.MaxSize, c.total)
	}
	h := device.MemPool(c.newHandle())
	c.pools[h] = newMemPool(p.MaxSize)
	return h, nil
}

// MemPoolDestroy destroys pool p; its live allocations stay valid until
// they are freed.
func (c *Context) MemPoolDestroy(p device.MemPool) error {
	const op = "cuMemPoolDestroy"
	if err := c.broken(op); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p == device.DefaultPool {
		return device.Errorf(op, device.ErrInvalidValue, "the device's default pool cannot be destroyed")
	}
	if _, err := c.poolLocked(op, p); err != nil {
		return err
	}
	delete(c.pools, p)
	return nil
}

// MemPoolSetAttribute sets attribute attr of pool p to v.
func (c *Context) MemPoolSetAttribute(p device.MemPool, attr int, v uint64) error {
	const op = "cuMemPoolSetAttribute"
	if err := c.broken(op); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	pool, err := c.poolLocked(op, p)
	if err != nil {
		return err
	}
	switch attr {
	case device.PoolReuseFollowEventDeps, device.PoolReuseAllowOpportunistic, device.PoolReuseAllowInternalDeps:
		pool.attrs[attr] = min(v&0xffffffff, 1) // an int: any nonzero value is on
	case device.PoolReleaseThreshold:
		pool.attrs[attr] = v
	case device.PoolReservedMemHigh, device.PoolUsedMemHigh:
		if v != 0 {
			return device.Errorf(op, device.ErrInvalidValue, "attribute %d may only be reset to 0, not set to %d", attr, v)
		}
		if attr == device.PoolReservedMemHigh {
			pool.resvdHigh = pool.used
		} else {
			pool.usedHigh = pool.used
		}
	default:
		return device.Errorf(op, device.ErrInvalidValue, "memory pool attribute %d cannot be set", attr)
	}
	return nil
}

// MemPoolGetAttribute reads attribute attr of pool p.
func (c *Context) MemPoolGetAttribute(p device.MemPool, attr int) (uint64, error) {
	const op = "cuMemPoolGetAttribute"
	if err := c.broken(op); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	pool, err := c.poolLocked(op, p)
	if err != nil {
		return 0, err
	}
	switch attr {
	case device.PoolReuseFollowEventDeps, device.PoolReuseAllowOpportunistic, device.PoolReuseAllowInternalDeps, device.PoolReleaseThreshold:
		return pool.attrs[attr], nil
	case device.PoolReservedMemCurrent, device.PoolUsedMemCurrent:
		return pool.used, nil
	case device.PoolReservedMemHigh:
		return pool.resvdHigh, nil
	case device.PoolUsedMemHigh:
		return pool.usedHigh, nil
	}
	return 0, device.Errorf(op, device.ErrInvalidValue, "memory pool attribute %d", attr)
}

// MemPoolTrimTo has nothing to release: a simulated pool keeps no freed
// memory.
func (c *Context) MemPoolTrimTo(p device.MemPool, keep uint64) error {
	const op = "cuMemPoolTrimTo"
	if err := c.broken(op); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.poolLocked(op, p)
	return err
}

// MemPoolSetAccess sets the device's own access to pool p's memory, which
// stays read-write.
func (c *Context) MemPoolSetAccess(p device.MemPool, flags uint32) error {
	const op = "cuMemPoolSetAccess"
	if err := c.broken(op); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.poolLocked(op, p); err != nil {
		return err
	}
	if flags != accessReadWrite {
		return device.Errorf(op, device.ErrInvalidDevice, "access flags %d for the pool's own device, which keeps read-write access", flags)
	}
	return nil
}

// MemPoolGetAccess reads the device's own access to pool p's memory.
func (c *Context) MemPoolGetAccess(p device.MemPool) (uint32, error) {
	const op = "cuMemPoolGetAccess"
	if err := c.broken(op); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.poolLocked(op, p); err != nil {
		return 0, err
	}
	return accessReadWrite, nil
}

// accessReadWrite is CU_MEM_ACCESS_FLAGS_PROT_READWRITE.
const accessReadWrite = 3
