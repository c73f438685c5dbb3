package budget

import (
	"fmt"
	"sync"
)

// A VM whose guest processes run in several worker processes has one
// budget, not one per worker: the VM level is kept by the manager (a
// Ledger per VM), and each worker's VM pool leases units of it in blocks
// (LeaseFrom). A take within the worker's lease costs no message; beyond
// it the worker asks for what it needs plus some slack (Slack), and gives
// back what it no longer uses beyond the slack. So the VM's bound holds
// for the sum of its workers, at the price of a bounded error: a take may
// be refused while the VM's other workers hold up to twice their slack
// unused (with Slack's 1/256 of the bound, 32 workers hold at most a
// quarter of it).

// Upstream is a level kept elsewhere (the manager's Ledger of a VM) that a
// pool leases from.
type Upstream interface {
	// Lease takes between lo and hi units of r (hi if they fit, else lo)
	// and returns how many it took, or *Exhausted naming the upstream
	// level if even lo does not fit. force takes lo even past the bound,
	// and must not wait for an answer (it is called from driver threads).
	Lease(r Resource, lo, hi int64, force bool) (int64, error)
	// Unlease gives n units of r back.
	Unlease(r Resource, n int64)
}

// Slack is what a pool leasing a VM bounded by vm keeps unused of each
// resource: 1/256 of the bound (at least 1). Sessions are counted by the
// manager itself and are not leased (slack 0).
func Slack(vm Limits) Limits {
	var s Limits
	for r := range numResources {
		if Resource(r) != Sessions && vm[r] > 0 {
			s[r] = max(vm[r]/256, 1)
		}
	}
	return s
}

// LeaseFrom makes p's use of each resource with a slack count against u:
// p leases from u what it takes beyond what it already holds. Call it
// before p is used.
func (p *Pool) LeaseFrom(u Upstream, slack Limits) {
	p.upstream, p.slack = u, slack
}

// Leased returns the units of r p holds of its upstream level.
func (p *Pool) Leased(r Resource) int64 {
	p.lmu.Lock()
	defer p.lmu.Unlock()
	return p.leased[r]
}

func (p *Pool) takeLeased(r Resource, n int64, force bool) error {
	p.lmu.Lock()
	defer p.lmu.Unlock()
	u := p.used[r].Load()
	if lim := p.limits[r]; !force && lim > 0 && u+n > lim {
		p.refused[r].Add(1)
		return &Exhausted{Resource: r, Level: p.name, Limit: lim, Used: u, Want: n}
	}
	if need := u + n - p.leased[r]; need > 0 {
		got, err := p.upstream.Lease(r, need, need+p.slack[r], force)
		if err == nil && got < need {
			p.upstream.Unlease(r, got)
			err = fmt.Errorf("budget: %s of %s: the upstream level granted %d of %d", r, p.name, got, need)
		}
		if err != nil {
			p.refused[r].Add(1)
			return err
		}
		p.leased[r] += got
	}
	p.used[r].Store(u + n)
	return nil
}

func (p *Pool) giveLeased(r Resource, n int64) {
	p.lmu.Lock()
	defer p.lmu.Unlock()
	u := max(p.used[r].Load()-n, 0)
	p.used[r].Store(u)
	if keep := p.slack[r]; p.leased[r]-u > 2*keep {
		back := p.leased[r] - u - keep
		p.leased[r] -= back
		p.upstream.Unlease(r, back)
	}
}

// Ledger is a level kept for holders in other processes (a VM's pool in
// the manager, its holders the VM's workers): what each holder leased is
// remembered, so that a holder that ends (or dies) gives it all back.
type Ledger struct {
	pool *Pool
	mu   sync.Mutex
	held map[any]*Limits
}

// NewLedger keeps the leases of pool's holders.
func NewLedger(pool *Pool) *Ledger { return &Ledger{pool: pool, held: map[any]*Limits{}} }

// Pool is the level the ledger charges.
func (l *Ledger) Pool() *Pool { return l.pool }

// Lease takes between lo and hi units of r for holder (see
// Upstream.Lease); a resource out of range, or lo > hi, is an error.
func (l *Ledger) Lease(holder any, r Resource, lo, hi int64, force bool) (int64, error) {
	if r < 0 || r >= numResources || lo <= 0 || hi < lo {
		return 0, fmt.Errorf("budget: a lease of %d to %d units of %s", lo, hi, r)
	}
	got := hi
	err := l.pool.Take(r, hi)
	if err != nil && hi > lo {
		got, err = lo, l.pool.Take(r, lo)
	}
	if err != nil {
		if !force {
			return 0, err
		}
		got = lo
		l.pool.Force(r, lo)
	}
	l.mu.Lock()
	h := l.held[holder]
	if h == nil {
		h = &Limits{}
		l.held[holder] = h
	}
	h[r] += got
	l.mu.Unlock()
	return got, nil
}

// Unlease gives back n units of r of holder's (at most what it holds).
func (l *Ledger) Unlease(holder any, r Resource, n int64) {
	if r < 0 || r >= numResources || n <= 0 {
		return
	}
	l.mu.Lock()
	h := l.held[holder]
	if h == nil {
		l.mu.Unlock()
		return
	}
	n = min(n, h[r])
	h[r] -= n
	l.mu.Unlock()
	l.pool.Give(r, n)
}

// Drop gives back everything holder holds (it has ended) and returns it.
func (l *Ledger) Drop(holder any) Limits {
	l.mu.Lock()
	h := l.held[holder]
	delete(l.held, holder)
	l.mu.Unlock()
	if h == nil {
		return Limits{}
	}
	for r := range numResources {
		l.pool.Give(Resource(r), h[r])
	}
	return *h
}

// Holders returns how many holders hold a lease.
func (l *Ledger) Holders() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held)
}

// For returns holder's view of the ledger, an Upstream (tests, and a
// process that keeps its VM's level itself).
func (l *Ledger) For(holder any) Upstream { return ledgerFor{l, holder} }

type ledgerFor struct {
	l      *Ledger
	holder any
}

func (f ledgerFor) Lease(r Resource, lo, hi int64, force bool) (int64, error) {
	return f.l.Lease(f.holder, r, lo, hi, force)
}
func (f ledgerFor) Unlease(r Resource, n int64) { f.l.Unlease(f.holder, r, n) }
