package session

import (
	"fmt"
	"sync"
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
	// Trace stamps every request at each layer boundary (read, queued,
	// validated, handler, reply): the sums go into OpGetStats' trace
	// fields and the last TraceKeep records are kept (TraceRecords).
	Trace bool
	// DtoHSmall is how a small device-to-host copy with an inline reply
	// reaches the reply (DtoHBounce, the default, or DtoHSync).
	DtoHSmall DtoHMode
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
	Modules       ModuleStore // the VM's image cache; nil: a private one
	Engine        *engine.Engine
	Stats         *Stats // shared counters; nil: private
	Logger        hclog.Logger
	// ID names the session in logs and HELLO.
	ID uint64
	// Output, if set, is the device output (printf, assert messages) of
	// this session's process: a worker that serves one guest process
	// captures its own fd 1 and 2. Sent to a library that asks for it
	// (FeatureDeviceOutput) before each reply, else logged.
	Output DeviceOutput
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
	// RingSpin is how long the backend's side of a guest's rings polls
	// before it sleeps on its doorbell (0: shmring.DefaultSpin(); negative:
	// never spins).
	RingSpin time.Duration
	// NoGuestRings: do not offer a guest request and completion rings in its RAM
	// (FeatureShmRing, OpRingSetupGuest); its calls stay on the stream.
	NoGuestRings bool
	// HostFuncTimeout bounds how long a stream waits for the guest to run
	// a host function once it has reached it; then the stream goes on and
	// the guest gets CUDA_ERROR_TIMEOUT (909) as a deferred error of the
	// HOST_FUNC_LAUNCH. 0: DefaultHostFuncTimeout.
	HostFuncTimeout time.Duration
	// CallTimeout bounds how long the executor may spend on one call
	// (module loads excepted): past it the call is answered with
	// CUDA_ERROR_LAUNCH_TIMEOUT, the connection closed and OnCallTimeout
	// called (stall.go). 0: no bound.
	CallTimeout time.Duration
	// OnCallTimeout, if set, is called once when CallTimeout ended the
	// session (a worker process exits, ending the context and its kernel).
	OnCallTimeout func(error)
}

// Defaults for Config.
const (
	DefaultFrameTimeout    = 30 * time.Second
	DefaultHostFuncTimeout = 60 * time.Second
	// DefaultCallTimeout is "vgpu serve --call-timeout"'s default: far
	// beyond any one synchronous call of the programs measured (the longest
	// waits are a stream's queued kernels, seconds) and beyond
	// HostFuncTimeout, which bounds waits on the guest itself; a program
	// that queues more than half an hour of GPU work before it waits for
	// it needs a longer one (or 0).
	DefaultCallTimeout = 30 * time.Minute
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

// DeviceOutput is what the device printed for the session's process.
type DeviceOutput interface {
	// Drain passes emit everything written up to this call, stream by
	// stream (protocol.OutputStdout, OutputStderr), in order; b is valid
	// during the call only. It reports whether it emitted anything.
	Drain(emit func(stream uint32, b []byte)) bool
}

// ModuleStore keeps one VM's module images by SHA-256, so a guest process
// can load an image that a process of the same VM loaded before by hash
// alone (OpModuleLoad with no image). It is per VM: no VM can learn whether
// another loaded an image, nor evict another's. Sessions put an image only
// after the device has loaded it and package image has parsed it. Get may be
// called concurrently; the bytes it returns are never modified.
type ModuleStore interface {
	Get(h [32]byte) ([]byte, bool)
	// Put stores img (which the store now owns) under its SHA-256 h.
	Put(h [32]byte, img []byte)
}

// ModuleCache is a ModuleStore in this process's memory. It holds at most
// MaxBytes of images, dropping the least recently used.
type ModuleCache struct {
	MaxBytes uint64
	mu       sync.Mutex
	images   map[[32]byte]*cachedImage
	clock    uint64
	bytes    uint64
}

type cachedImage struct {
	b    []byte
	used uint64 // clock at the last Get or Put
}

// DefaultModuleCacheBytes is a VM's module cache size unless configured.
const DefaultModuleCacheBytes = 1 << 30

// NewModuleCache returns a cache holding up to maxBytes (0:
// DefaultModuleCacheBytes).
func NewModuleCache(maxBytes uint64) *ModuleCache {
	if maxBytes == 0 {
		maxBytes = DefaultModuleCacheBytes
	}
	return &ModuleCache{MaxBytes: maxBytes, images: map[[32]byte]*cachedImage{}}
}

// Get returns the image with hash h.
func (m *ModuleCache) Get(h [32]byte) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.images[h]
	if !ok {
		return nil, false
	}
	m.clock++
	c.used = m.clock
	return c.b, true
}

// Put stores img under h (its SHA-256), evicting the least recently used
// images to make room. An image larger than MaxBytes is not kept.
func (m *ModuleCache) Put(h [32]byte, img []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.images[h]; ok || uint64(len(img)) > m.MaxBytes {
		return
	}
	for m.bytes+uint64(len(img)) > m.MaxBytes {
		var old [32]byte
		oldest := ^uint64(0)
		for k, c := range m.images {
			if c.used < oldest {
				old, oldest = k, c.used
			}
		}
		m.bytes -= uint64(len(m.images[old].b))
		delete(m.images, old)
	}
	m.clock++
	m.images[h] = &cachedImage{b: img, used: m.clock}
	m.bytes += uint64(len(img))
}

// Bytes returns the bytes held.
func (m *ModuleCache) Bytes() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bytes
}

// DtoHMode is how a small device-to-host copy with an inline reply (up to
// engine.BounceSize bytes) reaches the reply frame.
type DtoHMode uint8

const (
	// DtoHBounce: an asynchronous copy into the engine's pinned bounce
	// buffer on the copy's stream, a stream synchronize, a CPU copy
	// (engine.ReadBounce).
	DtoHBounce DtoHMode = iota
	// DtoHSync: a synchronize of the copy's stream (unless it is the
	// context's NULL stream), then a synchronous copy straight into the
	// reply (Go memory: the driver stages pageable memory itself).
	DtoHSync
)

func (m DtoHMode) String() string {
	if m == DtoHSync {
		return "sync"
	}
	return "bounce"
}

// ParseDtoHMode reads `vgpu serve --d2h-small`.
func ParseDtoHMode(s string) (DtoHMode, error) {
	switch s {
	case "", "bounce":
		return DtoHBounce, nil
	case "sync":
		return DtoHSync, nil
	}
	return 0, fmt.Errorf("unknown small device-to-host mode %q (want bounce or sync)", s)
}
