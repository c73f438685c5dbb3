package engine

import "golang.org/x/sys/unix"

// mapAnon maps n bytes of anonymous shared memory (page-aligned, outside
// the Go heap, so it can be registered with the device).
func mapAnon(n int) ([]byte, error) {
	return unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
}

func unmapAnon(b []byte) { _ = unix.Munmap(b) }
