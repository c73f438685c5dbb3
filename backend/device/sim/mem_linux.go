package sim

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// mapThreshold: allocations from a page up are anonymous mappings
// (MAP_NORESERVE: backed only where touched, returned to the system on
// free, and an impossible size is an error instead of a fatal Go heap
// exhaustion).
const mapThreshold = 4096

// Each mapped allocation may be a mapping of its own, and a process has
// vm.max_map_count of them: past that the Go runtime itself cannot grow
// and aborts (issue 20, item 5). The simulated devices of a process hold
// at most a quarter of them; further large allocations get
// CUDA_ERROR_OUT_OF_MEMORY, as a device that is full.
var (
	mappedAllocs    atomic.Int64
	maxMappedAllocs = func() int64 {
		n := int64(65530)
		if b, err := os.ReadFile("/proc/sys/vm/max_map_count"); err == nil {
			if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && v > 0 {
				n = v
			}
		}
		return max(n/4, 64)
	}()
)

var errTooManyMappings = errors.New("the simulated devices of this process hold vm.max_map_count/4 mapped allocations; free some")

func allocMem(n uint64) ([]byte, bool, error) {
	if n < mapThreshold {
		return make([]byte, n), false, nil
	}
	if n > 1<<46 {
		return nil, false, unix.ENOMEM
	}
	if mappedAllocs.Add(1) > maxMappedAllocs {
		mappedAllocs.Add(-1)
		return nil, false, errTooManyMappings
	}
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		mappedAllocs.Add(-1)
		return nil, false, err
	}
	return b, true, nil
}

func freeMem(b []byte, mapped bool) {
	if mapped {
		_ = unix.Munmap(b)
		mappedAllocs.Add(-1)
	}
}
