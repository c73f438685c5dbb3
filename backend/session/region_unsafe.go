package session

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmapFixed maps fd at off over dst (which lies in our own reservation).
func mmapFixed(dst []byte, fd int, off int64) error {
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(dst)))
	r, _, errno := unix.Syscall6(unix.SYS_MMAP, addr, uintptr(len(dst)), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_SHARED|unix.MAP_FIXED, uintptr(fd), uintptr(off))
	if errno != 0 {
		return errno
	}
	if r != addr {
		return unix.EINVAL
	}
	return nil
}

// within says whether b lies inside m, and at which offset.
func within(m, b []byte) (uint64, bool) {
	if len(m) == 0 || len(b) == 0 {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(m)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if p < base || p-base >= uintptr(len(m)) || uintptr(len(b)) > uintptr(len(m))-(p-base) {
		return 0, false
	}
	return uint64(p - base), true
}
