package guestmem

import (
	"errors"
	"sync"
)

// Latest is a Source serving the table last given to Set: the vhost-user
// server's view of QEMU's memory table, and a worker's or a backend's view
// of the tables handed over on its control socket.
type Latest struct {
	// Missing is what Acquire returns while there is no table (before the
	// first Set, after Set(nil)); nil means a generic error.
	Missing error

	mu  sync.Mutex
	cur *Table
}

var errNoTable = errors.New("guestmem: no memory table")

// Acquire returns the latest table with a reference held.
func (l *Latest) Acquire() (*Table, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		if l.Missing != nil {
			return nil, l.Missing
		}
		return nil, errNoTable
	}
	return l.cur.Acquire()
}

// Set makes t (whose reference it takes over) the latest table and drops
// the reference on the one before; nil leaves none.
func (l *Latest) Set(t *Table) {
	l.mu.Lock()
	old := l.cur
	l.cur = t
	l.mu.Unlock()
	if old != nil {
		old.Release()
	}
}
