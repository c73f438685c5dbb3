// Package guestmem maps a VM's RAM into the backend and translates
// guest-physical addresses (GPAs) into host byte slices.
//
// A Table is an immutable snapshot of the VM's memory regions as QEMU
// described them (vhost-user SET_MEM_TABLE, or QMP in kernel vhost-vsock
// mode). Every translation is bounds-checked with overflow-safe arithmetic:
// a range that wraps around, starts or ends outside RAM, or spans two regions
// that are not contiguous is refused with ErrOutOfRange. Nothing here trusts
// an address; callers get either a slice inside a mapping or an error.
package guestmem

import "errors"

// GPA is a guest-physical address. Use Table methods to turn it into memory.
type GPA uint64

// ErrOutOfRange is returned for a guest address range that is not entirely
// inside guest RAM.
var ErrOutOfRange = errors.New("guestmem: guest address range outside guest RAM")

// ErrClosed is returned by a Table that has been released.
var ErrClosed = errors.New("guestmem: guest memory table is closed")

// Region is one mapped region of guest RAM.
type Region struct {
	GuestPhys  GPA    // first guest-physical address
	Size       uint64 // bytes
	UserAddr   uint64 // QEMU's virtual address of the region (vhost-user)
	MmapOffset uint64 // offset of the region within FD
	FD         int    // memfd (owned by the Table; -1 if not fd-backed)
	Host       []byte // the backend's mapping of the region, len == Size
}

// Source gives the current memory table of one VM. The table may change when
// QEMU reconnects or hot-plugs memory; callers Acquire a table for the
// duration of one request and Release it afterwards.
type Source interface {
	// Acquire returns the current table with a reference held, or an error
	// if the VM has no memory table (yet, or any more).
	Acquire() (*Table, error)
}
