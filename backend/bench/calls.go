package bench

import (
	"time"
	"unsafe"
)

// nullKernelPTX is an empty kernel; the driver JIT-compiles it for the GPU.
const nullKernelPTX = `.version 7.0
.target sm_52
.address_size 64
.visible .entry vgpu_null_kernel()
{
	ret;
}
` + "\x00"

// CallResult is one latency or rate measurement.
type CallResult struct {
	Name      string
	Count     int
	PerCallUS float64 // microseconds per call as the program sees it
	BackendUS float64 // the backend's own time per call (vgpu only; 0 if unknown)
}

// Calls measures the async null-kernel launch rate, launch+synchronize
// latency and 4-byte D2H copy latency.
func (d *Driver) Calls(minTime time.Duration) ([]CallResult, error) {
	var mod, fn uintptr
	ptx := []byte(nullKernelPTX)
	if err := check("cuModuleLoadData", d.cuModuleLoadData(&mod, &ptx[0])); err != nil {
		return nil, err
	}
	name := []byte("vgpu_null_kernel\x00")
	if err := check("cuModuleGetFunction", d.cuModuleGetFunction(&fn, mod, &name[0])); err != nil {
		return nil, err
	}
	launch := func() error {
		return check("cuLaunchKernel", d.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, 0, nil, nil))
	}
	var dev uint64
	if err := check("cuMemAlloc", d.cuMemAlloc(&dev, 4)); err != nil {
		return nil, err
	}
	defer d.cuMemFree(dev)
	var word [4]byte

	tests := []struct {
		name  string
		batch int // calls per timed step
		step  func() error
	}{
		{"launch-async", 1000, func() error {
			for i := 0; i < 1000; i++ {
				if err := launch(); err != nil {
					return err
				}
			}
			return check("cuCtxSynchronize", d.cuCtxSynchronize())
		}},
		{"launch+sync", 1, func() error {
			if err := launch(); err != nil {
				return err
			}
			return check("cuCtxSynchronize", d.cuCtxSynchronize())
		}},
		{"d2h-4B", 1, func() error {
			return check("cuMemcpyDtoH", d.cuMemcpyDtoH(unsafe.Pointer(&word[0]), dev, 4))
		}},
	}
	var out []CallResult
	for _, t := range tests {
		if err := t.step(); err != nil { // warm-up
			return out, err
		}
		before, haveStats := d.Stats()
		start := time.Now()
		steps := 0
		for time.Since(start) < minTime || steps < 3 {
			if err := t.step(); err != nil {
				return out, err
			}
			steps++
		}
		el := time.Since(start)
		r := CallResult{Name: t.name, Count: steps * t.batch}
		r.PerCallUS = el.Seconds() * 1e6 / float64(r.Count)
		if after, ok := d.Stats(); ok && haveStats && after.Calls > before.Calls {
			r.BackendUS = float64(after.NanosInCall-before.NanosInCall) / 1e3 / float64(after.Calls-before.Calls)
		}
		out = append(out, r)
	}
	return out, nil
}
