package session

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/vgpu-project/vgpu/protocol"
)

// ProcessTable lists the guest processes of one VM that use its vGPU
// (OpDeviceGetProcesses, what nvidia-smi and NVML's running-process
// queries show): one entry per session, with the PID its HELLO named and
// the device memory it holds on each device. The server keeps one per VM
// beside the VM's Quota, so a guest sees its own VM's processes and never
// another VM's. Where the VM's sessions run in several host processes (a
// worker each), Others adds what the VM's other processes serve.
type ProcessTable struct {
	// Others, if set, returns the VM's processes on a device that other
	// host processes serve (a worker asks the manager, which asks the
	// VM's other workers; bounded in time, nil when they cannot say). Only
	// List calls it: sessions' own bookkeeping never waits on it.
	Others func(dev int) []protocol.ProcessInfo

	mu   sync.Mutex
	uses map[*processUse]struct{}
}

// NewProcessTable returns an empty table.
func NewProcessTable() *ProcessTable {
	return &ProcessTable{uses: map[*processUse]struct{}{}}
}

// processUse is one session's entry. The session's executor writes it;
// any session of the VM reads it, hence the atomics.
type processUse struct {
	pid atomic.Uint32
	// driverPID: the PID came from the guest kernel driver's HELLO (the
	// process that opened /dev/vgpu); a library HELLO does not replace it.
	driverPID atomic.Bool
	used      []atomic.Uint64 // bytes held, per guest device
	// active: the process has set the device up (memory, a module, a
	// stream or an event), as a CUDA context would: it stays listed until
	// the session ends or resets the device.
	active []atomic.Bool
}

func newProcessUse(devices int) *processUse {
	return &processUse{used: make([]atomic.Uint64, devices), active: make([]atomic.Bool, devices)}
}

func (t *ProcessTable) add(u *processUse) {
	t.mu.Lock()
	t.uses[u] = struct{}{}
	t.mu.Unlock()
}

func (t *ProcessTable) remove(u *processUse) {
	t.mu.Lock()
	delete(t.uses, u)
	t.mu.Unlock()
}

// List returns the VM's processes using guest device dev, this host
// process's and the Others', sorted by PID; the sessions of one process
// are merged.
func (t *ProcessTable) List(dev int) []protocol.ProcessInfo {
	local := t.Local(dev)
	if t.Others == nil {
		return local
	}
	return MergeProcesses(local, t.Others(dev))
}

// Local returns the processes using guest device dev that this host
// process serves, sorted by PID, the sessions of one process merged.
func (t *ProcessTable) Local(dev int) []protocol.ProcessInfo {
	byPID := map[uint32]uint64{}
	t.mu.Lock()
	for u := range t.uses {
		pid := u.pid.Load()
		if pid == 0 || dev < 0 || dev >= len(u.used) || !u.active[dev].Load() {
			continue
		}
		byPID[pid] += u.used[dev].Load()
	}
	t.mu.Unlock()
	return sortedProcesses(byPID)
}

// MergeProcesses merges process lists of one device (from the host
// processes serving one VM) into one sorted by PID: a guest process listed
// in several (its sessions ran in several workers) appears once, with the
// memory it holds in all of them.
func MergeProcesses(lists ...[]protocol.ProcessInfo) []protocol.ProcessInfo {
	byPID := map[uint32]uint64{}
	for _, l := range lists {
		for _, p := range l {
			if p.PID != 0 {
				byPID[p.PID] += p.UsedMemory
			}
		}
	}
	return sortedProcesses(byPID)
}

func sortedProcesses(byPID map[uint32]uint64) []protocol.ProcessInfo {
	out := make([]protocol.ProcessInfo, 0, len(byPID))
	for pid, used := range byPID {
		out = append(out, protocol.ProcessInfo{PID: pid, UsedMemory: used})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// setPID records the PID a HELLO named: the guest driver's always, a
// library's only if the driver named none.
func (u *processUse) setPID(pid uint32, role uint32) {
	switch {
	case role == protocol.RoleDriver:
		u.pid.Store(pid)
		u.driverPID.Store(true)
	case !u.driverPID.Load():
		u.pid.Store(pid)
	}
}

// touch marks device dev as set up by this process.
func (u *processUse) touch(dev int) {
	if dev >= 0 && dev < len(u.active) {
		u.active[dev].Store(true)
	}
}

// charge adds n bytes held on dev; uncharge takes them back.
func (u *processUse) charge(dev int, n uint64) {
	if dev >= 0 && dev < len(u.used) {
		u.used[dev].Add(n)
		u.active[dev].Store(true)
	}
}

func (u *processUse) uncharge(dev int, n uint64) {
	if dev >= 0 && dev < len(u.used) {
		u.used[dev].Add(^(n - 1))
	}
}

// reset forgets device dev (or all, dev < 0): the process no longer holds
// anything there.
func (u *processUse) reset(dev int) {
	for d := range u.active {
		if dev < 0 || d == dev {
			u.active[d].Store(false)
			u.used[d].Store(0)
		}
	}
}
