// Package sim is a GPU that exists only in host memory, for machines without
// one (CI, laptops, the guest-library engineer's tests). Its name says what
// it is: "vgpu-sim ... (kernels not executed)".
//
// What is real: device memory (host memory behind realistic fake addresses,
// 0x7f0000000000 upwards, one terabyte window per device, with real
// allocation tracking and capacity), every copy and memset (bytes really
// move), streams (one goroutine each, work runs in stream order), events
// (timestamps taken when the stream reaches them; elapsed times are real),
// host functions (run in stream order), module loading (PTX, cubin and
// fatbin images are parsed for kernels, parameter layouts and globals).
//
// What is not: kernels. A launch is validated (the function exists, the
// geometry is legal, the parameter block has the layout's size) and counted,
// but never executed; its log line and Stats say so. Three test kernels are
// the exception (testkernels.go): by their reserved names they fault
// (700, or a device assert: 710, sticky for the whole process as on a real
// driver) or print like device printf, so that isolation and device output
// can be tested without a GPU.
//
// Trust: like every device.Context, sim trusts its caller (the session) to
// have validated handles; it still checks every pointer range against its
// own allocations, so a bad range is an error, never an out-of-bounds access.
package sim

import (
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/device"
)

// Config says how many devices to simulate and how big they are.
type Config struct {
	Devices  int    // number of devices (default 1)
	MemBytes uint64 // device memory per device (default 80 GiB, at most 512 GiB)
	Logger   hclog.Logger
	// Stdout and Stderr receive what the test kernels print (default: the
	// process's fd 1 and 2, where a real driver writes device printf and
	// assert messages).
	Stdout, Stderr io.Writer
}

// Version is the CUDA version the sim driver reports (13.0).
const Version = 13000

const (
	baseAddr     = 0x7f0000000000
	window       = 1 << 40 // address window per device
	hostWindow   = 1 << 39 // upper half of a window: registered host memory
	allocAlign   = 512
	defaultMem   = 80 << 30
	maxSimMemory = 512 << 30
)

// Driver is the simulated driver.
type Driver struct {
	cfg   Config
	log   hclog.Logger
	ctxs  []*Context
	fault fault
}

// New returns a driver with cfg.Devices simulated H100s.
func New(cfg Config) (*Driver, error) {
	if cfg.Devices == 0 {
		cfg.Devices = 1
	}
	if cfg.Devices < 0 || cfg.Devices > 64 {
		return nil, fmt.Errorf("sim: %d devices: want 1..64", cfg.Devices)
	}
	if cfg.MemBytes == 0 {
		cfg.MemBytes = defaultMem
	}
	if cfg.MemBytes > maxSimMemory {
		return nil, fmt.Errorf("sim: %d bytes of device memory: at most %d", cfg.MemBytes, uint64(maxSimMemory))
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	d := &Driver{cfg: cfg, log: cfg.Logger.Named("sim")}
	for i := 0; i < cfg.Devices; i++ {
		c := newContext(i, cfg.MemBytes, d.log)
		c.fault, c.stdout, c.stderr = &d.fault, cfg.Stdout, cfg.Stderr
		d.ctxs = append(d.ctxs, c)
	}
	d.log.Warn("simulated GPU: device memory and copies are real, kernels are NOT executed", "devices", cfg.Devices, "mem_bytes", cfg.MemBytes)
	return d, nil
}

func (d *Driver) Kind() string   { return "sim" }
func (d *Driver) Version() int32 { return Version }

// Release is what the sim reports as its driver version: there is no
// NVIDIA driver behind it.
func (d *Driver) Release() string { return "vgpu-sim" }
func (d *Driver) Count() int      { return len(d.ctxs) }

func (d *Driver) Context(ordinal int) (device.Context, error) {
	if ordinal < 0 || ordinal >= len(d.ctxs) {
		return nil, device.Errorf("sim.Context", device.ErrInvalidDevice, "device %d of %d", ordinal, len(d.ctxs))
	}
	return d.ctxs[ordinal], nil
}

func (d *Driver) Close() error {
	for _, c := range d.ctxs {
		c.closeStreams()
	}
	return nil
}

// alloc is one range of the device's address space.
type alloc struct {
	base   device.Ptr
	mem    []byte   // device memory, or the registered host memory itself
	host   bool     // registered host memory
	mapped bool     // mem is an anonymous mapping (large allocations), not Go heap
	phys   *physMem // a mapping of physical memory (vmm.go): mem is part of it
	pool   *memPool // the pool it came from (mempool.go), nil for cuMemAlloc's
}

func (a *alloc) end() uint64 { return uint64(a.base) + uint64(len(a.mem)) }

// Context is one simulated device.
type Context struct {
	ord   int
	props device.Properties
	log   hclog.Logger
	fault *fault // the driver's: shared by its contexts
	// stdout and stderr are where the test kernels print.
	stdout, stderr io.Writer

	mu       sync.Mutex
	allocs   []*alloc // sorted by base, non-overlapping
	used     uint64
	total    uint64
	handles  uintptr
	streams  map[device.Stream]*stream
	events   map[device.Event]*event
	modules  map[device.Module]*module
	funcs    map[device.Function]*function
	phys     map[device.MemHandle]*physMem
	arrays   map[device.Array]*array
	objects  map[uint64]*texObject // texture and surface objects
	pools    map[device.MemPool]*memPool
	defPool  *memPool
	reserved []reservation
	vmmNext  uint64
	graphs   map[device.Graph]*graph
	nodes    map[device.GraphNode]*node
	execs    map[device.GraphExec]*graph
	limits   map[int]uint64
	nullStrm *stream

	launches atomic.Uint64
	skipped  atomic.Uint64
}

func newContext(ord int, mem uint64, log hclog.Logger) *Context {
	c := &Context{
		ord: ord, props: h100Properties(ord, mem), total: mem,
		log:     log.With("device", ord),
		streams: map[device.Stream]*stream{},
		events:  map[device.Event]*event{},
		modules: map[device.Module]*module{},
		funcs:   map[device.Function]*function{},
		graphs:  map[device.Graph]*graph{},
		nodes:   map[device.GraphNode]*node{},
		phys:    map[device.MemHandle]*physMem{},
		arrays:  map[device.Array]*array{},
		objects: map[uint64]*texObject{},
		pools:   map[device.MemPool]*memPool{},
		defPool: newMemPool(0),
		execs:   map[device.GraphExec]*graph{},
		limits:  defaultLimits(),
		handles: 0x1000,
		fault:   &fault{},
		stdout:  os.Stdout, stderr: os.Stderr,
	}
	c.nullStrm = newStream(c, 0)
	return c
}

// CUlimit values (cuda.h) and the H100's defaults.
func defaultLimits() map[int]uint64 {
	return map[int]uint64{
		0: 1024,    // CU_LIMIT_STACK_SIZE
		1: 1 << 20, // CU_LIMIT_PRINTF_FIFO_SIZE
		2: 8 << 20, // CU_LIMIT_MALLOC_HEAP_SIZE
		3: 2,       // CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH
		4: 2048,    // CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT
		5: 32,      // CU_LIMIT_MAX_L2_FETCH_GRANULARITY
		6: 0,       // CU_LIMIT_PERSISTING_L2_CACHE_SIZE
		7: 0,       // CU_LIMIT_SHMEM_SIZE (read-only)
		8: 0,       // CU_LIMIT_CIG_ENABLED
		9: 0,       // CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED
	}
}

func (c *Context) newHandle() uintptr {
	c.handles += 0x10
	return c.handles
}

// Ordinal returns the device ordinal.
func (c *Context) Ordinal() int { return c.ord }

// Properties returns the simulated H100's properties.
func (c *Context) Properties() (*device.Properties, error) {
	p := c.props
	return &p, nil
}

// ExecutesKernels reports false: sim never runs kernels.
func (c *Context) ExecutesKernels() bool { return false }

// Stats reports memory in use and launch counts.
func (c *Context) Stats() device.Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return device.Stats{Kind: "sim", Ordinal: c.ord, MemUsed: c.used, Allocations: len(c.allocs),
		Launches: c.launches.Load(), LaunchesSkipped: c.skipped.Load()}
}

// place finds the first gap of n bytes in [lo, hi) and inserts a.
func (c *Context) place(a *alloc, lo, hi uint64) error {
	n := (uint64(len(a.mem)) + allocAlign - 1) &^ (allocAlign - 1)
	if n == 0 {
		n = allocAlign
	}
	at := lo
	i := sort.Search(len(c.allocs), func(i int) bool { return uint64(c.allocs[i].base) >= lo })
	for ; i < len(c.allocs) && uint64(c.allocs[i].base) < hi; i++ {
		if uint64(c.allocs[i].base) >= at+n {
			break
		}
		end := (c.allocs[i].end() + allocAlign - 1) &^ (allocAlign - 1)
		if end > at {
			at = end
		}
	}
	if at+n > hi {
		return device.Errorf("sim.alloc", device.ErrOutOfMemory, "address window of device %d is full", c.ord)
	}
	a.base = device.Ptr(at)
	c.allocs = append(c.allocs, nil)
	copy(c.allocs[i+1:], c.allocs[i:])
	c.allocs[i] = a
	return nil
}

func (c *Context) findLocked(p device.Ptr) (int, *alloc) {
	i := sort.Search(len(c.allocs), func(i int) bool { return c.allocs[i].end() > uint64(p) })
	if i < len(c.allocs) && c.allocs[i].base <= p {
		return i, c.allocs[i]
	}
	return -1, nil
}

// span returns the bytes behind [p, p+n).
func (c *Context) span(op string, p device.Ptr, n uint64) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, a := c.findLocked(p)
	if a == nil {
		return nil, device.Errorf(op, device.ErrInvalidValue, "%#x is not device memory of device %d", uint64(p), c.ord)
	}
	off := uint64(p - a.base)
	if n > uint64(len(a.mem))-off {
		return nil, device.Errorf(op, device.ErrInvalidValue, "[%#x, +%d) runs past its allocation", uint64(p), n)
	}
	return a.mem[off : off+n : off+n], nil
}

// MemAlloc allocates n bytes of (host-backed) device memory.
func (c *Context) MemAlloc(n uint64) (device.Ptr, error) {
	if err := c.broken("cuMemAlloc"); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, device.Errorf("cuMemAlloc", device.ErrInvalidValue, "size 0")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n > c.total-c.used {
		return 0, device.Errorf("cuMemAlloc", device.ErrOutOfMemory, "%d bytes requested, %d of %d free", n, c.total-c.used, c.total)
	}
	mem, mapped, err := allocMem(n)
	if err != nil {
		return 0, device.Errorf("cuMemAlloc", device.ErrOutOfMemory, "%d bytes of host memory for the simulated device: %v", n, err)
	}
	a := &alloc{mem: mem, mapped: mapped}
	lo := uint64(baseAddr) + uint64(c.ord)*window
	if err := c.place(a, lo, lo+hostWindow); err != nil {
		freeMem(mem, mapped)
		return 0, err
	}
	c.used += n
	return a.base, nil
}

// release returns an allocation's memory once every stream has passed the
// work queued so far (which may still touch it), without blocking.
func (c *Context) releaseLocked(a *alloc) {
	if !a.mapped {
		return // the garbage collector frees it when no queued work holds it
	}
	type point struct {
		s *stream
		n uint64
	}
	var waits []point
	for _, s := range append([]*stream{c.nullStrm}, mapValues(c.streams)...) {
		if !s.idle() {
			waits = append(waits, point{s, s.mark()})
		}
	}
	if len(waits) == 0 {
		freeMem(a.mem, true)
		return
	}
	go func() {
		for _, w := range waits {
			w.s.waitFor(w.n)
		}
		freeMem(a.mem, true)
	}()
}

func mapValues(m map[device.Stream]*stream) []*stream {
	out := make([]*stream, 0, len(m))
	for _, s := range m {
		out = append(out, s)
	}
	return out
}

// MemFree frees an allocation by its base address.
func (c *Context) MemFree(p device.Ptr) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	i, a := c.findLocked(p)
	if a == nil || a.base != p || a.host || a.phys != nil {
		return device.Errorf("cuMemFree", device.ErrInvalidValue, "%#x is not the start of an allocation", uint64(p))
	}
	c.allocs = append(c.allocs[:i], c.allocs[i+1:]...)
	c.used -= uint64(len(a.mem))
	if a.pool != nil {
		a.pool.used -= uint64(len(a.mem))
	}
	c.releaseLocked(a)
	return c.broken("cuMemFree") // freed all the same: the process's memory goes with it
}

// MemGetInfo reports free and total device memory.
func (c *Context) MemGetInfo() (uint64, uint64, error) {
	if err := c.broken("cuMemGetInfo"); err != nil {
		return 0, 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total - c.used, c.total, nil
}

// HostRegister gives host memory a device address in the device's host window.
func (c *Context) HostRegister(b []byte, readOnly bool) (device.Ptr, error) {
	if err := c.broken("cuMemHostRegister"); err != nil {
		return 0, err
	}
	if len(b) == 0 {
		return 0, device.Errorf("cuMemHostRegister", device.ErrInvalidValue, "empty range")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	start := addr(b)
	for _, a := range c.allocs {
		if a.host && addr(a.mem) == start {
			return 0, device.Errorf("cuMemHostRegister", device.ErrHostMemAlreadyReg, "host range at %#x", start)
		}
	}
	a := &alloc{mem: b, host: true}
	lo := uint64(baseAddr) + uint64(c.ord)*window + hostWindow
	if err := c.place(a, lo, lo+hostWindow); err != nil {
		return 0, err
	}
	return a.base, nil
}

// HostUnregister forgets registered host memory.
func (c *Context) HostUnregister(b []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	start := addr(b)
	for i, a := range c.allocs {
		if a.host && addr(a.mem) == start {
			c.allocs = append(c.allocs[:i], c.allocs[i+1:]...)
			return c.broken("cuMemHostUnregister")
		}
	}
	return device.Errorf("cuMemHostUnregister", device.ErrHostMemNotReg, "host range at %#x", start)
}

// MemcpyHtoD copies src to the device. An async copy from registered
// (pinned) host memory reads it when the stream gets there, as the DMA
// engine would; from other (pageable) memory it snapshots src first, as
// the driver's staging does (the caller may reuse it at once).
func (c *Context) MemcpyHtoD(dst device.Ptr, src []byte, s device.Stream, async bool) error {
	d, err := c.span("cuMemcpyHtoD", dst, uint64(len(src)))
	if err != nil {
		return err
	}
	pinned, err := c.hostRange("cuMemcpyHtoD", src)
	if err != nil {
		return err
	}
	if async && !pinned {
		src = append([]byte(nil), src...)
	}
	return c.run("cuMemcpyHtoD", s, async, func() { copy(d, src) })
}

// MemcpyDtoH copies device memory to dst.
func (c *Context) MemcpyDtoH(dst []byte, src device.Ptr, s device.Stream, async bool) error {
	d, err := c.span("cuMemcpyDtoH", src, uint64(len(dst)))
	if err != nil {
		return err
	}
	if _, err := c.hostRange("cuMemcpyDtoH", dst); err != nil {
		return err
	}
	return c.run("cuMemcpyDtoH", s, async, func() { copy(dst, d) })
}

// MemcpyDtoD copies between device ranges (overlap allowed, like memmove).
func (c *Context) MemcpyDtoD(dst, src device.Ptr, n uint64, s device.Stream, async bool) error {
	d, err := c.span("cuMemcpyDtoD", dst, n)
	if err != nil {
		return err
	}
	sp, err := c.span("cuMemcpyDtoD", src, n)
	if err != nil {
		return err
	}
	return c.run("cuMemcpyDtoD", s, async, func() { copy(d, sp) })
}

// Memset fills height rows of width elements.
func (c *Context) Memset(dst device.Ptr, value uint32, elemSize int, width, height, pitch uint64, s device.Stream, async bool) error {
	work, err := c.memsetWork(dst, value, elemSize, width, height, pitch)
	if err != nil || work == nil {
		return err
	}
	return c.run("cuMemset", s, async, work)
}

// memsetWork checks a memset and returns the work that does it (nil: no
// bytes to set).
func (c *Context) memsetWork(dst device.Ptr, value uint32, elemSize int, width, height, pitch uint64) (func(), error) {
	if elemSize != 1 && elemSize != 2 && elemSize != 4 {
		return nil, device.Errorf("cuMemset", device.ErrInvalidValue, "element size %d (want 1, 2 or 4)", elemSize)
	}
	if height == 0 {
		height = 1
	}
	rowBytes := width * uint64(elemSize)
	if width != 0 && rowBytes/width != uint64(elemSize) {
		return nil, device.Errorf("cuMemset", device.ErrInvalidValue, "row size overflows")
	}
	if height > 1 && pitch < rowBytes {
		return nil, device.Errorf("cuMemset2D", device.ErrInvalidValue, "pitch %d < row of %d bytes", pitch, rowBytes)
	}
	if rowBytes == 0 {
		return nil, nil
	}
	if height > 1 && pitch > (1<<48)/(height-1) {
		return nil, device.Errorf("cuMemset2D", device.ErrInvalidValue, "pitch %d × %d rows overflows", pitch, height)
	}
	if rowBytes > ^uint64(0)-(height-1)*pitch {
		return nil, device.Errorf("cuMemset2D", device.ErrInvalidValue, "%d rows of pitch %d and a row of %d bytes overflow", height, pitch, rowBytes)
	}
	span := (height-1)*pitch + rowBytes
	b, err := c.span("cuMemset", dst, span)
	if err != nil {
		return nil, err
	}
	return func() {
		for r := uint64(0); r < height; r++ {
			fill(b[r*pitch:r*pitch+rowBytes], value, elemSize)
		}
	}, nil
}

func fill(b []byte, v uint32, size int) {
	var pat [4]byte
	for i := 0; i < size; i++ {
		pat[i] = byte(v >> (8 * i))
	}
	if len(b) == 0 {
		return
	}
	n := copy(b, pat[:size])
	for n < len(b) { // doubling copy
		n += copy(b[n:], b[:n])
	}
}

// SetLimit sets a CUlimit.
func (c *Context) SetLimit(limit int, v uint64) error {
	if err := c.broken("cuCtxSetLimit"); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.limits[limit]; !ok || limit == 7 {
		return device.Errorf("cuCtxSetLimit", device.ErrNotSupported, "limit %d", limit)
	}
	c.limits[limit] = v
	return nil
}

// GetLimit returns a CUlimit.
func (c *Context) GetLimit(limit int) (uint64, error) {
	if err := c.broken("cuCtxGetLimit"); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.limits[limit]
	if !ok {
		return 0, device.Errorf("cuCtxGetLimit", device.ErrNotSupported, "limit %d", limit)
	}
	return v, nil
}

// Monitor reports what the sim knows for sure: its utilization is zero
// (kernels never run), and its maximum clocks are the model's (the clock
// attributes it reports). It has no temperature, power, fan or current
// clocks to read.
func (c *Context) Monitor() (device.Monitor, error) {
	m := device.Monitor{Has: device.HasUtilization}
	for t, attr := range map[int]int{device.ClockGraphics: attrClockRate, device.ClockSM: attrClockRate, device.ClockMemory: attrMemClockRate} {
		if khz := c.props.Attrs[attr]; khz > 0 {
			m.MaxClocks[t] = uint32(khz / 1000)
			m.Has |= device.HasMaxClock << t
		}
	}
	return m, nil
}

// Reset destroys everything the context holds.
func (c *Context) Reset() error {
	if err := c.Synchronize(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.allocs {
		if !a.host && a.phys == nil {
			c.releaseLocked(a)
		}
	}
	for _, pm := range c.phys {
		c.releaseLocked(&alloc{mem: pm.mem, mapped: pm.mapped})
	}
	clear(c.phys)
	clear(c.arrays)
	clear(c.objects)
	c.reserved = nil
	c.allocs = nil
	c.used = 0
	for h, s := range c.streams {
		s.close()
		delete(c.streams, h)
	}
	clear(c.events)
	clear(c.modules)
	clear(c.funcs)
	clear(c.graphs)
	clear(c.nodes)
	clear(c.execs)
	clear(c.pools)
	c.defPool = newMemPool(0)
	c.limits = defaultLimits()
	return nil
}

var (
	_ device.Driver        = (*Driver)(nil)
	_ device.Context       = (*Context)(nil)
	_ device.StatsReporter = (*Context)(nil)
)

// hostRange says whether host buffer b of a copy lies inside registered
// host memory, and refuses it as CUDA does when it is neither inside one
// registration nor outside all of them (the driver API's memcpy notes: a
// range spanning registered and unregistered memory is not supported and
// returns CUDA_ERROR_INVALID_VALUE; the sim treats a range over two
// registrations the same way, since CUDA finds one allocation per pointer).
func (c *Context) hostRange(op string, b []byte) (bool, error) {
	if len(b) == 0 {
		return false, nil
	}
	lo := addr(b)
	hi := lo + uintptr(len(b))
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.allocs {
		if !a.host {
			continue
		}
		s := addr(a.mem)
		e := s + uintptr(len(a.mem))
		if lo >= s && hi <= e {
			return true, nil
		}
		if lo < e && hi > s {
			return false, device.Errorf(op, device.ErrInvalidValue, "host range [%#x, +%d) spans registered host memory [%#x, +%d) and memory outside it", lo, len(b), s, len(a.mem))
		}
	}
	return false, nil
}
