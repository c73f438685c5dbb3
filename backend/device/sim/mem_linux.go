package sim

import "golang.org/x/sys/unix"

// mapThreshold: allocations from a page up are anonymous mappings
// (MAP_NORESERVE: backed only where touched, returned to the system on
// free, and an impossible size is an error instead of a fatal Go heap
// exhaustion).
const mapThreshold = 4096

func allocMem(n uint64) ([]byte, bool, error) {
	if n < mapThreshold {
		return make([]byte, n), false, nil
	}
	if n > 1<<46 {
		return nil, false, unix.ENOMEM
	}
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, false, err
	}
	return b, true, nil
}

func freeMem(b []byte, mapped bool) {
	if mapped {
		_ = unix.Munmap(b)
	}
}
