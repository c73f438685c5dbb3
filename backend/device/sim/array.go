package sim

import (
	"github.com/vgpu-project/vgpu/backend/device"
)

// CUDA arrays, simulated: a byte store laid out row by row (rows of
// Width elements, slices of Height rows), which only copies reach. A GPU
// lays arrays out in tiles of its own; programs cannot tell, since they
// address arrays by element, never by byte. Array memory counts as used
// device memory.

type array struct {
	desc                  device.ArrayDesc
	mem                   []byte
	rowBytes, rows, depth uint64
}

// ArrayCreate creates an array of descriptor d.
func (c *Context) ArrayCreate(d device.ArrayDesc) (device.Array, error) {
	const op = "cuArray3DCreate"
	if err := c.broken(op); err != nil {
		return 0, err
	}
	if err := d.Validate(op, &c.props); err != nil {
		return 0, err
	}
	rb, rows, slices := d.Extent()
	n := rb * rows * slices // bounded by Validate's extents
	c.mu.Lock()
	defer c.mu.Unlock()
	if n > c.total-c.used {
		return 0, device.Errorf(op, device.ErrOutOfMemory, "an array of %d bytes, %d of %d free", n, c.total-c.used, c.total)
	}
	h := device.Array(c.newHandle())
	c.arrays[h] = &array{desc: d, mem: make([]byte, n), rowBytes: rb, rows: rows, depth: slices}
	c.used += n
	return h, nil
}

// ArrayDestroy frees an array. Copies queued before still see its bytes
// (the closure holds them), as a GPU's queued work finishes first.
func (c *Context) ArrayDestroy(h device.Array) error {
	const op = "cuArrayDestroy"
	if err := c.broken(op); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.arrays[h]
	if !ok {
		return device.Errorf(op, device.ErrInvalidHandle, "array %#x is not one of device %d", uint64(h), c.ord)
	}
	delete(c.arrays, h)
	c.used -= uint64(len(a.mem))
	return nil
}

// box is the bytes one side of a copy touches: row y of slice z starts at
// off + z*slice + y*pitch.
type box struct {
	mem               []byte
	off, pitch, slice uint64
}

func (b box) row(y, z, w uint64) []byte {
	o := b.off + z*b.slice + y*b.pitch
	return b.mem[o : o+w : o+w]
}

// side resolves side s of a copy of w x h x d: an array's store or linear
// device memory, checked to hold the whole box.
func (c *Context) side(op string, s device.CopySide, w, h, d uint64) (box, error) {
	if s.Array != 0 {
		c.mu.Lock()
		a, ok := c.arrays[s.Array]
		c.mu.Unlock()
		if !ok {
			return box{}, device.Errorf(op, device.ErrInvalidHandle, "array %#x is not one of device %d", uint64(s.Array), c.ord)
		}
		if err := s.CheckArray(op, a.desc, w, h, d); err != nil {
			return box{}, err
		}
		return box{mem: a.mem, off: (s.Z*a.rows+s.Y)*a.rowBytes + s.X, pitch: a.rowBytes, slice: a.rows * a.rowBytes}, nil
	}
	lo, n, err := s.LinearSpan(op, w, h, d)
	if err != nil {
		return box{}, err
	}
	b, err := c.span(op, device.Ptr(lo), n)
	if err != nil {
		return box{}, err
	}
	return box{mem: b, pitch: s.Pitch, slice: s.Pitch * s.Height}, nil
}

// Memcpy3D copies a box between linear device memory and arrays, row by
// row.
func (c *Context) Memcpy3D(p device.Copy3D, s device.Stream, async bool) error {
	const op = "cuMemcpy3D"
	if p.Width == 0 || p.Height == 0 || p.Depth == 0 {
		return nil
	}
	src, err := c.side(op, p.Src, p.Width, p.Height, p.Depth)
	if err != nil {
		return err
	}
	dst, err := c.side(op, p.Dst, p.Width, p.Height, p.Depth)
	if err != nil {
		return err
	}
	return c.run(op, s, async, func() {
		for z := range p.Depth {
			for y := range p.Height {
				copy(dst.row(y, z, p.Width), src.row(y, z, p.Width))
			}
		}
	})
}
