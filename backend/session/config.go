package session

import (
	"crypto/sha256"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/engine"
	"github.com/vgpu-project/vgpu/protocol"
)

// Config is what a session needs; the server fills it per connection.
type Config struct {
	// Devices are the guest's devices: Devices[i] is guest ordinal i.
	Devices []device.Context
	// DeviceKind is "cuda" or "sim" (reported by HELLO).
	DeviceKind     string
	DriverVersion  int32
	BackendVersion string
	Limits         protocol.Limits // zero: protocol.DefaultLimits
	MaxBatch       uint32          // zero: protocol.DefaultMaxBatch
	// MaxCallSegments caps the segments of one call across continuation
	// frames (zero: 1<<20, 4 GiB of 4 KiB pages).
	MaxCallSegments int
	// AllowUnprivilegedSegments accepts segments from unprivileged source
	// ports. Tests only: any guest process can use such a port.
	AllowUnprivilegedSegments bool
	// ExclusiveContext says this session owns its contexts alone (a worker
	// process with one session): OpDeviceReset then resets the context.
	ExclusiveContext bool
	Quota            *Quota // per-VM device memory cap; nil: none
	// Processes lists the VM's processes using the vGPU (one per VM, like
	// Quota); nil: a table of this session alone.
	Processes *ProcessTable
	// DriverRelease is the host driver's version string (device.Driver's
	// Release), answered by OpDriverGetInfo.
	DriverRelease string
	Modules       *ModuleCache // per-process image cache; nil: a private one
	Engine        *engine.Engine
	Stats         *Stats // shared counters; nil: private
	Logger        hclog.Logger
	// ID names the session in logs and HELLO.
	ID uint64
	// OnStickyError is called (once per session) when a call fails with an
	// error that leaves the CUDA context unusable (device.Sticky). A worker
	// process uses it to stop taking new sessions.
	OnStickyError func(error)
}

// Quota caps the device memory of one VM (all its sessions, all devices).
type Quota struct {
	Limit uint64 // bytes; 0: no cap
	used  atomic.Uint64
}

// Reserve takes n bytes of the quota, or reports false.
func (q *Quota) Reserve(n uint64) bool {
	if q == nil {
		return true
	}
	for {
		u := q.used.Load()
		if q.Limit != 0 && (n > q.Limit || u > q.Limit-n) {
			return false
		}
		if q.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// Release returns n bytes.
func (q *Quota) Release(n uint64) {
	if q != nil {
		q.used.Add(^(n - 1))
	}
}

// Used returns the bytes in use.
func (q *Quota) Used() uint64 {
	if q == nil {
		return 0
	}
	return q.used.Load()
}

// ModuleCache keeps module images by SHA-256 so a guest can load an image
// it (or any guest of this process) loaded before by hash alone. It holds
// at most MaxBytes of images, dropping the oldest.
type ModuleCache struct {
	MaxBytes uint64
	mu       sync.Mutex
	images   map[[32]byte][]byte
	order    [][32]byte
	bytes    uint64
}

// NewModuleCache returns a cache holding up to maxBytes (0: 1 GiB).
func NewModuleCache(maxBytes uint64) *ModuleCache {
	if maxBytes == 0 {
		maxBytes = 1 << 30
	}
	return &ModuleCache{MaxBytes: maxBytes, images: map[[32]byte][]byte{}}
}

// Get returns the image with hash h.
func (m *ModuleCache) Get(h [32]byte) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.images[h]
	return b, ok
}

// Put stores img (which the cache now owns) and returns its hash.
func (m *ModuleCache) Put(img []byte) [32]byte {
	h := sha256.Sum256(img)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.images[h]; ok || uint64(len(img)) > m.MaxBytes {
		return h
	}
	for m.bytes+uint64(len(img)) > m.MaxBytes && len(m.order) > 0 {
		old := m.order[0]
		m.order = m.order[1:]
		m.bytes -= uint64(len(m.images[old]))
		delete(m.images, old)
	}
	m.images[h] = img
	m.order = append(m.order, h)
	m.bytes += uint64(len(img))
	return h
}
