package cuda

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/device"
)

// Driver is the NVIDIA driver, loaded and initialised.
type Driver struct {
	l     *lib
	log   hclog.Logger
	count int
	nvml  *hostNVML // nil: no host NVML (no monitor readings)
	mu    sync.Mutex
	ctxs  map[int]*Context
}

// Open loads libcuda.so.1 and runs cuInit. Without a usable GPU it returns
// an error wrapping device.ErrNoGPU that says why.
func Open(log hclog.Logger) (*Driver, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	l, err := load()
	if err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if r := l.cuInit(0); r != 0 {
		return nil, fmt.Errorf("%w: cuInit failed: %v %s (libcuda %d is installed; is an NVIDIA GPU present and its kernel driver loaded?)", device.ErrNoGPU, device.Result(r), l.errDetail(r), l.version)
	}
	var n int32
	if r := l.cuDeviceGetCount(&n); r != 0 || n == 0 {
		return nil, fmt.Errorf("%w: cuDeviceGetCount: %d devices (%v)", device.ErrNoGPU, n, device.Result(r))
	}
	d := &Driver{l: l, log: log.Named("cuda"), count: int(n), ctxs: map[int]*Context{}}
	d.log.Info("NVIDIA driver ready", "cuda_version", l.version, "devices", n, "param_info", l.has("cuFuncGetParamInfo"), "absent", len(l.absent))
	d.nvml = openNVML(d.log)
	return d, nil
}

func (d *Driver) Kind() string   { return "cuda" }
func (d *Driver) Version() int32 { return d.l.version }
func (d *Driver) Count() int     { return d.count }

// Release is the host driver's version from its NVML ("" without NVML).
func (d *Driver) Release() string {
	if d.nvml == nil {
		return ""
	}
	return d.nvml.release
}

// Context retains device ordinal's primary context.
func (d *Driver) Context(ordinal int) (device.Context, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.ctxs[ordinal]; ok {
		return c, nil
	}
	if ordinal < 0 || ordinal >= d.count {
		return nil, device.Errorf("cuDeviceGet", device.ErrInvalidDevice, "device %d of %d", ordinal, d.count)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var dev int32
	if r := d.l.cuDeviceGet(&dev, int32(ordinal)); r != 0 {
		return nil, d.l.err("cuDeviceGet", r)
	}
	var ctx uintptr
	if r := d.l.cuDevicePrimaryCtxRetain(&ctx, dev); r != 0 {
		return nil, d.l.err("cuDevicePrimaryCtxRetain", r)
	}
	c := newContext(d, ordinal, dev, ctx)
	d.ctxs[ordinal] = c
	return c, nil
}

// Close releases the primary contexts.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for o, c := range d.ctxs {
		d.l.cuDevicePrimaryCtxRelease(c.dev) // 801 from its stub if absent
		delete(d.ctxs, o)
	}
	d.nvml.close()
	return nil
}

// err turns a CUresult into a *device.Error (nil for success).
func (l *lib) err(op string, r int32) error {
	if r == 0 {
		return nil
	}
	return &device.Error{Op: op, Result: device.Result(r), Detail: l.errDetail(r)}
}

func missing(op string) error {
	return device.Errorf(op, device.ErrNotSupported, "this NVIDIA driver has no %s", op)
}

var _ device.Driver = (*Driver)(nil)
