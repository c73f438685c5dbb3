package engine

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/guestmem"
)

// ChunkSize is the unit in which guest RAM is registered with the device.
const ChunkSize = 1 << 30

// Registry registers guest RAM regions with device contexts lazily, in
// ChunkSize chunks, and remembers each chunk's device address. One Registry
// serves all sessions of a VM; Close unregisters everything.
type Registry struct {
	mu sync.Mutex // held by writers (across HostRegister and HostUnregister)
	// chunks is never changed, only replaced (under mu): lookups read it
	// without the lock, so the gather engine never waits on a goroutine
	// that holds mu across a driver call while one of its kernels waits on
	// the gather engine.
	chunks atomic.Pointer[map[chunkKey]chunk]
	failed map[chunkKey]error
}

type chunkKey struct {
	ctx   device.Context
	base  uintptr // address of the chunk's first byte in the backend
	bytes uint64
}

type chunk struct {
	dev  device.Ptr
	host []byte
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	g := &Registry{failed: map[chunkKey]error{}}
	g.chunks.Store(&map[chunkKey]chunk{})
	return g
}

// Ensure registers the chunks covering [off, off+n) of r with c and returns
// the device address of r.Host[off]. Chunks are registered separately: a
// device address is valid up to the end of its chunk.
func (g *Registry) Ensure(c device.Context, r *guestmem.Region, off, n uint64) (device.Ptr, error) {
	if n == 0 {
		return 0, nil
	}
	first := off / ChunkSize
	last := (off + n - 1) / ChunkSize
	var devFirst device.Ptr
	for ch := first; ch <= last; ch++ {
		lo := ch * ChunkSize
		k, b := keyOf(c, r, ch)
		g.mu.Lock()
		ck, ok := (*g.chunks.Load())[k]
		ferr := g.failed[k]
		if !ok && ferr == nil {
			p, err := c.HostRegister(b, false)
			if err != nil {
				g.failed[k] = err
				g.mu.Unlock()
				return 0, err
			}
			ck = chunk{dev: p, host: b}
			m := maps.Clone(*g.chunks.Load())
			m[k] = ck
			g.chunks.Store(&m)
		}
		g.mu.Unlock()
		if ferr != nil {
			return 0, ferr
		}
		if ch == first {
			devFirst = ck.dev + device.Ptr(off-lo)
		}
	}
	return devFirst, nil
}

// keyOf returns the key and the bytes of chunk idx of r.
func keyOf(c device.Context, r *guestmem.Region, idx uint64) (chunkKey, []byte) {
	lo := idx * ChunkSize
	hi := min(lo+ChunkSize, uint64(len(r.Host)))
	b := r.Host[lo:hi:hi]
	return chunkKey{ctx: c, base: addrOf(b), bytes: hi - lo}, b
}

// lookup returns the device address of chunk idx of r if it is registered
// with c. It takes no lock and calls no driver.
func (g *Registry) lookup(c device.Context, r *guestmem.Region, idx uint64) (device.Ptr, bool) {
	if idx*ChunkSize >= uint64(len(r.Host)) {
		return 0, false
	}
	k, _ := keyOf(c, r, idx)
	ck, ok := (*g.chunks.Load())[k]
	return ck.dev, ok
}

// Forget unregisters every chunk inside host, which its owner is about to
// unmap (host mode's shared memory ends with its connection or with
// HOST_UNSHARE, while the VM's other sessions keep the registry): a later
// mapping at the same address must not find the old registration.
func (g *Registry) Forget(host []byte) {
	if len(host) == 0 {
		return
	}
	lo := addrOf(host)
	hi := lo + uintptr(len(host))
	g.mu.Lock()
	defer g.mu.Unlock()
	old := *g.chunks.Load()
	m := maps.Clone(old)
	for k := range old {
		if k.base >= lo && k.base < hi {
			delete(m, k)
		}
	}
	g.chunks.Store(&m) // lookups stop finding them before they go
	for k, ck := range old {
		if _, kept := m[k]; !kept {
			_ = k.ctx.HostUnregister(ck.host)
		}
	}
	for k := range g.failed {
		if k.base >= lo && k.base < hi {
			delete(g.failed, k)
		}
	}
}

// Close unregisters every chunk. The regions must still be mapped.
func (g *Registry) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := *g.chunks.Swap(&map[chunkKey]chunk{})
	for k, ck := range old {
		_ = k.ctx.HostUnregister(ck.host)
	}
	clear(g.failed)
}
