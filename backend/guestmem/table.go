package guestmem

import (
	"fmt"
	"sort"
	"sync/atomic"
)

// RegionSpec describes a region to map: QEMU's view of it.
type RegionSpec struct {
	GuestPhys  GPA
	Size       uint64
	UserAddr   uint64
	MmapOffset uint64
	FD         int // ownership passes to NewTable (closed on error too)
}

// Table is an immutable, reference-counted snapshot of a VM's RAM.
type Table struct {
	regions []Region // sorted by GuestPhys, non-overlapping
	refs    atomic.Int64
	unmap   func() // releases mappings and fds; nil for borrowed memory
}

// newTable validates regions (sorted, non-overlapping, no wrap-around) and
// builds a table holding one reference.
func newTable(regions []Region, unmap func()) (*Table, error) {
	sort.Slice(regions, func(i, j int) bool { return regions[i].GuestPhys < regions[j].GuestPhys })
	for i, r := range regions {
		if r.Size == 0 {
			return nil, fmt.Errorf("guestmem: region %d at %#x has size 0", i, r.GuestPhys)
		}
		if uint64(r.GuestPhys)+r.Size < uint64(r.GuestPhys) {
			return nil, fmt.Errorf("guestmem: region %d at %#x size %#x wraps around", i, r.GuestPhys, r.Size)
		}
		if uint64(len(r.Host)) != r.Size {
			return nil, fmt.Errorf("guestmem: region %d mapping is %d bytes, want %d", i, len(r.Host), r.Size)
		}
		if i > 0 {
			p := regions[i-1]
			if uint64(p.GuestPhys)+p.Size > uint64(r.GuestPhys) {
				return nil, fmt.Errorf("guestmem: regions at %#x and %#x overlap", p.GuestPhys, r.GuestPhys)
			}
		}
	}
	t := &Table{regions: regions, unmap: unmap}
	t.refs.Store(1)
	return t, nil
}

// FromMemory builds a table over memory the caller already owns (tests, sim).
// Release never frees it.
func FromMemory(regions []Region) (*Table, error) {
	rs := append([]Region(nil), regions...)
	for i := range rs {
		if rs[i].FD == 0 {
			rs[i].FD = -1
		}
	}
	return newTable(rs, nil)
}

// NewTableFunc builds a table over mappings the caller owns (host mode's
// shared memfds), with the same checks as NewTable. release runs once, when
// the last reference is dropped; on error it is not called. Regions' FD
// fields are kept as given (-1: not fd-backed).
func NewTableFunc(regions []Region, release func()) (*Table, error) {
	return newTable(append([]Region(nil), regions...), release)
}

// Regions returns the table's regions, sorted by guest-physical address.
// The slice must not be modified.
func (t *Table) Regions() []Region { return t.regions }

// Retain takes another reference. It fails if the table is already released.
func (t *Table) Retain() error {
	for {
		n := t.refs.Load()
		if n <= 0 {
			return ErrClosed
		}
		if t.refs.CompareAndSwap(n, n+1) {
			return nil
		}
	}
}

// Release drops a reference; the last one unmaps the memory.
func (t *Table) Release() {
	if t.refs.Add(-1) == 0 && t.unmap != nil {
		t.unmap()
	}
}

// Acquire lets a *Table serve as its own Source (a VM whose memory never changes).
func (t *Table) Acquire() (*Table, error) {
	if err := t.Retain(); err != nil {
		return nil, err
	}
	return t, nil
}

// find returns the region that contains gpa.
func (t *Table) find(gpa GPA) (*Region, bool) {
	i := sort.Search(len(t.regions), func(i int) bool {
		r := &t.regions[i]
		return uint64(r.GuestPhys)+r.Size > uint64(gpa)
	})
	if i == len(t.regions) || t.regions[i].GuestPhys > gpa {
		return nil, false
	}
	return &t.regions[i], true
}

// Slice returns the host bytes of [gpa, gpa+n). The range must lie inside a
// single region (QEMU's regions are never adjacent in host memory in a way we
// could rely on). n == 0 is refused.
func (t *Table) Slice(gpa GPA, n uint64) ([]byte, error) {
	if n == 0 {
		return nil, fmt.Errorf("%w: empty range at %#x", ErrOutOfRange, gpa)
	}
	end := uint64(gpa) + n
	if end < uint64(gpa) {
		return nil, fmt.Errorf("%w: %#x+%#x wraps around", ErrOutOfRange, gpa, n)
	}
	r, ok := t.find(gpa)
	if !ok {
		return nil, fmt.Errorf("%w: %#x+%#x", ErrOutOfRange, gpa, n)
	}
	off := uint64(gpa - r.GuestPhys)
	if n > r.Size-off {
		return nil, fmt.Errorf("%w: %#x+%#x crosses the end of the region at %#x", ErrOutOfRange, gpa, n, r.GuestPhys)
	}
	return r.Host[off : off+n : off+n], nil
}

// Locate returns the region containing [gpa, gpa+n) and the offset of gpa in
// it, with the same checks as Slice. Memcpy engines use it to find the
// device-mapped alias of guest memory.
func (t *Table) Locate(gpa GPA, n uint64) (*Region, uint64, error) {
	if _, err := t.Slice(gpa, n); err != nil {
		return nil, 0, err
	}
	r, _ := t.find(gpa)
	return r, uint64(gpa - r.GuestPhys), nil
}

// UserToGPA translates a QEMU virtual address (as vhost-user vring addresses
// are given) to a guest-physical address.
func (t *Table) UserToGPA(uaddr uint64) (GPA, error) {
	for i := range t.regions {
		r := &t.regions[i]
		if uaddr >= r.UserAddr && uaddr-r.UserAddr < r.Size {
			return r.GuestPhys + GPA(uaddr-r.UserAddr), nil
		}
	}
	return 0, fmt.Errorf("%w: QEMU address %#x", ErrOutOfRange, uaddr)
}
