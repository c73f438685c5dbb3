package hostmode

import (
	"fmt"
	"slices"
	"sort"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/transport"
)

// share is one mapped memfd.
type share struct {
	base guestmem.GPA
	size uint64
	fd   int
	host []byte
	refs int // tables that hold it (under shareSet.mu)
}

// shareSet is a connection's shared memory: a guestmem.Source whose table
// is rebuilt on every share and unshare. Each table holds its shares; a
// share is unmapped (and its fd closed) when the last table holding it is
// released, so a call that acquired a table, or a registered region that
// retained one, never sees its memory go away.
type shareSet struct {
	opt Options

	mu     sync.Mutex
	live   map[guestmem.GPA]*share
	cur    *guestmem.Table // the set's own reference; nil before the first Acquire and after close
	closed bool
	mapped int    // shares still mapped (live, or ended but in use)
	bytes  uint64 // their bytes
	hooks  []func([]byte)
}

func newShareSet(opt Options) *shareSet {
	return &shareSet{opt: opt, live: map[guestmem.GPA]*share{}}
}

// Acquire returns the current table (empty before the first share).
func (s *shareSet) Acquire() (*guestmem.Table, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, guestmem.ErrClosed
	}
	if s.cur == nil {
		t, err := s.buildLocked()
		if err != nil {
			return nil, err
		}
		s.cur = t
	}
	return s.cur.Acquire()
}

// buildLocked makes a table of the live shares; it holds each of them.
func (s *shareSet) buildLocked() (*guestmem.Table, error) {
	shs := make([]*share, 0, len(s.live))
	for _, sh := range s.live {
		shs = append(shs, sh)
	}
	sort.Slice(shs, func(i, j int) bool { return shs[i].base < shs[j].base })
	regions := make([]guestmem.Region, len(shs))
	for i, sh := range shs {
		regions[i] = guestmem.Region{GuestPhys: sh.base, Size: sh.size, FD: sh.fd, Host: sh.host}
	}
	t, err := guestmem.NewTableFunc(regions, func() { s.drop(shs) })
	if err != nil {
		return nil, err
	}
	for _, sh := range shs {
		sh.refs++
	}
	return t, nil
}

// swapLocked replaces the current table after a change; the old one is
// returned for the caller to release outside the lock.
func (s *shareSet) swapLocked() (old *guestmem.Table, err error) {
	t, err := s.buildLocked()
	if err != nil {
		return nil, err
	}
	old, s.cur = s.cur, t
	return old, nil
}

func (s *shareSet) share(base guestmem.GPA, size uint64, fd int) (err error) {
	defer func() {
		if err != nil {
			_ = unix.Close(fd)
		}
	}()
	if err := checkShareFD(fd, size); err != nil {
		return err
	}
	page := uint64(unix.Getpagesize())
	switch {
	case size == 0:
		return fmt.Errorf("%w: size 0", transport.ErrBadShare)
	case uint64(base)%page != 0 || size%page != 0:
		return fmt.Errorf("%w: base %#x or size %#x not page-aligned (%d)", transport.ErrBadShare, uint64(base), size, page)
	case uint64(base)+size < uint64(base):
		return fmt.Errorf("%w: base %#x + size %#x wraps around", transport.ErrBadShare, uint64(base), size)
	case size > 1<<46:
		return fmt.Errorf("%w: size %#x too large", transport.ErrBadShare, size)
	}
	s.mu.Lock()
	old, err := s.addLocked(base, size, fd)
	s.mu.Unlock()
	if old != nil {
		old.Release() // outside the lock: it may unmap, which takes s.mu
	}
	return err
}

// addLocked maps fd and makes a table with it; it returns the table that
// was current, for the caller to release after unlocking.
func (s *shareSet) addLocked(base guestmem.GPA, size uint64, fd int) (*guestmem.Table, error) {
	if s.closed {
		return nil, fmt.Errorf("%w: connection closed", transport.ErrBadShare)
	}
	end := uint64(base) + size
	for _, o := range s.live {
		if uint64(base) < uint64(o.base)+o.size && uint64(o.base) < end {
			return nil, fmt.Errorf("%w: [%#x, %#x) overlaps the share at %#x (%d bytes)", transport.ErrBadShare, uint64(base), end, uint64(o.base), o.size)
		}
	}
	if s.mapped+1 > s.opt.MaxShares {
		return nil, fmt.Errorf("%w: %d shares mapped (at most %d per connection)", transport.ErrShareLimit, s.mapped, s.opt.MaxShares)
	}
	if size > s.opt.MaxShareBytes-min(s.bytes, s.opt.MaxShareBytes) {
		return nil, fmt.Errorf("%w: %d bytes shared, %d more would pass %d per connection", transport.ErrShareLimit, s.bytes, size, s.opt.MaxShareBytes)
	}
	host, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		if err == unix.ENOMEM {
			// Out of address space or of mappings (vm.max_map_count):
			// the backend's resources, not the client's mistake.
			return nil, fmt.Errorf("%w: mmap of %d bytes: %v", transport.ErrShareLimit, size, err)
		}
		return nil, fmt.Errorf("%w: mmap of %d bytes: %v", transport.ErrBadShare, size, err)
	}
	sh := &share{base: base, size: size, fd: fd, host: host}
	s.live[base] = sh
	s.mapped++
	s.bytes += size
	old, err := s.swapLocked()
	if err != nil { // cannot happen: ranges were checked
		delete(s.live, base)
		s.mapped--
		s.bytes -= size
		_ = unix.Munmap(host)
		return nil, fmt.Errorf("%w: %v", transport.ErrBadShare, err)
	}
	return old, nil
}

// checkShareFD checks that fd is a memfd (or other sealable shmem file)
// sealed against shrinking, holding at least size bytes.
func checkShareFD(fd int, size uint64) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%w: stat: %v", transport.ErrBadShare, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%w: fd is not a memfd (file mode %#o)", transport.ErrBadShare, st.Mode)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return fmt.Errorf("%w: fd is not a memfd (F_GET_SEALS: %v)", transport.ErrBadShare, err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return fmt.Errorf("%w: memfd not sealed against shrinking (seals %#x; want F_SEAL_SHRINK)", transport.ErrBadShare, seals)
	}
	if uint64(st.Size) < size {
		return fmt.Errorf("%w: size %#x larger than the %d-byte memfd", transport.ErrBadShare, size, st.Size)
	}
	return nil
}

func (s *shareSet) unshare(base guestmem.GPA) error {
	s.mu.Lock()
	sh, ok := s.live[base]
	if !ok || s.closed {
		s.mu.Unlock()
		return fmt.Errorf("%w: no share at %#x", transport.ErrBadShare, uint64(base))
	}
	delete(s.live, base)
	old, err := s.swapLocked()
	if err != nil { // cannot happen: fewer shares than a table that was built
		s.live[base] = sh
		s.mu.Unlock()
		return fmt.Errorf("%w: %v", transport.ErrBadShare, err)
	}
	s.mu.Unlock()
	if old != nil {
		old.Release()
	}
	return nil
}

// drop is a table's release: the shares nothing holds any more are
// unmapped, after the hooks.
func (s *shareSet) drop(shs []*share) {
	var dead []*share
	s.mu.Lock()
	for _, sh := range shs {
		sh.refs--
		if sh.refs == 0 {
			dead = append(dead, sh)
			s.mapped--
			s.bytes -= sh.size
		}
	}
	hooks := slices.Clone(s.hooks)
	s.mu.Unlock()
	for _, sh := range dead {
		for _, h := range hooks {
			h(sh.host)
		}
		_ = unix.Munmap(sh.host)
		_ = unix.Close(sh.fd)
	}
}

func (s *shareSet) onUnmap(f func([]byte)) {
	s.mu.Lock()
	s.hooks = append(s.hooks, f)
	s.mu.Unlock()
}

// close drops the set's table: shares are unmapped as their last users let
// go of them.
func (s *shareSet) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	old := s.cur
	s.cur = nil
	clear(s.live)
	s.mu.Unlock()
	if old != nil {
		old.Release()
	}
}

func (s *shareSet) stats() (int, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mapped, s.bytes
}
