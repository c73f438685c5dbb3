package budget

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Bounds are the limits of the three levels and the reserve of each client.
type Bounds struct {
	Global, VM, Client Limits
	// Reserve is what each client may hold without charging its VM or the
	// process (each client pool's first units).
	Reserve Limits
}

// Facts are the process's own limits the default bounds derive from.
type Facts struct {
	NoFile      int64 // RLIMIT_NOFILE (soft; Go raises it to the hard limit at start)
	MaxMapCount int64 // /proc/sys/vm/max_map_count
	MaxFrame    int64 // the largest frame a client may send or be sent, header and segments included
}

// ReadFacts reads the process's fd limit and the kernel's mapping limit.
func ReadFacts(maxFrame int64) Facts {
	f := Facts{NoFile: 1024, MaxMapCount: 65530, MaxFrame: maxFrame}
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil && rl.Cur > 0 && rl.Cur < 1<<40 {
		f.NoFile = int64(rl.Cur)
	}
	if b, err := os.ReadFile("/proc/sys/vm/max_map_count"); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 {
			f.MaxMapCount = n
		}
	}
	return f
}

// What the process keeps for itself, outside every guest's reach: fds for
// listeners, logs, the driver and the runtime; half the mappings for the Go
// runtime, libcuda and guest RAM.
const (
	processFDs       = 256
	fdsPerSession    = 2 // the connection, and in a manager the worker's end
	maxSessions      = 4096
	maxVMSessions    = 256
	clientShareFDs   = 1024
	clientQueueBytes = 64 << 20
	vmQueueBytes     = 256 << 20
	globalQueueBytes = 1 << 30
)

// DefaultBounds derives the bounds from f so that the process never runs
// out of fds or mappings because of guests: the global limits leave the
// process its own share, every session's reserve fits besides the global
// shared part, one VM may take a quarter of the shared part (half of the
// sessions) and one client half of its VM's (all of it for mappings).
func DefaultBounds(f Facts) Bounds {
	var b Bounds
	b.Reserve[FDs] = 4
	b.Reserve[Mappings] = 8
	b.Reserve[RequestBytes] = f.MaxFrame
	b.Reserve[ReplyBytes] = f.MaxFrame
	b.Reserve[Objects] = 64
	b.Reserve[HostFuncs] = 4

	fdBudget := max(f.NoFile-processFDs, 64)
	mapBudget := max(f.MaxMapCount/2, 256)
	sessions := min(int64(maxSessions), fdBudget/(4*(fdsPerSession+b.Reserve[FDs])), mapBudget/(4*b.Reserve[Mappings]))
	sessions = max(sessions, 4)
	b.Global[Sessions] = sessions
	b.VM[Sessions] = min(int64(maxVMSessions), max(sessions/2, 2))

	b.Global[FDs] = max(fdBudget-sessions*(fdsPerSession+b.Reserve[FDs]), 16)
	b.VM[FDs] = max(b.Global[FDs]/4, 4)
	b.Client[FDs] = min(max(b.VM[FDs]/2, b.Reserve[FDs]), clientShareFDs)

	b.Global[Mappings] = max(mapBudget-sessions*b.Reserve[Mappings], 64)
	b.VM[Mappings] = max(b.Global[Mappings]/4, 16)
	// A client may take its VM's whole share: one mapped registration of
	// scattered memory can legitimately need thousands.
	b.Client[Mappings] = b.VM[Mappings]

	for _, r := range []Resource{RequestBytes, ReplyBytes} {
		b.Global[r] = globalQueueBytes
		b.VM[r] = vmQueueBytes
		b.Client[r] = clientQueueBytes + f.MaxFrame
	}

	b.Global[Objects], b.VM[Objects], b.Client[Objects] = 1<<20, 1<<18, 1<<17
	b.Global[HostFuncs], b.VM[HostFuncs], b.Client[HostFuncs] = 16384, 4096, 1024
	return b
}
