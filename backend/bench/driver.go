// Package bench measures what a CUDA program sees: memcpy bandwidth per path
// and per-call latency. It talks to whichever libcuda.so.1 the dynamic loader
// finds — NVIDIA's on the host (`vgpu bench --native`), vgpu's guest library
// inside a VM — through purego, so the same code measures both sides and the
// ratio is fair. It needs no cgo.
package bench

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/ebitengine/purego"
)

// cuResult is a CUresult.
type cuResult int32

// CUDAError is a failed driver call.
type CUDAError struct {
	Call string
	Code int32
}

func (e *CUDAError) Error() string { return fmt.Sprintf("%s failed: CUresult %d", e.Call, e.Code) }

func check(call string, r cuResult) error {
	if r != 0 {
		return &CUDAError{Call: call, Code: int32(r)}
	}
	return nil
}

// Driver is the subset of the CUDA driver API the benchmarks use.
type Driver struct {
	Library string
	handle  uintptr
	ctx     uintptr

	cuInit                   func(flags uint32) cuResult
	cuDeviceGet              func(dev *int32, ordinal int32) cuResult
	cuDeviceGetName          func(name *byte, n int32, dev int32) cuResult
	cuDevicePrimaryCtxRetain func(ctx *uintptr, dev int32) cuResult
	cuCtxSetCurrent          func(ctx uintptr) cuResult
	cuCtxSynchronize         func() cuResult
	cuMemAlloc               func(ptr *uint64, size uint64) cuResult
	cuMemFree                func(ptr uint64) cuResult
	cuMemAllocHost           func(p *unsafe.Pointer, size uint64) cuResult
	cuMemFreeHost            func(p unsafe.Pointer) cuResult
	cuMemcpyHtoD             func(dst uint64, src unsafe.Pointer, n uint64) cuResult
	cuMemcpyDtoH             func(dst unsafe.Pointer, src uint64, n uint64) cuResult
	cuModuleLoadData         func(mod *uintptr, image *byte) cuResult
	cuModuleGetFunction      func(fn *uintptr, mod uintptr, name *byte) cuResult
	cuLaunchKernel           func(fn uintptr, gx, gy, gz, bx, by, bz, smem uint32, stream uintptr, params unsafe.Pointer, extra unsafe.Pointer) cuResult

	// vgpu's own extensions, present only in vgpu's guest library.
	vgpuSetOption func(key uint32, value uint64) int32
	vgpuGetStats  func(stats unsafe.Pointer, size uint64) int32
	vgpuWaitStats func(stats unsafe.Pointer, size uint64) int32
}

// ErrNoDriver means no usable libcuda.so.1 was found.
var ErrNoDriver = errors.New("bench: no CUDA driver library")

// Open loads lib (default "libcuda.so.1"), initialises it and makes device 0's
// primary context current on the calling OS thread, which it locks: call
// every method from the same goroutine.
func Open(lib string) (*Driver, error) {
	d, err := load(lib)
	if err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	if err := check("cuInit", d.cuInit(0)); err != nil {
		return nil, err
	}
	if err := d.primaryContext(); err != nil {
		return nil, err
	}
	return d, nil
}

// load opens lib and binds the functions the benchmarks call.
func load(lib string) (*Driver, error) {
	if lib == "" {
		lib = "libcuda.so.1"
	}
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("%w: dlopen %s: %v", ErrNoDriver, lib, err)
	}
	d := &Driver{Library: lib, handle: h}
	syms := []struct {
		fptr any
		name string
	}{
		{&d.cuInit, "cuInit"},
		{&d.cuDeviceGet, "cuDeviceGet"},
		{&d.cuDeviceGetName, "cuDeviceGetName"},
		{&d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
		{&d.cuCtxSetCurrent, "cuCtxSetCurrent"},
		{&d.cuCtxSynchronize, "cuCtxSynchronize"},
		{&d.cuMemAlloc, "cuMemAlloc_v2"},
		{&d.cuMemFree, "cuMemFree_v2"},
		{&d.cuMemAllocHost, "cuMemAllocHost_v2"},
		{&d.cuMemFreeHost, "cuMemFreeHost"},
		{&d.cuMemcpyHtoD, "cuMemcpyHtoD_v2"},
		{&d.cuMemcpyDtoH, "cuMemcpyDtoH_v2"},
		{&d.cuModuleLoadData, "cuModuleLoadData"},
		{&d.cuModuleGetFunction, "cuModuleGetFunction"},
		{&d.cuLaunchKernel, "cuLaunchKernel"},
	}
	for _, s := range syms {
		p, err := purego.Dlsym(h, s.name)
		if err != nil {
			return nil, fmt.Errorf("%w: %s has no %s", ErrNoDriver, lib, s.name)
		}
		purego.RegisterFunc(s.fptr, p)
	}
	if p, err := purego.Dlsym(h, "vgpuSetOption"); err == nil {
		purego.RegisterFunc(&d.vgpuSetOption, p)
	}
	if p, err := purego.Dlsym(h, "vgpuGetStats"); err == nil {
		purego.RegisterFunc(&d.vgpuGetStats, p)
	}
	if p, err := purego.Dlsym(h, "vgpuWaitStats"); err == nil {
		purego.RegisterFunc(&d.vgpuWaitStats, p)
	}
	return d, nil
}

// primaryContext makes device 0's primary context current.
func (d *Driver) primaryContext() error {
	var dev int32
	if err := check("cuDeviceGet", d.cuDeviceGet(&dev, 0)); err != nil {
		return err
	}
	if err := check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&d.ctx, dev)); err != nil {
		return err
	}
	return check("cuCtxSetCurrent", d.cuCtxSetCurrent(d.ctx))
}

// IsVGPU reports whether the library is vgpu's (it has vgpu's extensions).
func (d *Driver) IsVGPU() bool { return d.vgpuGetStats != nil }

// DeviceName returns device 0's name.
func (d *Driver) DeviceName() string {
	var b [256]byte
	if d.cuDeviceGetName(&b[0], int32(len(b)), 0) != 0 {
		return "unknown"
	}
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b[:])
}

// SetCopyEngine asks vgpu's backend to use one memcpy engine for this
// process (protocol.Engine*); it fails on NVIDIA's library.
func (d *Driver) SetCopyEngine(engine uint64) error {
	if d.vgpuSetOption == nil {
		return errors.New("bench: copy engines can be chosen only through vgpu's library")
	}
	if r := d.vgpuSetOption(1, engine); r != 0 {
		return &CUDAError{Call: "vgpuSetOption", Code: r}
	}
	return nil
}

// BackendStats mirrors protocol.SessionStats (a library older than the
// trace fields leaves them zero).
type BackendStats struct {
	Calls, BytesHtoD, BytesDtoH, NanosHtoD, NanosDtoH, NanosInCall, Launches, Emulated uint64
	// The backend's per-layer trace (vgpu serve --trace).
	Traced, NanosRead, NanosQueued, NanosValidate, NanosHandler, NanosReply uint64
}

// WaitStats mirrors the library's ring-wait counters (vgpuWaitStats;
// counted with VGPU_STATS=1): replies waited for on the rings, how many of
// them asleep, the nanoseconds from request written to reply handed over
// by the library's reader thread and from hand-over to the caller running,
// the reader thread's sleeps, the doorbells the library rang, and the
// replies their caller read from the ring itself (no hand-over).
type WaitStats struct {
	Waits, Slept, NanosReply, NanosHandoff, ReaderSleeps, Bells, Own uint64
}

// Waits returns the library's ring-wait counters, or false where the
// library has none (NVIDIA's, an older vgpu).
func (d *Driver) Waits() (WaitStats, bool) {
	var w WaitStats
	if d.vgpuWaitStats == nil || d.vgpuWaitStats(unsafe.Pointer(&w), uint64(unsafe.Sizeof(w))) != 0 {
		return w, false
	}
	return w, true
}

// Stats returns the backend's counters for this process's session, or false
// on NVIDIA's library.
func (d *Driver) Stats() (BackendStats, bool) {
	var s BackendStats
	if d.vgpuGetStats == nil {
		return s, false
	}
	if d.vgpuGetStats(unsafe.Pointer(&s), uint64(unsafe.Sizeof(s))) != 0 {
		return s, false
	}
	return s, true
}
