package sim

import "github.com/vgpu-project/vgpu/backend/device"

// Stream-ordered allocation. The simulated device's default pool is its
// memory: an allocation is made at once (it is usable by work queued after
// it on any stream, which stream order allows), and a free takes the
// address away at once while the memory itself goes only when every stream
// has passed the work queued before it (as MemFree does). A capture cannot
// hold either here.

// MemAllocAsync allocates n bytes in s's order.
func (c *Context) MemAllocAsync(n uint64, h device.Stream) (device.Ptr, error) {
	const op = "cuMemAllocAsync"
	if err := c.orderedOn(op, h); err != nil {
		return 0, err
	}
	return c.MemAlloc(n)
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
