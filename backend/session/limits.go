package session

import (
	"sync"

	"github.com/vgpu-project/vgpu/backend/device"
)

// Context limits (cuCtxSetLimit) are a context's, and sessions that share a
// context must not change each other's (issue 20, item 6: one client's
// malloc heap size became every client's). So a limit a session sets is
// its own: DEVICE_GET_LIMIT answers it what it set (or what the context
// had before any session set one), and the context runs with the largest
// value any live session asked for — every session gets at least its own
// (a larger stack, heap or FIFO serves a kernel that needs less), and the
// validators bound each value, so no session can make the context reserve
// an unreasonable share of the device. When a session ends, the context
// goes back to the largest remaining request. A session that owns its
// context (a worker per guest process) sets it directly, as natively.

type limitKey struct{ dev, limit int }

// LimitTable arbitrates the limits of the sessions that share contexts
// (one per process; nil in Config: a table of the session's own).
type LimitTable struct {
	mu   sync.Mutex
	base map[limitKey]uint64 // the context's value before any session set one
	want map[limitKey]map[*Session]uint64
}

// NewLimitTable returns an empty table.
func NewLimitTable() *LimitTable {
	return &LimitTable{base: map[limitKey]uint64{}, want: map[limitKey]map[*Session]uint64{}}
}

// set records s's value v for k and applies the largest request.
func (t *LimitTable) set(ctx device.Context, s *Session, k limitKey, v uint64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.base[k]; !ok {
		b, err := ctx.GetLimit(k.limit)
		if err != nil {
			return err
		}
		t.base[k] = b
	}
	w := t.want[k]
	if w == nil {
		w = map[*Session]uint64{}
		t.want[k] = w
	}
	old, had := w[s]
	w[s] = v
	if err := ctx.SetLimit(k.limit, t.valueLocked(k)); err != nil {
		if had {
			w[s] = old
		} else {
			delete(w, s)
		}
		return err
	}
	return nil
}

func (t *LimitTable) valueLocked(k limitKey) uint64 {
	v := t.base[k]
	for _, x := range t.want[k] {
		v = max(v, x)
	}
	return v
}

// get returns what s sees of k.
func (t *LimitTable) get(ctx device.Context, s *Session, k limitKey) (uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.want[k][s]; ok {
		return v, nil
	}
	if b, ok := t.base[k]; ok {
		return b, nil
	}
	return ctx.GetLimit(k.limit)
}

// drop forgets s's requests on device dev (-1: all) and lowers the
// contexts to what the others still ask.
func (t *LimitTable) drop(devs []device.Context, s *Session, dev int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, w := range t.want {
		if _, ok := w[s]; !ok || (dev >= 0 && k.dev != dev) {
			continue
		}
		delete(w, s)
		// A limit that cannot go down any more (a heap already used) stays
		// where it is: nothing to report to anyone.
		_ = devs[k.dev].SetLimit(k.limit, t.valueLocked(k))
	}
}

func deviceSetLimitShared(s *Session, dev int, limit uint32, v uint64) error {
	ctx := s.cfg.Devices[dev]
	if !s.sharedContext() {
		return ctx.SetLimit(int(limit), v)
	}
	return s.cfg.LimitTable.set(ctx, s, limitKey{dev, int(limit)}, v)
}

func deviceGetLimitShared(s *Session, dev int, limit uint32) (uint64, error) {
	ctx := s.cfg.Devices[dev]
	if !s.sharedContext() {
		return ctx.GetLimit(int(limit))
	}
	return s.cfg.LimitTable.get(ctx, s, limitKey{dev, int(limit)})
}
