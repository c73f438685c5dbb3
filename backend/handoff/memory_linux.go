package handoff

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/guestmem"
)

// SentMemory remembers the memory table last sent on one control socket,
// so that a VM's table goes over once per change. The caller serialises
// its use with the socket's other sends.
type SentMemory struct {
	table *guestmem.Table // the table last sent (a reference is held)
	gen   uint64
}

// Send sends src's current table on ctrl unless it is the one last sent,
// and returns its generation; next numbers a new one.
func (s *SentMemory) Send(ctrl Socket, src guestmem.Source, next func() uint64) (uint64, error) {
	t, err := src.Acquire()
	if err != nil {
		return 0, err
	}
	if s.table == t {
		t.Release()
		return s.gen, nil
	}
	var regions []Region
	var fds []int
	for _, r := range t.Regions() {
		if r.FD < 0 {
			t.Release()
			return 0, fmt.Errorf("handoff: guest RAM region at %#x has no fd to hand over", r.GuestPhys)
		}
		regions = append(regions, Region{GPA: uint64(r.GuestPhys), Size: r.Size, UserAddr: r.UserAddr, MmapOffset: r.MmapOffset})
		fds = append(fds, r.FD)
	}
	gen := next()
	if err := Send(ctrl, &Message{Op: OpMemory, Memory: gen, Regions: regions}, fds); err != nil {
		t.Release()
		return 0, err
	}
	s.Release()
	s.table, s.gen = t, gen
	return gen, nil
}

// Held reports whether a table was sent and is still referenced.
func (s *SentMemory) Held() bool { return s.table != nil }

// Is reports whether t is the table last sent.
func (s *SentMemory) Is(t *guestmem.Table) bool { return s.table != nil && s.table == t }

// Release drops the reference to the table last sent (the socket is gone,
// or the receiver was told to forget it).
func (s *SentMemory) Release() {
	if s.table != nil {
		s.table.Release()
		s.table, s.gen = nil, 0
	}
}

// MapOptions is how much Map trusts the sender.
type MapOptions struct {
	// RequireSealed refuses memfds that the sender (or anyone holding
	// them) could still shrink: a truncated file under a mapping faults
	// (SIGBUS) on the next access. QEMU's memory-backend-memfd seals its
	// memfds (seal=on, the default).
	RequireSealed bool
	// MaxRegions caps the number of regions (default MaxFDs).
	MaxRegions int
}

// ErrBadMemory wraps every reason Map refuses a memory message.
var ErrBadMemory = errors.New("handoff: bad memory message")

// Map checks a memory message and maps its regions. It takes ownership of
// fds (closed on error; otherwise the table closes them when released).
func Map(m *Message, fds []int, opts MapOptions) (*guestmem.Table, error) {
	max := opts.MaxRegions
	if max <= 0 {
		max = MaxFDs
	}
	if len(fds) != len(m.Regions) || len(fds) == 0 || len(fds) > max {
		CloseFDs(fds)
		return nil, fmt.Errorf("%w: %d regions and %d fds (want as many, 1..%d)", ErrBadMemory, len(m.Regions), len(fds), max)
	}
	specs := make([]guestmem.RegionSpec, len(fds))
	for i, r := range m.Regions {
		if err := checkRAMFile(fds[i], r, opts.RequireSealed); err != nil {
			CloseFDs(fds)
			return nil, fmt.Errorf("%w: region %d (gpa %#x): %v", ErrBadMemory, i, r.GPA, err)
		}
		specs[i] = guestmem.RegionSpec{GuestPhys: guestmem.GPA(r.GPA), Size: r.Size, UserAddr: r.UserAddr, MmapOffset: r.MmapOffset, FD: fds[i]}
	}
	t, err := guestmem.NewTable(specs) // owns the fds now, closes them on error
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadMemory, err)
	}
	return t, nil
}

// checkRAMFile checks that fd is a regular file (memfd, shm, hugetlbfs)
// that holds offset+size bytes, and optionally that it cannot shrink.
func checkRAMFile(fd int, r Region, requireSealed bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("fd is not a regular file (mode %#o)", st.Mode)
	}
	end := r.MmapOffset + r.Size
	if r.Size == 0 || end < r.MmapOffset || uint64(st.Size) < end {
		return fmt.Errorf("offset %#x + size %#x does not fit the %d-byte file", r.MmapOffset, r.Size, st.Size)
	}
	if requireSealed {
		seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
		if err != nil {
			return fmt.Errorf("not a sealed memfd (%v): guest RAM must be a memory-backend-memfd with seal=on", err)
		}
		if seals&unix.F_SEAL_SHRINK == 0 {
			return fmt.Errorf("memfd not sealed against shrinking (seals %#x): guest RAM must be a memory-backend-memfd with seal=on", seals)
		}
	}
	return nil
}

// ErrNoMemory is what a worker's or a backend's guest memory source
// (guestmem.Latest) returns before a table was handed over.
var ErrNoMemory = errors.New("handoff: no guest memory table received")
