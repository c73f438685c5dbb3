package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/budget"
	"github.com/vgpu-project/vgpu/backend/handoff"
	"github.com/vgpu-project/vgpu/backend/session"
)

// What a VM's processes share. With a worker per guest process, the VM's
// device memory cap and its module image cache must span all of its
// workers, so both live in the manager (per VM) and a worker reaches them
// over its control socket:
//
//   - the cap: each worker's session.Quota leases from the VM's
//     session.Account in the manager ("lease", "leased", "unlease"); an
//     allocation within the worker's lease costs no message;
//   - module images: a worker asks for an image by hash ("module-get") and
//     gets it as a sealed memfd that it maps read-only; an image it loaded
//     and validated goes to the manager the same way ("module-put"). A
//     worker can only reach its own VM's account and cache: the manager
//     knows which VM each worker serves and ignores what a worker claims.

// VMResources returns server.Config.VMResources for a worker whose VM's
// processes each run in their own worker: the VM's quota (cap limit, 0:
// none) and module store live in the manager.
func (c *Control) VMResources(limit uint64) func(vm string) (*session.Quota, session.ModuleStore) {
	return func(string) (*session.Quota, session.ModuleStore) {
		q := &session.Quota{Limit: limit}
		if limit != 0 {
			q.Shared = leaser{c}
		}
		return q, &remoteModules{c: c, local: map[[32]byte][]byte{}}
	}
}

// leaser is a session.Leaser on the manager's account of this worker's VM.
type leaser struct{ c *Control }

func (l leaser) Lease(n uint64) (uint64, error) {
	a, fds, err := l.c.call(&handoff.Message{Op: handoff.OpLease, Bytes: n}, nil)
	handoff.CloseFDs(fds)
	if err != nil {
		return 0, err
	}
	return a.Bytes, nil
}

func (l leaser) Unlease(n uint64) {
	_ = l.c.send(&handoff.Message{Op: handoff.OpUnlease, Bytes: n}, nil)
}

func (l leaser) Leased() (uint64, error) {
	a, fds, err := l.c.call(&handoff.Message{Op: handoff.OpLeased}, nil)
	handoff.CloseFDs(fds)
	if err != nil {
		return 0, err
	}
	return a.Bytes, nil
}

// VMBudget returns server.Config.VMBudget for a worker whose VM's
// processes each run in their own worker: the VM level of its budgets
// (backend/budget) is a Ledger in the manager, which this worker's VM pool
// leases from, so the VM's bounds hold for all of its workers together.
func (c *Control) VMBudget() budget.Upstream { return budgetLeaser{c} }

type budgetLeaser struct{ c *Control }

func (l budgetLeaser) Lease(r budget.Resource, lo, hi int64, force bool) (int64, error) {
	m := &handoff.Message{Op: handoff.OpBudgetLease, Resource: r, Units: lo, UnitsMax: hi, Force: force}
	if force {
		// From a driver thread: no waiting. The manager takes exactly lo
		// (past the bound if need be), which is what this side counts.
		m.UnitsMax = lo
		if err := l.c.send(m, nil); err != nil {
			return 0, fmt.Errorf("worker: leasing %s of the VM's budget: %w", r, err)
		}
		return lo, nil
	}
	a, fds, err := l.c.call(m, nil)
	handoff.CloseFDs(fds)
	switch {
	case err != nil:
		return 0, fmt.Errorf("worker: leasing %s of the VM's budget: %w", r, err)
	case a.Exhausted != nil:
		return 0, a.Exhausted
	case a.Error != "":
		return 0, fmt.Errorf("worker: leasing %s of the VM's budget: %s", r, a.Error)
	case a.Units < lo || a.Units > hi:
		l.Unlease(r, a.Units)
		return 0, fmt.Errorf("worker: the manager granted %d units of %s for a lease of %d to %d", a.Units, r, lo, hi)
	}
	return a.Units, nil
}

func (l budgetLeaser) Unlease(r budget.Resource, n int64) {
	_ = l.c.send(&handoff.Message{Op: handoff.OpBudgetUnlease, Resource: r, Units: n}, nil)
}

// remoteModules is a session.ModuleStore kept by the manager, with the
// images this process has already seen at hand.
type remoteModules struct {
	c     *Control
	mu    sync.Mutex
	local map[[32]byte][]byte // this process's; mapped images stay mapped until it exits
}

func (r *remoteModules) Get(h [32]byte) ([]byte, bool) {
	r.mu.Lock()
	b, ok := r.local[h]
	r.mu.Unlock()
	if ok {
		return b, true
	}
	a, fds, err := r.c.call(&handoff.Message{Op: handoff.OpModuleGet, Hash: hex.EncodeToString(h[:])}, nil)
	if err != nil || len(fds) != 1 {
		handoff.CloseFDs(fds)
		return nil, false
	}
	defer unix.Close(fds[0])
	b, err = mapImage(fds[0], a.Bytes)
	if err != nil || sha256.Sum256(b) != h {
		if b != nil {
			_ = unix.Munmap(b)
		}
		return nil, false
	}
	r.mu.Lock()
	r.local[h] = b
	r.mu.Unlock()
	return b, true
}

// Put keeps img here and sends a sealed copy to the manager in the
// background: copying a large image (hundreds of MB for some libraries)
// into a memfd must not delay the guest's module load. img is never
// modified (the session and this store own it).
func (r *remoteModules) Put(h [32]byte, img []byte) {
	r.mu.Lock()
	r.local[h] = img
	r.mu.Unlock()
	r.c.bg.Add(1)
	go func() {
		defer r.c.bg.Done()
		fd, err := sealedImage(img)
		if err != nil {
			return
		}
		defer unix.Close(fd)
		_ = r.c.send(&handoff.Message{Op: handoff.OpModulePut, Hash: hex.EncodeToString(h[:]), Bytes: uint64(len(img))}, []int{fd})
	}()
}

// imageSeals are the seals a cached image's memfd carries: nobody can
// change it after it was checked.
const imageSeals = unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE

// sealedImage copies img into a sealed memfd.
func sealedImage(img []byte) (int, error) {
	fd, err := unix.MemfdCreate("vgpu-module", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, err
	}
	for off := 0; off < len(img); {
		n, err := unix.Pwrite(fd, img[off:], int64(off))
		if err != nil {
			unix.Close(fd)
			return -1, err
		}
		off += n
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, imageSeals); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// checkImageFD checks that fd is a sealed memfd of size bytes, at most
// session.MaxModuleBytes.
func checkImageFD(fd int, size uint64) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	switch {
	case err != nil:
		return fmt.Errorf("module image: not a memfd: %w", err)
	case seals&imageSeals != imageSeals:
		return errors.New("module image: memfd not sealed against writes and resizing")
	case size == 0 || size > session.MaxModuleBytes || uint64(st.Size) != size:
		return fmt.Errorf("module image: %d bytes in the file, %d announced (limit %d)", st.Size, size, session.MaxModuleBytes)
	}
	return nil
}

// mapImage maps a sealed image memfd read-only.
func mapImage(fd int, size uint64) ([]byte, error) {
	if err := checkImageFD(fd, size); err != nil {
		return nil, err
	}
	return unix.Mmap(fd, 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
}
