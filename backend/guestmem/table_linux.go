package guestmem

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// NewTable maps each region's fd (shared, read-write) and returns a table
// holding one reference. It takes ownership of the fds: they are closed when
// the table is released, or at once on error.
func NewTable(specs []RegionSpec) (*Table, error) {
	var regions []Region
	cleanup := func() {
		for _, r := range regions {
			if r.Host != nil {
				_ = unix.Munmap(r.Host)
			}
		}
		for _, s := range specs {
			if s.FD >= 0 {
				_ = unix.Close(s.FD)
			}
		}
	}
	for i, s := range specs {
		if s.Size == 0 || s.Size > 1<<46 || s.MmapOffset > 1<<46 {
			cleanup()
			return nil, fmt.Errorf("guestmem: region %d: size %#x offset %#x out of bounds", i, s.Size, s.MmapOffset)
		}
		// mmap needs a page-aligned offset; QEMU's offsets are aligned, a
		// misaligned one is refused rather than fixed up.
		if s.MmapOffset%uint64(unix.Getpagesize()) != 0 {
			cleanup()
			return nil, fmt.Errorf("guestmem: region %d: mmap offset %#x not page aligned", i, s.MmapOffset)
		}
		// A mapping past the end of the file would SIGBUS on access: check
		// the fd's size first (memfd, shm and hugetlbfs files have one).
		var st unix.Stat_t
		if err := unix.Fstat(s.FD, &st); err != nil {
			cleanup()
			return nil, fmt.Errorf("guestmem: region %d: stat fd: %w", i, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG && uint64(st.Size) < s.MmapOffset+s.Size {
			cleanup()
			return nil, fmt.Errorf("guestmem: region %d: offset %#x + size %#x exceeds the %d-byte file behind it", i, s.MmapOffset, s.Size, st.Size)
		}
		b, err := unix.Mmap(s.FD, int64(s.MmapOffset), int(s.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("guestmem: mmap region %d (gpa %#x, %d bytes): %w", i, s.GuestPhys, s.Size, err)
		}
		regions = append(regions, Region{GuestPhys: s.GuestPhys, Size: s.Size, UserAddr: s.UserAddr, MmapOffset: s.MmapOffset, FD: s.FD, Host: b})
	}
	t, err := newTable(regions, cleanup)
	if err != nil {
		cleanup()
		return nil, err
	}
	return t, nil
}
