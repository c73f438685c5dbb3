package sessiontest

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/guestmem"
)

// RegionSpec places one region of fake guest RAM.
type RegionSpec struct {
	GPA  uint64
	Size uint64
}

// GuestRAM builds guest RAM in one memfd, one region per spec (laid out
// back to back in the file), mapped through guestmem.NewTable exactly as the
// vhost-user transport maps QEMU's memory. Release the table when done.
func GuestRAM(specs ...RegionSpec) (*guestmem.Table, error) {
	var total uint64
	for _, s := range specs {
		total += s.Size
	}
	fd, err := unix.MemfdCreate("vgpu-test-ram", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("sessiontest: memfd_create: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(total)); err != nil {
		return nil, fmt.Errorf("sessiontest: ftruncate: %w", err)
	}
	var rs []guestmem.RegionSpec
	var off uint64
	for _, s := range specs {
		dfd, err := unix.Dup(fd)
		if err != nil {
			return nil, err
		}
		rs = append(rs, guestmem.RegionSpec{GuestPhys: guestmem.GPA(s.GPA), Size: s.Size, UserAddr: 0x7000_0000_0000 + off, MmapOffset: off, FD: dfd})
		off += s.Size
	}
	return guestmem.NewTable(rs)
}
