package virtqtest

import (
	"sync/atomic"
	"unsafe"
)

// load32 and store32 access the first (4-aligned) word of a ring: flags
// and idx, as the driver's barriers require.
func load32(b []byte) uint32 { return atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[0]))) }

func store32(b []byte, v uint32) { atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[0])), v) }
