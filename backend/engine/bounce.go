package engine

import (
	"github.com/vgpu-project/vgpu/backend/device"
)

// BounceSize bounds the copies ReadBounce takes.
const BounceSize = 64 << 10

// ReadBounce copies len(dst) ≤ BounceSize bytes of device memory at src
// into dst in s's order and returns when they are there: an asynchronous
// DMA into a small pinned buffer of this engine (one per context, mapped
// and registered on first use), a synchronize of s, and a CPU copy.
//
// It is the small device-to-host copy with an inline reply, as the other
// way of making it: a synchronous cuMemcpyDtoH into dst (Go memory) goes
// through the driver's own staging for pageable memory and, on a stream
// other than the context's NULL stream, needs a stream synchronize first
// (two driver calls as well). Which costs less is the driver's: `vgpu serve
// --d2h-small` picks, scripts/gpu-perf.sh measures both.
func (e *Engine) ReadBounce(c device.Context, dst []byte, src device.Ptr, s device.Stream) error {
	if len(dst) > BounceSize {
		return device.Errorf("engine.ReadBounce", device.ErrInvalidValue, "%d bytes > the %d-byte bounce buffer", len(dst), BounceSize)
	}
	if len(dst) == 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	b, ok := e.bounce[c]
	if !ok {
		nb, err := mapAnon(BounceSize)
		if err != nil {
			return device.Errorf("engine.ReadBounce", device.ErrOutOfMemory, "bounce buffer: %v", err)
		}
		if _, err := c.HostRegister(nb, false); err != nil {
			unmapAnon(nb)
			return err
		}
		if e.bounce == nil {
			e.bounce = map[device.Context][]byte{}
		}
		e.bounce[c], b = nb, nb
	}
	n := len(dst)
	if err := c.MemcpyDtoH(b[:n], src, s, true); err != nil {
		return err
	}
	if err := c.StreamSynchronize(s); err != nil {
		return err
	}
	copy(dst, b[:n])
	return nil
}

// closeBounce releases the bounce buffers (mu held).
func (e *Engine) closeBounce() {
	for c, b := range e.bounce {
		_ = c.HostUnregister(b)
		unmapAnon(b)
	}
	e.bounce = nil
}
