package cuda

import (
	"unsafe"

	"github.com/vgpu-project/vgpu/backend/device"
)

// Memory pools (cuMemPoolCreate, cuMemPoolSetAttribute, ...): pools of
// pinned memory of this context's device with no export handle types,
// accessed by this device only. device.DefaultPool is the device's default
// pool, looked up with cuDeviceGetDefaultMemPool at each use.

// poolProps is CUmemPoolProps (cuda.h, 88 bytes): maxSize since CUDA 12.2
// and usage since 12.9 took bytes of reserved, which older drivers read as
// zero.
type poolProps struct {
	typ         uint32
	handleTypes uint32
	locType     uint32
	locID       int32
	win32Attrs  uintptr
	maxSize     uint64
	usage       uint16
	_           [54]uint8
}

// memLocation is CUmemLocation (cuda.h, 8 bytes).
type memLocation struct {
	typ uint32
	id  int32
}

var (
	_ [88 - unsafe.Sizeof(poolProps{})]byte
	_ [unsafe.Sizeof(poolProps{}) - 88]byte
	_ [8 - unsafe.Sizeof(memLocation{})]byte
)

// pool resolves device.DefaultPool to the driver's default pool of the
// context's device; it runs inside c.call's closure.
func (c *Context) pool(p device.MemPool) (uintptr, int32) {
	if p != device.DefaultPool {
		return uintptr(p), 0
	}
	var h uintptr
	rc := c.l.cuDeviceGetDefaultMemPool(&h, c.dev)
	return h, rc
}

// onPool runs f on pool p (the default pool resolved first).
func (c *Context) onPool(op string, p device.MemPool, f func(h uintptr) int32) error {
	return c.call(op, func() int32 {
		h, rc := c.pool(p)
		if rc != 0 {
			return rc
		}
		return f(h)
	})
}

func (c *Context) MemPoolCreate(p device.PoolProps) (device.MemPool, error) {
	props := poolProps{typ: 1, locType: memLocationDevice, locID: c.dev, maxSize: p.MaxSize, usage: p.Usage}
	var h uintptr
	err := c.call("cuMemPoolCreate", func() int32 { return c.l.cuMemPoolCreate(&h, &props) })
	return device.MemPool(h), err
}

func (c *Context) MemPoolDestroy(p device.MemPool) error {
	if p == device.DefaultPool {
		return device.Errorf("cuMemPoolDestroy", device.ErrInvalidValue, "the device's default pool cannot be destroyed")
	}
	return c.call("cuMemPoolDestroy", func() int32 { return c.l.cuMemPoolDestroy(uintptr(p)) })
}

// poolIntAttr says whether a CUmemPool_attribute's value is an int (else
// a cuuint64_t).
func poolIntAttr(attr int) bool { return attr <= device.PoolReuseAllowInternalDeps }

func (c *Context) MemPoolSetAttribute(p device.MemPool, attr int, v uint64) error {
	return c.onPool("cuMemPoolSetAttribute", p, func(h uintptr) int32 {
		if poolIntAttr(attr) {
			i := int32(v)
			return c.l.cuMemPoolSetAttribute(h, int32(attr), unsafe.Pointer(&i))
		}
		return c.l.cuMemPoolSetAttribute(h, int32(attr), unsafe.Pointer(&v))
	})
}

func (c *Context) MemPoolGetAttribute(p device.MemPool, attr int) (uint64, error) {
	var v uint64
	err := c.onPool("cuMemPoolGetAttribute", p, func(h uintptr) int32 {
		if poolIntAttr(attr) {
			var i int32
			rc := c.l.cuMemPoolGetAttribute(h, int32(attr), unsafe.Pointer(&i))
			v = uint64(uint32(i))
			return rc
		}
		return c.l.cuMemPoolGetAttribute(h, int32(attr), unsafe.Pointer(&v))
	})
	return v, err
}

func (c *Context) MemPoolTrimTo(p device.MemPool, keep uint64) error {
	return c.onPool("cuMemPoolTrimTo", p, func(h uintptr) int32 { return c.l.cuMemPoolTrimTo(h, keep) })
}

func (c *Context) MemPoolSetAccess(p device.MemPool, flags uint32) error {
	d := accessDesc{locType: memLocationDevice, locID: c.dev, flags: flags}
	return c.onPool("cuMemPoolSetAccess", p, func(h uintptr) int32 { return c.l.cuMemPoolSetAccess(h, &d, 1) })
}

func (c *Context) MemPoolGetAccess(p device.MemPool) (uint32, error) {
	loc := memLocation{typ: memLocationDevice, id: c.dev}
	var flags uint32
	err := c.onPool("cuMemPoolGetAccess", p, func(h uintptr) int32 { return c.l.cuMemPoolGetAccess(&flags, h, &loc) })
	return flags, err
}

func (c *Context) MemAllocFromPoolAsync(n uint64, p device.MemPool, s device.Stream) (device.Ptr, error) {
	var ptr uint64
	err := c.onPool("cuMemAllocFromPoolAsync", p, func(h uintptr) int32 { return c.l.cuMemAllocFromPoolAsync(&ptr, n, h, uintptr(s)) })
	if err != nil {
		return 0, err
	}
	c.tracked(device.Ptr(ptr), n)
	return device.Ptr(ptr), nil
}
