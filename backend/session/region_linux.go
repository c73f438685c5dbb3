package session

import (
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/engine"
	"golang.org/x/sys/unix"
)

// mapPieces maps guest memory pieces side by side into one new virtual
// address range: a PROT_NONE reservation, then each piece's memfd range
// MAP_FIXED|MAP_SHARED over its place. Pieces must be page-aligned and come
// from fd-backed regions.
func mapPieces(ps []engine.Piece) ([]byte, error) {
	page := uint64(unix.Getpagesize())
	var total uint64
	for i, p := range ps {
		n := uint64(len(p.Host))
		if p.Region == nil || p.Region.FD < 0 {
			return nil, device.Errorf("OpGuestRegister", device.ErrNotSupported, "piece %d is not backed by a guest memory fd; mapped registration needs fd-backed guest RAM", i)
		}
		if p.Off%page != 0 || n%page != 0 || p.Region.MmapOffset%page != 0 {
			return nil, device.Errorf("OpGuestRegister", device.ErrInvalidValue, "segment %d (offset %#x, %d bytes) is not page-aligned", i, p.Off, n)
		}
		total += n
	}
	res, err := unix.Mmap(-1, 0, int(total), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, device.Errorf("OpGuestRegister", device.ErrOutOfMemory, "reserving %d bytes of address space: %v", total, err)
	}
	var at uint64
	for i, p := range ps {
		n := uint64(len(p.Host))
		if err := mmapFixed(res[at:at+n], p.Region.FD, int64(p.Region.MmapOffset+p.Off)); err != nil {
			_ = unix.Munmap(res)
			return nil, device.Errorf("OpGuestRegister", device.ErrOutOfMemory, "mapping piece %d: %v", i, err)
		}
		at += n
	}
	return res, nil
}

func unmap(b []byte) { _ = unix.Munmap(b) }
