// Package budget bounds what guests can make the backend hold: file
// descriptors, memory mappings, queued request and reply bytes, driver
// objects, pending host-function waits and sessions. Each bound exists per
// client (one session), per VM and per process (global), as a tree of
// Pools: taking from a client's pool also takes from its VM's and the
// process's, and the first level that is full refuses with *Exhausted,
// which names the resource and the level. Only the client that asked sees
// the refusal; nothing already taken is disturbed.
//
// A client pool may have a reserve: the first Reserve[r] units a client
// holds are its own and are not charged to its VM or the process, so a
// client can always make progress (one reply queued, one frame read, a few
// shared buffers) however full the shared levels are. The global limits
// are sized so that every session's reserve fits besides the shared part
// (see DefaultBounds).
//
// Close a client pool when its session has ended: it hands back to the
// levels above whatever is still charged (and counts it as leaked), so a
// bug in one release path cannot shrink the process's budget for ever.
package budget

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Resource is one kind of thing a client can make the backend hold.
type Resource int

// Resources.
const (
	// FDs: file descriptors a client hands the backend to keep (host
	// mode's shared memfds).
	FDs Resource = iota
	// Mappings: memory mappings made for a client (shared memfds, mapped
	// registrations); a process has vm.max_map_count of them.
	Mappings
	// RequestBytes: frames read and not yet executed.
	RequestBytes
	// ReplyBytes: replies and notifications not yet written to the client.
	ReplyBytes
	// Objects: streams, events, modules, registered regions and
	// allocations a client holds.
	Objects
	// HostFuncs: host functions launched and not yet finished.
	HostFuncs
	// Sessions: open connections.
	Sessions
	numResources
)

var names = [numResources]string{"fds", "mappings", "request_bytes", "reply_bytes", "objects", "host_funcs", "sessions"}

func (r Resource) String() string {
	if r >= 0 && r < numResources {
		return names[r]
	}
	return fmt.Sprintf("resource(%d)", int(r))
}

// All lists every resource, in order.
func All() []Resource {
	rs := make([]Resource, numResources)
	for i := range rs {
		rs[i] = Resource(i)
	}
	return rs
}

// Limits holds one bound per resource; 0 means no bound at that level.
type Limits [numResources]int64

// Exhausted is the error of a Take that did not fit.
type Exhausted struct {
	Resource Resource
	Level    string // the pool that was full, e.g. "vm unix:/run/vgpu.sock"
	Limit    int64
	Used     int64
	Want     int64
}

func (e *Exhausted) Error() string {
	return fmt.Sprintf("budget: %s of %s: %d of %d in use, %d more asked", e.Resource, e.Level, e.Used, e.Limit, e.Want)
}

// Pool is one level of the tree. The zero value is not usable: use NewRoot
// and Child. Every method is safe for concurrent use.
type Pool struct {
	name    string
	parent  *Pool
	limits  Limits
	client  bool   // a leaf: counts under mu, may have a reserve, can be closed
	reserve Limits // client pools: units not charged to the parent

	used    [numResources]atomic.Int64
	refused [numResources]atomic.Uint64

	// Client pools with a reserve keep their own count under mu (what is
	// charged above is max(0, used - reserve)).
	mu     sync.Mutex
	closed bool
	leaked [numResources]int64

	// A level kept in another process (LeaseFrom): under lmu, this level's
	// use of r is covered by leased[r] units of the upstream level.
	lmu      sync.Mutex
	upstream Upstream
	slack    Limits
	leased   [numResources]int64
}

// NewRoot returns a process-level pool.
func NewRoot(name string, l Limits) *Pool { return &Pool{name: name, limits: l} }

// Child returns a pool below p with its own limits.
func (p *Pool) Child(name string, l Limits) *Pool {
	return &Pool{name: name, parent: p, limits: l}
}

// Client returns a leaf pool below p with limits and a reserve.
func (p *Pool) Client(name string, l, reserve Limits) *Pool {
	c := p.Child(name, l)
	c.client = true
	c.reserve = reserve
	return c
}

// Name is the pool's name.
func (p *Pool) Name() string { return p.name }

// Used returns what the pool holds of r (for a client: all of it,
// reserve included).
func (p *Pool) Used(r Resource) int64 { return p.used[r].Load() }

// Limit returns the pool's bound on r (0: none).
func (p *Pool) Limit(r Resource) int64 { return p.limits[r] }

// Refused counts the Takes of r this pool turned down.
func (p *Pool) Refused(r Resource) uint64 { return p.refused[r].Load() }

// take charges n at this level only (CAS: never over the limit, even
// for a moment).
func (p *Pool) take(r Resource, n int64, force bool) error {
	if p.upstream != nil && p.slack[r] > 0 {
		return p.takeLeased(r, n, force)
	}
	lim := p.limits[r]
	for {
		u := p.used[r].Load()
		if !force && lim > 0 && u+n > lim {
			p.refused[r].Add(1)
			return &Exhausted{Resource: r, Level: p.name, Limit: lim, Used: u, Want: n}
		}
		if p.used[r].CompareAndSwap(u, u+n) {
			return nil
		}
	}
}

// up charges n at p and every level above, undoing on failure.
func (p *Pool) up(r Resource, n int64, force bool) error {
	for q := p; q != nil; q = q.parent {
		if err := q.take(r, n, force); err != nil {
			for u := p; u != q; u = u.parent {
				u.release(r, n)
			}
			return err
		}
	}
	return nil
}

func (p *Pool) down(r Resource, n int64) {
	for q := p; q != nil; q = q.parent {
		q.release(r, n)
	}
}

// release gives back n at this level only.
func (p *Pool) release(r Resource, n int64) {
	if p.upstream != nil && p.slack[r] > 0 {
		p.giveLeased(r, n)
		return
	}
	p.used[r].Add(-n)
}

// Take takes n units of r (n > 0) from p and every level above, or
// returns *Exhausted naming the first level that is full.
func (p *Pool) Take(r Resource, n int64) error { return p.acquire(r, n, false) }

// Force takes n units of r even past the limits (for what cannot be
// refused once started, such as a host function's notification); it is
// still counted and makes later Takes fail.
func (p *Pool) Force(r Resource, n int64) { _ = p.acquire(r, n, true) }

func (p *Pool) acquire(r Resource, n int64, force bool) error {
	if n <= 0 {
		return nil
	}
	if !p.client {
		return p.up(r, n, force)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.used[r].Load()
	lim := p.limits[r]
	if !force && lim > 0 && u+n > lim {
		p.refused[r].Add(1)
		return &Exhausted{Resource: r, Level: p.name, Limit: lim, Used: u, Want: n}
	}
	above := over(u+n, p.reserve[r]) - over(u, p.reserve[r])
	if above > 0 && p.parent != nil && !p.closed {
		if err := p.parent.up(r, above, force); err != nil {
			p.refused[r].Add(1)
			return err
		}
	}
	p.used[r].Add(n)
	return nil
}

// Give returns n units of r taken before.
func (p *Pool) Give(r Resource, n int64) {
	if n <= 0 {
		return
	}
	if !p.client {
		p.down(r, n)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.used[r].Load()
	if n > u {
		n = u // more given back than taken: a bug; never go below zero
	}
	above := over(u, p.reserve[r]) - over(u-n, p.reserve[r])
	p.used[r].Add(-n)
	if above > 0 && p.parent != nil && !p.closed {
		p.parent.down(r, above)
	}
}

func over(u, reserve int64) int64 {
	if u > reserve {
		return u - reserve
	}
	return 0
}

// Close detaches a client pool (made by Client) from the levels above, handing back what
// it still holds there; it returns what was still held (a leak if the
// owner thought it had given everything back). Later Gives only update
// the pool itself.
func (p *Pool) Close() Limits {
	p.mu.Lock()
	defer p.mu.Unlock()
	var held Limits
	if !p.client || p.closed {
		return held
	}
	p.closed = true
	for r := range numResources {
		u := p.used[r].Load()
		held[r] = u
		p.leaked[r] = u
		if above := over(u, p.reserve[r]); above > 0 && p.parent != nil {
			p.parent.down(Resource(r), above)
		}
	}
	return held
}

// Snapshot is a pool's use and limits, for status and metrics.
type Snapshot struct {
	Name    string           `json:"name"`
	Used    map[string]int64 `json:"used"`
	Limits  map[string]int64 `json:"limits"`
	Refused map[string]int64 `json:"refused,omitempty"`
}

// Snapshot returns the pool's use and limits.
func (p *Pool) Snapshot() Snapshot {
	s := Snapshot{Name: p.name, Used: map[string]int64{}, Limits: map[string]int64{}, Refused: map[string]int64{}}
	for _, r := range All() {
		s.Used[r.String()] = p.used[r].Load()
		if l := p.limits[r]; l > 0 {
			s.Limits[r.String()] = l
		}
		if n := p.refused[r].Load(); n > 0 {
			s.Refused[r.String()] = int64(n)
		}
	}
	return s
}

// Add adds o's use and refusals to s (limits are not added: each process
// has its own). A manager sums its worker processes' snapshots with it.
func (s *Snapshot) Add(o Snapshot) {
	if s.Used == nil {
		s.Used = map[string]int64{}
	}
	if s.Refused == nil {
		s.Refused = map[string]int64{}
	}
	for r, v := range o.Used {
		s.Used[r] += v
	}
	for r, v := range o.Refused {
		s.Refused[r] += v
	}
}
