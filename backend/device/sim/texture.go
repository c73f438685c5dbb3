package sim

import (
	"github.com/vgpu-project/vgpu/backend/device"
)

// Texture and surface objects, simulated: the sim never runs kernels, so
// an object is its checked resource and a value no other object of the
// device has.

type texObject struct {
	res  device.ResourceDesc
	surf bool
}

// resource checks that r names an array or device memory of this device.
func (c *Context) resource(op string, r device.ResourceDesc) error {
	if r.Type == device.ResourceArray {
		c.mu.Lock()
		_, ok := c.arrays[r.Array]
		c.mu.Unlock()
		if !ok {
			return device.Errorf(op, device.ErrInvalidHandle, "array %#x is not one of device %d", uint64(r.Array), c.ord)
		}
		return nil
	}
	n, err := r.MemorySpan(op)
	if err != nil {
		return err
	}
	_, err = c.span(op, r.Ptr, n)
	return err
}

func (c *Context) newObject(op string, r device.ResourceDesc, surf bool) (uint64, error) {
	if err := c.broken(op); err != nil {
		return 0, err
	}
	if err := c.resource(op, r); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if surf {
		a := c.arrays[r.Array]
		if r.Type != device.ResourceArray || a == nil || a.desc.Flags&device.ArraySurfaceLDST == 0 {
			return 0, device.Errorf(op, device.ErrInvalidValue, "a surface needs an array created with CUDA_ARRAY3D_SURFACE_LDST")
		}
	}
	h := uint64(c.newHandle())
	c.objects[h] = &texObject{res: r, surf: surf}
	return h, nil
}

func (c *Context) dropObject(op string, h uint64, surf bool) error {
	if err := c.broken(op); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.objects[h]
	if !ok || o.surf != surf {
		return device.Errorf(op, device.ErrInvalidValue, "%#x is not an object of device %d", h, c.ord)
	}
	delete(c.objects, h)
	return nil
}

// TexObjectCreate creates a texture object over r.
func (c *Context) TexObjectCreate(r device.ResourceDesc, t device.TextureDesc, v *device.ViewDesc) (device.TexObject, error) {
	const op = "cuTexObjectCreate"
	if err := t.Check(op); err != nil {
		return 0, err
	}
	if v != nil {
		if err := v.Check(op); err != nil {
			return 0, err
		}
	}
	h, err := c.newObject(op, r, false)
	return device.TexObject(h), err
}

// TexObjectDestroy destroys a texture object.
func (c *Context) TexObjectDestroy(o device.TexObject) error {
	return c.dropObject("cuTexObjectDestroy", uint64(o), false)
}

// SurfObjectCreate creates a surface object over an array made for
// surface load/store.
func (c *Context) SurfObjectCreate(r device.ResourceDesc) (device.SurfObject, error) {
	h, err := c.newObject("cuSurfObjectCreate", r, true)
	return device.SurfObject(h), err
}

// SurfObjectDestroy destroys a surface object.
func (c *Context) SurfObjectDestroy(o device.SurfObject) error {
	return c.dropObject("cuSurfObjectDestroy", uint64(o), true)
}
