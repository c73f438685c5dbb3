package virtq_test

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

func readNonblock(fd int, b []byte) (int, error) { return unix.Read(fd, b) }

// sliceWithin reports whether s lies entirely inside outer's memory.
func sliceWithin(outer, s []byte) bool {
	if len(outer) == 0 {
		return false
	}
	o := uintptr(unsafe.Pointer(unsafe.SliceData(outer)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	return p >= o && p+uintptr(len(s)) <= o+uintptr(len(outer))
}
