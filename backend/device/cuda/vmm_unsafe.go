package cuda

import (
	"unsafe"

	"github.com/vgpu-project/vgpu/backend/device"
)

// The virtual-memory API (cuMemAddressReserve, cuMemCreate, cuMemMap,
// cuMemSetAccess, ...). Physical memory is pinned device memory of this
// context's device with no export handle types; access is read-write for
// this device.

// accessDesc is CUmemAccessDesc (cuda.h, 12 bytes).
type accessDesc struct {
	locType uint32
	locID   int32
	flags   uint32
}

// memAccessReadWrite is CU_MEM_ACCESS_FLAGS_PROT_READWRITE.
const memAccessReadWrite = 3

var (
	_ [12 - unsafe.Sizeof(accessDesc{})]byte
	_ [unsafe.Sizeof(accessDesc{}) - 12]byte
)

func (c *Context) MemAddressReserve(size, align uint64) (device.Ptr, error) {
	var p uint64
	err := c.call("cuMemAddressReserve", func() int32 { return c.l.cuMemAddressReserve(&p, size, align, 0, 0) })
	return device.Ptr(p), err
}

func (c *Context) MemAddressFree(p device.Ptr, size uint64) error {
	return c.call("cuMemAddressFree", func() int32 { return c.l.cuMemAddressFree(uint64(p), size) })
}

func (c *Context) MemCreate(size uint64, p device.AllocProp) (device.MemHandle, error) {
	prop := allocProp{typ: p.Type, handleTypes: p.HandleTypes, locType: memLocationDevice, locID: c.dev,
		compression: p.Compression, rdma: p.RDMA, usage: p.Usage}
	var h uint64
	err := c.call("cuMemCreate", func() int32 { return c.l.cuMemCreate(&h, size, &prop, 0) })
	if err == nil {
		c.used.Add(size)
		c.mu.Lock()
		c.phys[device.MemHandle(h)] = size
		c.mu.Unlock()
	}
	return device.MemHandle(h), err
}

func (c *Context) MemRelease(h device.MemHandle) error {
	err := c.call("cuMemRelease", func() int32 { return c.l.cuMemRelease(uint64(h)) })
	if err == nil {
		c.mu.Lock()
		n := c.phys[h]
		delete(c.phys, h)
		c.mu.Unlock()
		if n > 0 {
			c.used.Add(^(n - 1))
		}
	}
	return err
}

func (c *Context) MemMap(p device.Ptr, size, offset uint64, h device.MemHandle) error {
	return c.call("cuMemMap", func() int32 { return c.l.cuMemMap(uint64(p), size, offset, uint64(h), 0) })
}

func (c *Context) MemUnmap(p device.Ptr, size uint64) error {
	return c.call("cuMemUnmap", func() int32 { return c.l.cuMemUnmap(uint64(p), size) })
}

func (c *Context) MemSetAccess(p device.Ptr, size uint64) error {
	d := accessDesc{locType: memLocationDevice, locID: c.dev, flags: memAccessReadWrite}
	return c.call("cuMemSetAccess", func() int32 { return c.l.cuMemSetAccess(uint64(p), size, &d, 1) })
}
