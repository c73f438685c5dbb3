package engine

import (
	"github.com/vgpu-project/vgpu/backend/device"
)

// StagingSize is the pinned bounce buffer of the staging engine.
const StagingSize = 32 << 20

// staging copies through a pinned bounce buffer: the CPU gathers (HtoD) or
// scatters (DtoH) the pieces, the DMA engine moves the buffer. It is the
// baseline the other engines are measured against, and the one that needs
// nothing registered.
func (e *Engine) staging(c device.Context, dir Dir, dev device.Ptr, src Source, s device.Stream) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stage == nil || e.stageCtx != c {
		e.closeStaging()
		b, err := mapAnon(StagingSize)
		if err != nil {
			return device.Errorf("engine.Staging", device.ErrOutOfMemory, "bounce buffer: %v", err)
		}
		if _, err := c.HostRegister(b, false); err != nil {
			unmapAnon(b)
			return err
		}
		e.stage, e.stageCtx = b, c
	}
	buf := e.stage
	var off uint64 // bytes of dev done
	fill := 0
	var batch []Piece
	move := func() error {
		if fill == 0 {
			return nil
		}
		if dir == HtoD {
			if err := c.MemcpyHtoD(dev+device.Ptr(off), buf[:fill], s, true); err != nil {
				return err
			}
			if err := c.StreamSynchronize(s); err != nil {
				return err
			}
		} else {
			if err := c.MemcpyDtoH(buf[:fill], dev+device.Ptr(off), s, true); err != nil {
				return err
			}
			if err := c.StreamSynchronize(s); err != nil {
				return err
			}
			at := 0
			for _, p := range batch {
				at += copy(p.Host, buf[at:])
			}
		}
		off += uint64(fill)
		fill = 0
		batch = batch[:0]
		return nil
	}
	for i, cnt := 0, src.Count(); i < cnt; i++ {
		p, err := src.Piece(i)
		if err != nil {
			return err
		}
		h := p.Host
		for len(h) > 0 {
			n := min(len(h), len(buf)-fill)
			if dir == HtoD {
				copy(buf[fill:], h[:n])
			} else {
				batch = append(batch, Piece{Host: h[:n]})
			}
			fill += n
			h = h[n:]
			if fill == len(buf) {
				if err := move(); err != nil {
					return err
				}
			}
		}
	}
	return move()
}

// closeStaging releases the bounce buffer (mu held).
func (e *Engine) closeStaging() {
	if e.stage != nil {
		_ = e.stageCtx.HostUnregister(e.stage)
		unmapAnon(e.stage)
		e.stage, e.stageCtx = nil, nil
	}
}

// Close releases the engine's own buffers (the registry is the VM's).
func (e *Engine) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closeStaging()
	e.closeBounce()
}
