package engine

import "unsafe"

// addrOf returns the address of b's first byte (a map key only).
func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
