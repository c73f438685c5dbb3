package session

import (
	"sync"
	"sync/atomic"
)

// Quota caps the device memory of one VM (all its sessions, all devices).
// Where the VM's guest processes run in several host processes (a worker
// each), every process has its own Quota drawing leases from one account
// (Shared): an allocation within this process's lease costs nothing extra;
// beyond it the process asks for more, with some slack (LeaseSlack) so the
// next allocations need not ask again, and gives back what it no longer
// uses beyond the slack.
type Quota struct {
	Limit uint64 // bytes; 0: no cap
	// Shared, if set, is the VM's account; Limit is the VM's cap.
	Shared Leaser

	used   atomic.Uint64
	mu     sync.Mutex // Shared only: Reserve and Release
	leased uint64     // Shared only: bytes this process holds of the account
}

// Leaser is a VM's memory account shared by its processes.
type Leaser interface {
	// Lease takes at least n more bytes of the VM's cap and returns how
	// many it took (n plus some slack if the cap allows), or 0 if n bytes
	// would exceed the cap.
	Lease(n uint64) (uint64, error)
	// Unlease gives n leased bytes back.
	Unlease(n uint64)
	// Leased returns the bytes all of the VM's processes hold.
	Leased() (uint64, error)
}

// LeaseSlack is the most unused lease a process keeps, and the slack a
// lease adds: one allocation in a VM's process may be refused while the
// VM's other processes hold up to this much each unused, and
// MemGetInfo shows it as in use (a bounded error that keeps almost every
// allocation free of a round trip to the manager).
func LeaseSlack(limit uint64) uint64 { return min(64<<20, limit/32) }

// Reserve takes n bytes of the quota, or reports false.
func (q *Quota) Reserve(n uint64) bool {
	if q == nil {
		return true
	}
	if q.Shared != nil && q.Limit != 0 {
		return q.reserveShared(n)
	}
	for {
		u := q.used.Load()
		if q.Limit != 0 && (n > q.Limit || u > q.Limit-n) {
			return false
		}
		if q.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

func (q *Quota) reserveShared(n uint64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	u := q.used.Load()
	if n > q.Limit || u > q.Limit-n {
		return false
	}
	if u+n > q.leased {
		got, err := q.Shared.Lease(u + n - q.leased)
		if err != nil || got < u+n-q.leased {
			if got > 0 {
				q.Shared.Unlease(got)
			}
			return false
		}
		q.leased += got
	}
	q.used.Store(u + n)
	return true
}

// Release returns n bytes.
func (q *Quota) Release(n uint64) {
	if q == nil {
		return
	}
	if q.Shared == nil || q.Limit == 0 {
		q.used.Add(^(n - 1))
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	u := q.used.Add(^(n - 1))
	if keep := LeaseSlack(q.Limit); q.leased-u > 2*keep {
		back := q.leased - u - keep
		q.leased -= back
		q.Shared.Unlease(back)
	}
}

// Used returns the bytes in use (this process's, with a Shared account).
func (q *Quota) Used() uint64 {
	if q == nil {
		return 0
	}
	return q.used.Load()
}

// Available returns how many more bytes this process may allocate under
// the cap (what MemGetInfo reports as free): the cap less what the VM's
// processes hold, this one's unused lease included as available.
func (q *Quota) Available() uint64 {
	if q == nil || q.Limit == 0 {
		return ^uint64(0)
	}
	u := q.used.Load()
	if q.Shared == nil {
		return q.Limit - min(u, q.Limit)
	}
	all, err := q.Shared.Leased()
	q.mu.Lock()
	mine := q.leased
	q.mu.Unlock()
	if err != nil {
		all = mine
	}
	others := all - min(mine, all)
	taken := others + u
	return q.Limit - min(taken, q.Limit)
}

// Account is a VM's memory cap shared by the leases of several holders:
// the manager keeps one per VM for the VM's worker processes.
type Account struct {
	Limit uint64
	mu    sync.Mutex
	total uint64
	held  map[any]uint64
}

// Lease takes n bytes plus up to LeaseSlack more for holder, or nothing if
// n bytes would exceed the cap; it returns what it took.
func (a *Account) Lease(holder any, n uint64) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n == 0 || n > a.Limit || a.total > a.Limit-n {
		return 0
	}
	g := n + min(LeaseSlack(a.Limit), a.Limit-a.total-n)
	if a.held == nil {
		a.held = map[any]uint64{}
	}
	a.held[holder] += g
	a.total += g
	return g
}

// Unlease gives back n of holder's bytes (at most what it holds).
func (a *Account) Unlease(holder any, n uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n = min(n, a.held[holder])
	a.held[holder] -= n
	a.total -= n
	if a.held[holder] == 0 {
		delete(a.held, holder)
	}
}

// Drop gives back everything holder holds (it is gone).
func (a *Account) Drop(holder any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.total -= a.held[holder]
	delete(a.held, holder)
}

// Leased returns the bytes all holders hold.
func (a *Account) Leased() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.total
}

// Holders returns how many holders hold a lease.
func (a *Account) Holders() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.held)
}

// For returns holder's view of the account, a Leaser.
func (a *Account) For(holder any) Leaser { return accountLeaser{a, holder} }

type accountLeaser struct {
	a      *Account
	holder any
}

func (l accountLeaser) Lease(n uint64) (uint64, error) { return l.a.Lease(l.holder, n), nil }
func (l accountLeaser) Unlease(n uint64)               { l.a.Unlease(l.holder, n) }
func (l accountLeaser) Leased() (uint64, error)        { return l.a.Leased(), nil }
