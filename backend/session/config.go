package session

import (
	"crypto/sha256"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/budget"
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
	Quota            *Quota       // per-VM device memory cap; nil: none
	Modules          *ModuleCache // per-process image cache; nil: a private one
	Engine           *engine.Engine
	Stats            *Stats // shared counters; nil: private
	Logger           hclog.Logger
	// ID names the session in logs and HELLO.
	ID uint64
	// OnStickyError is called (once per session) when a call fails with an
	// error that leaves the CUDA context unusable (device.Sticky). A worker
	// process uses it to stop taking new sessions.
	OnStickyError func(error)
	// LimitTable arbitrates context limits among the sessions that share
	// contexts (one per process); nil: the session's own.
	LimitTable *LimitTable
	// Budget is this client's pool (a budget.Pool.Client below its VM's
	// and the process's): queued request and reply bytes, objects,
	// host-function waits, shared fds and mappings. nil: PrivateBudget.
	Budget *budget.Pool
	// FrameTimeout bounds how long a frame may take to arrive once its
	// first byte has (a half-sent frame is not held for ever), and how
	// long a session that has ended waits for its client to read what is
	// left. 0: DefaultFrameTimeout.
	FrameTimeout time.Duration
	// HostFuncTimeout bounds how long a stream waits for the guest to run
	// a host function once it has reached it; then the stream goes on and
	// the guest gets CUDA_ERROR_TIMEOUT (909) as a deferred error of the
	// HOST_FUNC_LAUNCH. 0: DefaultHostFuncTimeout.
	HostFuncTimeout time.Duration
}

// Defaults for Config.
const (
	DefaultFrameTimeout    = 30 * time.Second
	DefaultHostFuncTimeout = 60 * time.Second
)

// MaxFrameBytes is the largest frame (or reply) a session with limits lim
// reads or writes: header, payload and segments.
func MaxFrameBytes(lim protocol.Limits) int64 {
	if lim == (protocol.Limits{}) {
		lim = protocol.DefaultLimits
	}
	return protocol.HeaderSize + int64(lim.MaxPayload) + protocol.Align + int64(lim.MaxSegments)*protocol.SegmentSize
}

// PrivateBudget is a client pool under a VM and a process of its own, with
// the default bounds (a session outside a server: tests, tools).
func PrivateBudget(lim protocol.Limits) *budget.Pool {
	b := budget.DefaultBounds(budget.ReadFacts(MaxFrameBytes(lim)))
	return budget.NewRoot("process", b.Global).Child("vm", b.VM).Client("session", b.Client, b.Reserve)
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
