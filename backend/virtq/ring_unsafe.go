package virtq

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"
)

// fenceWord is the target of the locked read-modify-write that serves as a
// full memory barrier (LOCK XADD on amd64, LDADDAL+DMB-equivalent on arm64).
var fenceWord atomic.Uint32

// fence is a full barrier: stores before it are visible before loads after
// it (virtio's "mb()" around event indices).
func fence() { fenceWord.Add(0) }

// load16 reads the little-endian 16-bit ring field at b[off:] with acquire
// semantics. Go has no 16-bit atomics, so the aligned 32-bit word that holds
// the field is loaded atomically when that word lies inside b.
func load16(b []byte, off int) uint16 {
	p := unsafe.Pointer(&b[off])
	switch uintptr(p) % 4 {
	case 0:
		if off+4 <= len(b) {
			return uint16(atomic.LoadUint32((*uint32)(p)))
		}
	case 2:
		if off >= 2 {
			return uint16(atomic.LoadUint32((*uint32)(unsafe.Add(p, -2))) >> 16)
		}
	}
	// The word would leave the ring: an aligned 16-bit load is a single
	// instruction on every supported host; the fence orders what follows.
	v := binary.LittleEndian.Uint16(b[off:])
	fence()
	return v
}

// storeUsedHeader publishes used->flags and used->idx (the first, 4-aligned
// word of the used ring) with one release store.
func storeUsedHeader(used []byte, flags, idx uint16) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&used[0])), uint32(flags)|uint32(idx)<<16)
}

// store16Fenced writes a device-owned 16-bit field (avail_event) and then a
// full barrier, so that the following read of avail->idx is not reordered
// before it.
func store16Fenced(b []byte, off int, v uint16) {
	binary.LittleEndian.PutUint16(b[off:], v)
	fence()
}
