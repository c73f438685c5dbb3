package engine

import (
	"sync"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/guestmem"
)

// ChunkSize is the unit in which guest RAM is registered with the device.
const ChunkSize = 1 << 30

// Registry registers guest RAM regions with device contexts lazily, in
// ChunkSize chunks, and remembers each chunk's device address. One Registry
// serves all sessions of a VM; Close unregisters everything.
type Registry struct {
	mu     sync.Mutex
	chunks map[chunkKey]chunk
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
	return &Registry{chunks: map[chunkKey]chunk{}, failed: map[chunkKey]error{}}
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
		hi := min(lo+ChunkSize, uint64(len(r.Host)))
		b := r.Host[lo:hi:hi]
		k := chunkKey{ctx: c, base: addrOf(b), bytes: hi - lo}
		g.mu.Lock()
		ck, ok := g.chunks[k]
		ferr := g.failed[k]
		if !ok && ferr == nil {
			p, err := c.HostRegister(b, false)
			if err != nil {
				g.failed[k] = err
				g.mu.Unlock()
				return 0, err
			}
			ck = chunk{dev: p, host: b}
			g.chunks[k] = ck
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

// Close unregisters every chunk. The regions must still be mapped.
func (g *Registry) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, ck := range g.chunks {
		_ = k.ctx.HostUnregister(ck.host)
		delete(g.chunks, k)
	}
	clear(g.failed)
}
