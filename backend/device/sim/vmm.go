package sim

import (
	"sort"

	"github.com/vgpu-project/vgpu/backend/device"
)

// The virtual-memory API, simulated. Reserved ranges come from a window of
// their own per device (vmmBase upwards, never reused); physical memory is
// host memory like MemAlloc's and counts as used; a mapping is an
// allocation whose bytes are the physical memory's, so two mappings of the
// same memory see the same bytes. Access is not modelled: mapped memory is
// usable at once (MemSetAccess checks the range is mapped). A copy or
// memset stays within one mapping here (a GPU's may span adjacent ones).

const vmmBase = 0x500000000000 // reserved ranges: a window per device below the allocations'

type physMem struct {
	mem      []byte
	mapped   bool // mem is an anonymous mapping
	maps     int
	released bool
}

type reservation struct {
	base, size uint64
}

func (c *Context) vmmCheck(op string, vals ...uint64) error {
	if err := c.broken(op); err != nil {
		return err
	}
	for _, v := range vals {
		if v%allocGranularity != 0 {
			return device.Errorf(op, device.ErrInvalidValue, "%#x is not a multiple of the granularity (%#x)", v, allocGranularity)
		}
	}
	return nil
}

// MemAddressReserve reserves size bytes of address space.
func (c *Context) MemAddressReserve(size, align uint64) (device.Ptr, error) {
	const op = "cuMemAddressReserve"
	if err := c.vmmCheck(op, size); err != nil {
		return 0, err
	}
	if size == 0 || align&(align-1) != 0 {
		return 0, device.Errorf(op, device.ErrInvalidValue, "size %#x, alignment %#x", size, align)
	}
	align = max(align, allocGranularity)
	c.mu.Lock()
	defer c.mu.Unlock()
	lo := uint64(vmmBase) + uint64(c.ord)*window
	at := max(c.vmmNext, lo)
	at = (at + align - 1) &^ (align - 1)
	if at+size < at || at+size > lo+window {
		return 0, device.Errorf(op, device.ErrOutOfMemory, "the address window of device %d is spent", c.ord)
	}
	c.vmmNext = at + size
	c.reserved = append(c.reserved, reservation{base: at, size: size})
	return device.Ptr(at), nil
}

// reservationLocked returns the reservation holding [p, p+n).
func (c *Context) reservationLocked(p, n uint64) (int, bool) {
	for i, r := range c.reserved {
		if p >= r.base && n <= r.size && p-r.base <= r.size-n {
			return i, true
		}
	}
	return -1, false
}

// MemAddressFree frees a whole reservation with nothing mapped in it.
func (c *Context) MemAddressFree(p device.Ptr, size uint64) error {
	const op = "cuMemAddressFree"
	c.mu.Lock()
	defer c.mu.Unlock()
	i, ok := c.reservationLocked(uint64(p), size)
	if !ok || c.reserved[i].base != uint64(p) || c.reserved[i].size != size {
		return device.Errorf(op, device.ErrInvalidValue, "[%#x, +%#x) is not a reservation", uint64(p), size)
	}
	if c.mappedInLocked(uint64(p), size) {
		return device.Errorf(op, device.ErrInvalidValue, "[%#x, +%#x) still has mappings", uint64(p), size)
	}
	c.reserved = append(c.reserved[:i], c.reserved[i+1:]...)
	return nil
}

func (c *Context) mappedInLocked(p, n uint64) bool {
	for _, a := range c.allocs {
		if a.phys != nil && uint64(a.base) < p+n && a.end() > p {
			return true
		}
	}
	return false
}

// MemCreate makes size bytes of physical memory.
func (c *Context) MemCreate(size uint64, prop device.AllocProp) (device.MemHandle, error) {
	const op = "cuMemCreate"
	if err := c.vmmCheck(op, size); err != nil {
		return 0, err
	}
	if size == 0 || prop.Type != 1 || prop.HandleTypes != 0 {
		return 0, device.Errorf(op, device.ErrInvalidValue, "size %#x, type %d, handle types %#x (the sim makes pinned memory, no export handles)", size, prop.Type, prop.HandleTypes)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if size > c.total-c.used {
		return 0, device.Errorf(op, device.ErrOutOfMemory, "%d bytes requested, %d of %d free", size, c.total-c.used, c.total)
	}
	mem, mapped, err := allocMem(size)
	if err != nil {
		return 0, device.Errorf(op, device.ErrOutOfMemory, "%d bytes of host memory for the simulated device: %v", size, err)
	}
	c.used += size
	h := device.MemHandle(c.newHandle())
	c.phys[h] = &physMem{mem: mem, mapped: mapped}
	return h, nil
}

// freePhysLocked frees released physical memory with no mapping left.
func (c *Context) freePhysLocked(h device.MemHandle, pm *physMem) {
	if !pm.released || pm.maps > 0 {
		return
	}
	delete(c.phys, h)
	c.used -= uint64(len(pm.mem))
	c.releaseLocked(&alloc{mem: pm.mem, mapped: pm.mapped})
}

// MemRelease releases physical memory (it goes when its last mapping does).
func (c *Context) MemRelease(h device.MemHandle) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	pm, ok := c.phys[h]
	if !ok || pm.released {
		return device.Errorf("cuMemRelease", device.ErrInvalidValue, "handle %#x", uint64(h))
	}
	pm.released = true
	c.freePhysLocked(h, pm)
	return nil
}

// MemMap maps [offset, offset+size) of h at p, inside a reservation.
func (c *Context) MemMap(p device.Ptr, size, offset uint64, h device.MemHandle) error {
	const op = "cuMemMap"
	if err := c.vmmCheck(op, uint64(p), size, offset); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	pm, ok := c.phys[h]
	if !ok || pm.released {
		return device.Errorf(op, device.ErrInvalidValue, "handle %#x", uint64(h))
	}
	if size == 0 || offset > uint64(len(pm.mem)) || size > uint64(len(pm.mem))-offset {
		return device.Errorf(op, device.ErrInvalidValue, "[%#x, +%#x) of %#x bytes", offset, size, len(pm.mem))
	}
	if _, ok := c.reservationLocked(uint64(p), size); !ok {
		return device.Errorf(op, device.ErrInvalidValue, "[%#x, +%#x) is not inside a reservation", uint64(p), size)
	}
	if c.mappedInLocked(uint64(p), size) {
		return device.Errorf(op, device.ErrInvalidValue, "[%#x, +%#x) is already mapped", uint64(p), size)
	}
	a := &alloc{base: p, mem: pm.mem[offset : offset+size : offset+size], phys: pm}
	i := sort.Search(len(c.allocs), func(i int) bool { return c.allocs[i].base >= p })
	c.allocs = append(c.allocs, nil)
	copy(c.allocs[i+1:], c.allocs[i:])
	c.allocs[i] = a
	pm.maps++
	return nil
}

// MemUnmap unmaps every mapping in [p, p+size), which must hold them whole.
func (c *Context) MemUnmap(p device.Ptr, size uint64) error {
	const op = "cuMemUnmap"
	if err := c.vmmCheck(op, uint64(p), size); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	lo, hi := uint64(p), uint64(p)+size
	for _, a := range c.allocs {
		if a.phys != nil && uint64(a.base) < hi && a.end() > lo && (uint64(a.base) < lo || a.end() > hi) {
			return device.Errorf(op, device.ErrInvalidValue, "[%#x, +%#x) cuts the mapping at %#x", lo, size, uint64(a.base))
		}
	}
	kept := c.allocs[:0]
	for _, a := range c.allocs {
		if a.phys != nil && uint64(a.base) >= lo && a.end() <= hi {
			a.phys.maps--
			for h, pm := range c.phys {
				if pm == a.phys {
					c.freePhysLocked(h, pm)
				}
			}
			continue
		}
		kept = append(kept, a)
	}
	clear(c.allocs[len(kept):])
	c.allocs = kept
	return nil
}

// MemSetAccess checks [p, p+size) is mapped (access is not modelled).
func (c *Context) MemSetAccess(p device.Ptr, size uint64) error {
	const op = "cuMemSetAccess"
	if err := c.vmmCheck(op, uint64(p), size); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for at := uint64(p); at < uint64(p)+size; {
		_, a := c.findLocked(device.Ptr(at))
		if a == nil || a.phys == nil {
			return device.Errorf(op, device.ErrInvalidValue, "%#x is not mapped", at)
		}
		at = a.end()
	}
	return nil
}
