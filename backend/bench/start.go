package bench

import (
	"runtime"
	"time"
	"unsafe"
)

// StartTimes is what the first CUDA calls of a new process cost: the
// process start of a guest program. With vgpu, Init includes connecting to
// the backend and its HELLO (a worker from the pool, or one started for
// the process), Context is local, FirstAlloc the first call that reaches
// the device.
type StartTimes struct {
	Load       time.Duration `json:"load"`        // dlopen of the library, binding its functions
	Init       time.Duration `json:"init"`        // cuInit
	Context    time.Duration `json:"context"`     // cuDeviceGet, cuDevicePrimaryCtxRetain, cuCtxSetCurrent
	FirstAlloc time.Duration `json:"first_alloc"` // cuMemAlloc of 1 MiB and its cuMemFree
	Total      time.Duration `json:"total"`       // load to first-alloc
	// FirstCopy is a 4 MiB copy from pageable memory to the device and
	// back, after Total: in a guest, a new worker registers the guest RAM
	// it copies from with the device here (1 GiB chunks).
	FirstCopy time.Duration `json:"first_copy"`
}

// FirstCall measures a process's first CUDA calls through lib (default:
// the dynamic loader's libcuda.so.1). Call it once per process, first.
func FirstCall(lib string) (StartTimes, error) {
	var st StartTimes
	runtime.LockOSThread()
	t0 := time.Now()
	d, err := load(lib)
	if err != nil {
		return st, err
	}
	t1 := time.Now()
	if err := check("cuInit", d.cuInit(0)); err != nil {
		return st, err
	}
	t2 := time.Now()
	if err := d.primaryContext(); err != nil {
		return st, err
	}
	t3 := time.Now()
	var p uint64
	if err := check("cuMemAlloc", d.cuMemAlloc(&p, 1<<20)); err != nil {
		return st, err
	}
	if err := check("cuMemFree", d.cuMemFree(p)); err != nil {
		return st, err
	}
	t4 := time.Now()
	st = StartTimes{Load: t1.Sub(t0), Init: t2.Sub(t1), Context: t3.Sub(t2), FirstAlloc: t4.Sub(t3), Total: t4.Sub(t0)}
	const n = 4 << 20
	buf := make([]byte, n)
	for i := range buf {
		buf[i] = byte(i)
	}
	if err := check("cuMemAlloc", d.cuMemAlloc(&p, n)); err != nil {
		return st, err
	}
	t5 := time.Now()
	if err := check("cuMemcpyHtoD", d.cuMemcpyHtoD(p, unsafe.Pointer(&buf[0]), n)); err != nil {
		return st, err
	}
	if err := check("cuMemcpyDtoH", d.cuMemcpyDtoH(unsafe.Pointer(&buf[0]), p, n)); err != nil {
		return st, err
	}
	st.FirstCopy = time.Since(t5)
	runtime.KeepAlive(buf)
	return st, check("cuMemFree", d.cuMemFree(p))
}
