package cuda

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/device/image"
)

// Context is one device's primary context.
type Context struct {
	d   *Driver
	l   *lib
	ord int
	dev int32
	ctx uintptr

	propsOnce sync.Once
	props     device.Properties
	propsErr  error

	nvmlDev nvmlDevice // the host NVML's handle of this GPU (Monitor)

	mu      sync.Mutex
	images  map[device.Module][]byte // kept for parameter layouts when cuFuncGetParamInfo is missing
	parsed  map[device.Module]*image.Module
	fnName  map[device.Function]string
	fnMod   map[device.Function]device.Module
	params  map[device.Function][]device.Param
	used    atomic.Uint64
	allocs  map[device.Ptr]uint64
	phys    map[device.MemHandle]uint64 // MemCreate's, by size (vmm_unsafe.go)
	launchN atomic.Uint64
}

func newContext(d *Driver, ord int, dev int32, ctx uintptr) *Context {
	return &Context{d: d, l: d.l, ord: ord, dev: dev, ctx: ctx,
		images: map[device.Module][]byte{}, parsed: map[device.Module]*image.Module{},
		fnName: map[device.Function]string{}, fnMod: map[device.Function]device.Module{},
		params: map[device.Function][]device.Param{}, allocs: map[device.Ptr]uint64{},
		phys: map[device.MemHandle]uint64{}}
}

// enter locks the goroutine to its OS thread and makes the context current
// there; leave undoes the lock.
func (c *Context) enter(op string) error { return c.enterFast(op) }

func leave() { runtime.UnlockOSThread() }

// call runs one driver call with the context current.
func (c *Context) call(op string, fn func() int32) error {
	if err := c.enter(op); err != nil {
		return err
	}
	r := fn()
	leave()
	return c.l.err(op, r)
}

func (c *Context) Ordinal() int { return c.ord }

// ExecutesKernels: a real GPU runs them.
func (c *Context) ExecutesKernels() bool { return true }

// Stats reports the memory this backend allocated and launches.
func (c *Context) Stats() device.Stats {
	c.mu.Lock()
	n := len(c.allocs)
	c.mu.Unlock()
	return device.Stats{Kind: "cuda", Ordinal: c.ord, MemUsed: c.used.Load(), Allocations: n, Launches: c.launchN.Load()}
}

// Properties queries name, UUID, memory and every attribute once.
func (c *Context) Properties() (*device.Properties, error) {
	c.propsOnce.Do(func() {
		p := &c.props
		c.propsErr = c.call("cuDeviceGetName", func() int32 {
			var name [256]byte
			if r := c.l.cuDeviceGetName(&name[0], int32(len(name)), c.dev); r != 0 {
				return r
			}
			p.Name = goString(&name[0])
			if c.l.has("cuDeviceGetUuid") {
				c.l.cuDeviceGetUuid(&p.UUID, c.dev)
			}
			if c.l.has("cuDeviceTotalMem") {
				c.l.cuDeviceTotalMem(&p.TotalMem, c.dev)
			}
			for a := 1; a < device.MaxAttrs; a++ {
				var v int32
				if c.l.cuDeviceGetAttribute(&v, int32(a), c.dev) == 0 {
					p.Attrs[a] = v
				}
			}
			return 0
		})
	})
	if c.propsErr != nil {
		return nil, c.propsErr
	}
	p := c.props
	return &p, nil
}

// tracked counts n bytes the driver allocated at p against the context
// (cuMemAlloc and cuMemAllocAsync alike).
func (c *Context) tracked(p device.Ptr, n uint64) {
	c.mu.Lock()
	c.allocs[p] = n
	c.mu.Unlock()
	c.used.Add(n)
}

// untracked gives back what tracked counted for p, once the driver freed it.
func (c *Context) untracked(p device.Ptr) {
	c.mu.Lock()
	n := c.allocs[p]
	delete(c.allocs, p)
	c.mu.Unlock()
	if n > 0 {
		c.used.Add(^(n - 1))
	}
}

func (c *Context) MemAlloc(n uint64) (device.Ptr, error) {
	var p uint64
	if err := c.call("cuMemAlloc", func() int32 { return c.l.cuMemAlloc(&p, n) }); err != nil {
		return 0, err
	}
	c.tracked(device.Ptr(p), n)
	return device.Ptr(p), nil
}

func (c *Context) MemFree(p device.Ptr) error {
	if err := c.call("cuMemFree", func() int32 { return c.l.cuMemFree(uint64(p)) }); err != nil {
		return err
	}
	c.untracked(p)
	return nil
}

func (c *Context) MemAllocAsync(n uint64, s device.Stream) (device.Ptr, error) {
	var p uint64
	if err := c.call("cuMemAllocAsync", func() int32 { return c.l.cuMemAllocAsync(&p, n, uintptr(s)) }); err != nil {
		return 0, err
	}
	c.tracked(device.Ptr(p), n)
	return device.Ptr(p), nil
}

func (c *Context) MemFreeAsync(p device.Ptr, s device.Stream) error {
	if err := c.call("cuMemFreeAsync", func() int32 { return c.l.cuMemFreeAsync(uint64(p), uintptr(s)) }); err != nil {
		return err
	}
	c.untracked(p)
	return nil
}

func (c *Context) MemGetInfo() (uint64, uint64, error) {
	var free, total uint64
	err := c.call("cuMemGetInfo", func() int32 { return c.l.cuMemGetInfo(&free, &total) })
	return free, total, err
}

func ptrOf(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

func (c *Context) MemcpyHtoD(dst device.Ptr, src []byte, s device.Stream, async bool) error {
	if len(src) == 0 {
		return nil
	}
	if async {
		return c.callN("cuMemcpyHtoDAsync", c.l.hot.memcpyHtoDAsync, uintptr(dst), uintptr(ptrOf(src)), uintptr(len(src)), uintptr(s))
	}
	return c.callN("cuMemcpyHtoD", c.l.hot.memcpyHtoD, uintptr(dst), uintptr(ptrOf(src)), uintptr(len(src)))
}

func (c *Context) MemcpyDtoH(dst []byte, src device.Ptr, s device.Stream, async bool) error {
	if len(dst) == 0 {
		return nil
	}
	if async {
		return c.callN("cuMemcpyDtoHAsync", c.l.hot.memcpyDtoHAsync, uintptr(ptrOf(dst)), uintptr(src), uintptr(len(dst)), uintptr(s))
	}
	return c.callN("cuMemcpyDtoH", c.l.hot.memcpyDtoH, uintptr(ptrOf(dst)), uintptr(src), uintptr(len(dst)))
}

func (c *Context) MemcpyDtoD(dst, src device.Ptr, n uint64, s device.Stream, async bool) error {
	if async {
		return c.call("cuMemcpyDtoDAsync", func() int32 { return c.l.cuMemcpyDtoDAsync(uint64(dst), uint64(src), n, uintptr(s)) })
	}
	return c.call("cuMemcpyDtoD", func() int32 { return c.l.cuMemcpyDtoD(uint64(dst), uint64(src), n) })
}

func (c *Context) Memset(dst device.Ptr, v uint32, elemSize int, width, height, pitch uint64, s device.Stream, async bool) error {
	if elemSize != 1 && elemSize != 2 && elemSize != 4 {
		return device.Errorf("cuMemset", device.ErrInvalidValue, "element size %d", elemSize)
	}
	if err := c.enter("cuMemset"); err != nil {
		return err
	}
	defer leave()
	d, st, l := uint64(dst), uintptr(s), c.l
	var r int32
	switch {
	case height <= 1 && !async && elemSize == 1:
		r = l.cuMemsetD8(d, uint8(v), width)
	case height <= 1 && !async && elemSize == 2:
		r = l.cuMemsetD16(d, uint16(v), width)
	case height <= 1 && !async:
		r = l.cuMemsetD32(d, v, width)
	case height <= 1 && elemSize == 1:
		r = l.cuMemsetD8Async(d, uint8(v), width, st)
	case height <= 1 && elemSize == 2:
		r = l.cuMemsetD16Async(d, uint16(v), width, st)
	case height <= 1:
		r = l.cuMemsetD32Async(d, v, width, st)
	case !async && elemSize == 1:
		r = l.cuMemsetD2D8(d, pitch, uint8(v), width, height)
	case !async && elemSize == 2:
		r = l.cuMemsetD2D16(d, pitch, uint16(v), width, height)
	case !async:
		r = l.cuMemsetD2D32(d, pitch, v, width, height)
	case elemSize == 1:
		r = l.cuMemsetD2D8Async(d, pitch, uint8(v), width, height, st)
	case elemSize == 2:
		r = l.cuMemsetD2D16Async(d, pitch, uint16(v), width, height, st)
	default:
		r = l.cuMemsetD2D32Async(d, pitch, v, width, height, st)
	}
	return l.err("cuMemset", r)
}

// cuMemHostRegister flags (cuda.h).
const (
	hostRegisterPortable  = 0x01
	hostRegisterDevicemap = 0x02
	hostRegisterReadOnly  = 0x08
)

func (c *Context) HostRegister(b []byte, readOnly bool) (device.Ptr, error) {
	if !c.l.has("cuMemHostRegister") || !c.l.has("cuMemHostGetDevicePointer") {
		return 0, missing("cuMemHostRegister")
	}
	flags := uint32(hostRegisterPortable | hostRegisterDevicemap)
	if readOnly {
		flags |= hostRegisterReadOnly
	}
	var dp uint64
	err := c.call("cuMemHostRegister", func() int32 {
		if r := c.l.cuMemHostRegister(ptrOf(b), uint64(len(b)), flags); r != 0 {
			return r
		}
		if r := c.l.cuMemHostGetDevicePointer(&dp, ptrOf(b), 0); r != 0 {
			c.l.cuMemHostUnregister(ptrOf(b))
			return r
		}
		return 0
	})
	return device.Ptr(dp), err
}

func (c *Context) HostUnregister(b []byte) error {
	return c.call("cuMemHostUnregister", func() int32 { return c.l.cuMemHostUnregister(ptrOf(b)) })
}

func (c *Context) ModuleLoad(img []byte) (device.Module, error) {
	// cuModuleLoadData reads PTX as a NUL-terminated string.
	buf := img
	if image.Detect(img) == image.KindPTX && (len(img) == 0 || img[len(img)-1] != 0) {
		buf = append(append(make([]byte, 0, len(img)+1), img...), 0)
	}
	var m uintptr
	err := c.call("cuModuleLoadData", func() int32 { return c.l.cuModuleLoadData(&m, ptrOf(buf)) })
	runtime.KeepAlive(buf)
	if err != nil {
		return 0, err
	}
	if !c.l.has("cuFuncGetParamInfo") {
		c.mu.Lock()
		c.images[device.Module(m)] = img
		c.mu.Unlock()
	}
	return device.Module(m), nil
}

func (c *Context) ModuleUnload(m device.Module) error {
	c.mu.Lock()
	delete(c.images, m)
	delete(c.parsed, m)
	for f, fm := range c.fnMod {
		if fm == m {
			delete(c.fnMod, f)
			delete(c.fnName, f)
			delete(c.params, f)
		}
	}
	c.mu.Unlock()
	return c.call("cuModuleUnload", func() int32 { return c.l.cuModuleUnload(uintptr(m)) })
}

func (c *Context) ModuleGetFunction(m device.Module, name string) (device.Function, error) {
	var f uintptr
	cname := cstr(name)
	if err := c.call("cuModuleGetFunction", func() int32 { return c.l.cuModuleGetFunction(&f, uintptr(m), cname) }); err != nil {
		return 0, err
	}
	c.mu.Lock()
	c.fnName[device.Function(f)] = name
	c.fnMod[device.Function(f)] = m
	c.mu.Unlock()
	return device.Function(f), nil
}

func (c *Context) ModuleGetGlobal(m device.Module, name string) (device.Ptr, uint64, error) {
	var p, n uint64
	cname := cstr(name)
	err := c.call("cuModuleGetGlobal", func() int32 { return c.l.cuModuleGetGlobal(&p, &n, uintptr(m), cname) })
	return device.Ptr(p), n, err
}

// FuncParams asks cuFuncGetParamInfo (CUDA 12.4+), else reads the layout
// from the module image.
func (c *Context) FuncParams(f device.Function) ([]device.Param, error) {
	c.mu.Lock()
	if ps, ok := c.params[f]; ok {
		c.mu.Unlock()
		return ps, nil
	}
	c.mu.Unlock()
	var ps []device.Param
	if c.l.has("cuFuncGetParamInfo") {
		err := c.call("cuFuncGetParamInfo", func() int32 {
			for i := uint64(0); i < 4096; i++ {
				var off, size uint64
				r := c.l.cuFuncGetParamInfo(uintptr(f), i, &off, &size)
				if r == int32(device.ErrInvalidValue) {
					return 0 // past the last parameter
				}
				if r != 0 {
					return r
				}
				ps = append(ps, device.Param{Offset: uint32(off), Size: uint32(size)})
			}
			return 0
		})
		if err != nil {
			return nil, err
		}
	} else {
		var err error
		if ps, err = c.paramsFromImage(f); err != nil {
			return nil, err
		}
	}
	if ps == nil {
		ps = []device.Param{}
	}
	c.mu.Lock()
	c.params[f] = ps
	c.mu.Unlock()
	return ps, nil
}

func (c *Context) paramsFromImage(f device.Function) ([]device.Param, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, name := c.fnMod[f], c.fnName[f]
	pm, ok := c.parsed[m]
	if !ok {
		img, ok := c.images[m]
		if !ok {
			return nil, device.Errorf("cuFuncGetParamInfo", device.ErrNotSupported, "driver %d lacks cuFuncGetParamInfo and the module image is gone", c.l.version)
		}
		var err error
		if pm, err = image.Parse(img, image.KindAuto); err != nil {
			return nil, device.Errorf("cuFuncGetParamInfo", device.ErrNotSupported, "driver %d lacks cuFuncGetParamInfo and the image cannot be read: %v", c.l.version, err)
		}
		c.parsed[m] = pm
	}
	k, ok := pm.Kernels[name]
	if !ok {
		return nil, device.Errorf("cuFuncGetParamInfo", device.ErrNotSupported, "driver %d lacks cuFuncGetParamInfo and kernel %q is not in the image's PTX or cubin", c.l.version, name)
	}
	ps := make([]device.Param, 0, len(k.Params))
	for _, p := range k.Params {
		ps = append(ps, device.Param{Offset: p.Offset, Size: p.Size})
	}
	return ps, nil
}

func (c *Context) FuncGetAttribute(f device.Function, attr int) (int32, error) {
	var v int32
	err := c.call("cuFuncGetAttribute", func() int32 { return c.l.cuFuncGetAttribute(&v, int32(attr), uintptr(f)) })
	return v, err
}

func (c *Context) FuncSetAttribute(f device.Function, attr int, v int32) error {
	if !c.l.has("cuFuncSetAttribute") {
		return missing("cuFuncSetAttribute")
	}
	return c.call("cuFuncSetAttribute", func() int32 { return c.l.cuFuncSetAttribute(uintptr(f), int32(attr), v) })
}

func (c *Context) OccupancyMaxBlocks(f device.Function, blockSize int, dynSmem uint64, flags uint32) (int32, error) {
	if !c.l.has("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags") {
		return 0, missing("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags")
	}
	var n int32
	err := c.call("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", func() int32 {
		return c.l.cuOccupancy(&n, uintptr(f), int32(blockSize), dynSmem, flags)
	})
	return n, err
}

// launchScratch is the kernelParams array of one launch.
type launchScratch struct {
	ptrs   []unsafe.Pointer
	pinner runtime.Pinner
}

var scratchPool = sync.Pool{New: func() any { return &launchScratch{ptrs: make([]unsafe.Pointer, 0, 32)} }}

// Launch builds kernelParams (one pointer per parameter, into the packed
// block at the layout's offsets), pins the block and the array for the
// call, and launches. cuLaunchKernel copies the arguments before it returns.
func (c *Context) Launch(f device.Function, cfg device.LaunchConfig, params []byte) error {
	ps, err := c.FuncParams(f)
	if err != nil {
		return err
	}
	sc := scratchPool.Get().(*launchScratch)
	defer scratchPool.Put(sc)
	sc.ptrs = sc.ptrs[:0]
	if len(ps) > 0 && len(params) == 0 {
		return device.Errorf("cuLaunchKernel", device.ErrInvalidValue, "the kernel takes %d parameters, the block is empty", len(ps))
	}
	for i, p := range ps {
		if uint64(p.Offset)+uint64(p.Size) > uint64(len(params)) {
			return device.Errorf("cuLaunchKernel", device.ErrInvalidValue, "parameter %d at [%d,+%d) outside a %d-byte block", i, p.Offset, p.Size, len(params))
		}
		sc.ptrs = append(sc.ptrs, unsafe.Pointer(&params[min(int(p.Offset), len(params)-1)]))
	}
	var kp unsafe.Pointer
	if len(sc.ptrs) > 0 {
		sc.pinner.Pin(&params[0])
		sc.pinner.Pin(&sc.ptrs[0])
		kp = unsafe.Pointer(&sc.ptrs[0])
	}
	if cfg.HasCluster() || cfg.Attrs.Has != 0 {
		err = c.launchEx(f, &cfg, kp)
	} else {
		err = c.callN("cuLaunchKernel", c.l.hot.launchKernel, uintptr(f), uintptr(cfg.Grid[0]), uintptr(cfg.Grid[1]), uintptr(cfg.Grid[2]),
			uintptr(cfg.Block[0]), uintptr(cfg.Block[1]), uintptr(cfg.Block[2]), uintptr(cfg.SharedMem), uintptr(cfg.Stream), uintptr(kp), 0)
	}
	sc.pinner.Unpin()
	clear(sc.ptrs)
	if err == nil {
		c.launchN.Add(1)
	}
	return err
}

func (c *Context) StreamCreate(flags uint32, prio int32) (device.Stream, error) {
	var s uintptr
	err := c.call("cuStreamCreateWithPriority", func() int32 { return c.l.cuStreamCreateWithPriority(&s, flags, prio) })
	return device.Stream(s), err
}

func (c *Context) StreamDestroy(s device.Stream) error {
	return c.call("cuStreamDestroy", func() int32 { return c.l.cuStreamDestroy(uintptr(s)) })
}

func (c *Context) StreamSynchronize(s device.Stream) error {
	return c.callN("cuStreamSynchronize", c.l.hot.streamSynchronize, uintptr(s))
}

func (c *Context) StreamQuery(s device.Stream) error {
	return c.callN("cuStreamQuery", c.l.hot.streamQuery, uintptr(s))
}

func (c *Context) StreamWaitEvent(s device.Stream, e device.Event, flags uint32) error {
	return c.callN("cuStreamWaitEvent", c.l.hot.streamWaitEvent, uintptr(s), uintptr(e), uintptr(flags))
}

func (c *Context) StreamBeginCapture(s device.Stream, mode int) error {
	return c.call("cuStreamBeginCapture", func() int32 { return c.l.cuStreamBeginCapture(uintptr(s), int32(mode)) })
}

func (c *Context) StreamEndCapture(s device.Stream) (device.Graph, error) {
	var g uintptr
	err := c.call("cuStreamEndCapture", func() int32 { return c.l.cuStreamEndCapture(uintptr(s), &g) })
	return device.Graph(g), err
}

func (c *Context) StreamCaptureStatus(s device.Stream) (int, error) {
	var st int32
	err := c.call("cuStreamIsCapturing", func() int32 { return c.l.cuStreamIsCapturing(uintptr(s), &st) })
	return int(st), err
}

func (c *Context) GraphInstantiate(g device.Graph, flags uint64) (device.GraphExec, error) {
	var e uintptr
	err := c.call("cuGraphInstantiateWithFlags", func() int32 { return c.l.cuGraphInstantiate(&e, uintptr(g), flags) })
	return device.GraphExec(e), err
}

func (c *Context) GraphLaunch(e device.GraphExec, s device.Stream) error {
	return c.call("cuGraphLaunch", func() int32 { return c.l.cuGraphLaunch(uintptr(e), uintptr(s)) })
}

func (c *Context) GraphExecDestroy(e device.GraphExec) error {
	return c.call("cuGraphExecDestroy", func() int32 { return c.l.cuGraphExecDestroy(uintptr(e)) })
}

func (c *Context) GraphDestroy(g device.Graph) error {
	return c.call("cuGraphDestroy", func() int32 { return c.l.cuGraphDestroy(uintptr(g)) })
}

func (c *Context) EventCreate(flags uint32) (device.Event, error) {
	var e uintptr
	err := c.call("cuEventCreate", func() int32 { return c.l.cuEventCreate(&e, flags) })
	return device.Event(e), err
}

func (c *Context) EventDestroy(e device.Event) error {
	return c.call("cuEventDestroy", func() int32 { return c.l.cuEventDestroy(uintptr(e)) })
}

func (c *Context) EventRecord(e device.Event, s device.Stream) error {
	return c.callN("cuEventRecord", c.l.hot.eventRecord, uintptr(e), uintptr(s))
}

func (c *Context) EventSynchronize(e device.Event) error {
	return c.callN("cuEventSynchronize", c.l.hot.eventSynchronize, uintptr(e))
}

func (c *Context) EventQuery(e device.Event) error {
	return c.callN("cuEventQuery", c.l.hot.eventQuery, uintptr(e))
}

func (c *Context) EventElapsed(a, b device.Event) (float32, error) {
	var ms float32
	err := c.call("cuEventElapsedTime", func() int32 { return c.l.cuEventElapsedTime(&ms, uintptr(a), uintptr(b)) })
	return ms, err
}

// Host functions: one purego callback serves them all; userData is the id
// of the Go function to run.
var (
	hostFnOnce   sync.Once
	hostFnTramp  uintptr
	hostFns      sync.Map // uintptr -> func()
	hostFnNextID atomic.Uint64
)

func hostFnTrampoline() uintptr {
	hostFnOnce.Do(func() {
		hostFnTramp = purego.NewCallback(func(userData uintptr) {
			if fn, ok := hostFns.LoadAndDelete(userData); ok {
				fn.(func())()
			}
		})
	})
	return hostFnTramp
}

// LaunchHostFunc enqueues fn with cuLaunchHostFunc. fn runs on a driver
// thread and blocks the stream until it returns.
func (c *Context) LaunchHostFunc(s device.Stream, fn func()) error {
	if !c.l.has("cuLaunchHostFunc") {
		return missing("cuLaunchHostFunc")
	}
	tramp := hostFnTrampoline()
	id := uintptr(hostFnNextID.Add(1))
	hostFns.Store(id, fn)
	err := c.call("cuLaunchHostFunc", func() int32 { return c.l.cuLaunchHostFunc(uintptr(s), tramp, id) })
	if err != nil {
		hostFns.Delete(id)
	}
	return err
}

func (c *Context) SetLimit(limit int, v uint64) error {
	return c.call("cuCtxSetLimit", func() int32 { return c.l.cuCtxSetLimit(int32(limit), v) })
}

func (c *Context) GetLimit(limit int) (uint64, error) {
	var v uint64
	err := c.call("cuCtxGetLimit", func() int32 { return c.l.cuCtxGetLimit(&v, int32(limit)) })
	return v, err
}

func (c *Context) Synchronize() error {
	return c.callN("cuCtxSynchronize", c.l.hot.ctxSynchronize)
}

// Reset resets the primary context (every resource of every user of it).
func (c *Context) Reset() error {
	if !c.l.has("cuDevicePrimaryCtxReset") {
		return missing("cuDevicePrimaryCtxReset")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.l.err("cuDevicePrimaryCtxReset", c.l.cuDevicePrimaryCtxReset(c.dev)); err != nil {
		return err
	}
	// The primary context handle stays valid; it is re-initialised on use.
	c.mu.Lock()
	clear(c.images)
	clear(c.parsed)
	clear(c.fnName)
	clear(c.fnMod)
	clear(c.params)
	clear(c.allocs)
	c.mu.Unlock()
	c.used.Store(0)
	return nil
}

var (
	_ device.Context       = (*Context)(nil)
	_ device.StatsReporter = (*Context)(nil)
)
