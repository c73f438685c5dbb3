package sim

import "unsafe"

// addr is the address of b's first byte (identity and range checks only).
func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
