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
