package sim

import (
	"errors"
	"sort"
	"sync"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/device/image"
)

type module struct {
	img     *image.Module
	globals map[string]device.Ptr
	funcs   map[string]device.Function
}

type function struct {
	mod    device.Module
	kernel *image.Kernel
	params []device.Param
	mu     sync.Mutex
	attrs  map[int]int32
	logged bool
}

// CUfunction_attribute numbers (cuda.h).
const (
	funcMaxThreadsPerBlock  = 0
	funcNumRegs             = 4
	funcPTXVersion          = 5
	funcBinaryVersion       = 6
	funcMaxDynamicSharedMem = 8
	funcPreferredCarveout   = 9
	// 11..15: required cluster width, height, depth, non-portable cluster
	// size allowed, cluster scheduling policy (sm_90; cuBLAS sets 14).
	funcRequiredClusterWidth = 11
	funcClusterSchedPolicy   = 15
)

func defaultFuncAttrs() map[int]int32 {
	return map[int]int32{
		funcMaxThreadsPerBlock: 1024, 1: 0, 2: 0, 3: 0, funcNumRegs: 32,
		funcPTXVersion: 90, funcBinaryVersion: 90, 7: 0,
		funcMaxDynamicSharedMem: 48 << 10, funcPreferredCarveout: -1,
	}
}

// ModuleLoad parses a fatbin, cubin or PTX image; its globals get device
// memory (initialised from the image where it has the bytes).
func (c *Context) ModuleLoad(b []byte) (device.Module, error) {
	if err := c.broken("cuModuleLoadData"); err != nil {
		return 0, err
	}
	img, err := image.Parse(b, image.KindAuto)
	if err != nil {
		r := device.ErrInvalidImage
		if errors.Is(err, image.ErrInvalid) && image.Detect(b) == image.KindPTX {
			r = device.ErrInvalidPTX
		}
		return 0, &device.Error{Op: "cuModuleLoadData", Result: r, Detail: err.Error()}
	}
	// The driver refuses, at load, an image with no code this GPU can run
	// (a fatbin with SASS for another major architecture only, or PTX
	// newer than the GPU).
	if major, minor := c.props.Attrs[attrCCMajor], c.props.Attrs[attrCCMinor]; !img.RunsOn(int(major), int(minor)) {
		return 0, device.Errorf("cuModuleLoadData", device.ErrNoBinaryForGPU, "the image has code for %v only; this device is compute capability %d.%d", img.Code, major, minor)
	}
	m := &module{img: img, globals: map[string]device.Ptr{}, funcs: map[string]device.Function{}}
	for name, g := range img.Globals {
		p, err := c.MemAlloc(max(g.Size, 1))
		if err != nil {
			c.freeGlobals(m)
			return 0, err
		}
		m.globals[name] = p
		if g.Init != nil {
			if d, err := c.span("cuModuleLoadData", p, uint64(len(g.Init))); err == nil {
				copy(d, g.Init)
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h := device.Module(c.newHandle())
	c.modules[h] = m
	c.log.Debug("module loaded", "module", uintptr(h), "kernels", len(img.Kernels), "globals", len(img.Globals), "from", img.Sources)
	return h, nil
}

func (c *Context) freeGlobals(m *module) {
	for _, p := range m.globals {
		_ = c.MemFree(p)
	}
}

// ModuleUnload unloads a module, its functions and globals.
func (c *Context) ModuleUnload(h device.Module) error {
	c.mu.Lock()
	m, ok := c.modules[h]
	if !ok {
		c.mu.Unlock()
		return device.Errorf("cuModuleUnload", device.ErrInvalidHandle, "module %#x", uintptr(h))
	}
	delete(c.modules, h)
	for _, f := range m.funcs {
		delete(c.funcs, f)
	}
	c.mu.Unlock()
	c.freeGlobals(m)
	return c.broken("cuModuleUnload")
}

// ModuleGetFunction looks a kernel up by (mangled) name.
func (c *Context) ModuleGetFunction(h device.Module, name string) (device.Function, error) {
	if err := c.broken("cuModuleGetFunction"); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.modules[h]
	if !ok {
		return 0, device.Errorf("cuModuleGetFunction", device.ErrInvalidHandle, "module %#x", uintptr(h))
	}
	if f, ok := m.funcs[name]; ok {
		return f, nil
	}
	k, ok := m.img.Kernels[name]
	if !ok {
		return 0, device.Errorf("cuModuleGetFunction", device.ErrNotFound, "no kernel %q in the module", name)
	}
	fn := &function{mod: h, kernel: k, attrs: defaultFuncAttrs()}
	for _, p := range k.Params {
		fn.params = append(fn.params, device.Param{Offset: p.Offset, Size: p.Size})
	}
	f := device.Function(c.newHandle())
	c.funcs[f] = fn
	m.funcs[name] = f
	return f, nil
}

// ModuleGetGlobal returns a global variable's address and size.
func (c *Context) ModuleGetGlobal(h device.Module, name string) (device.Ptr, uint64, error) {
	if err := c.broken("cuModuleGetGlobal"); err != nil {
		return 0, 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.modules[h]
	if !ok {
		return 0, 0, device.Errorf("cuModuleGetGlobal", device.ErrInvalidHandle, "module %#x", uintptr(h))
	}
	p, ok := m.globals[name]
	if !ok {
		return 0, 0, device.Errorf("cuModuleGetGlobal", device.ErrNotFound, "no global %q in the module", name)
	}
	return p, m.img.Globals[name].Size, nil
}

func (c *Context) function(op string, f device.Function) (*function, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fn, ok := c.funcs[f]
	if !ok {
		return nil, device.Errorf(op, device.ErrInvalidHandle, "function %#x", uintptr(f))
	}
	return fn, nil
}

// FuncParams returns the layout found in the image.
func (c *Context) FuncParams(f device.Function) ([]device.Param, error) {
	fn, err := c.function("cuFuncGetParamInfo", f)
	if err != nil {
		return nil, err
	}
	return fn.params, nil
}

// FuncGetAttribute returns a CUfunction_attribute (H100-like values).
func (c *Context) FuncGetAttribute(f device.Function, attr int) (int32, error) {
	fn, err := c.function("cuFuncGetAttribute", f)
	if err != nil {
		return 0, err
	}
	fn.mu.Lock()
	defer fn.mu.Unlock()
	v, ok := fn.attrs[attr]
	if !ok {
		return 0, device.Errorf("cuFuncGetAttribute", device.ErrInvalidValue, "attribute %d", attr)
	}
	return v, nil
}

// FuncSetAttribute sets the settable attributes (dynamic shared memory, carveout).
func (c *Context) FuncSetAttribute(f device.Function, attr int, v int32) error {
	if err := c.broken("cuFuncSetAttribute"); err != nil {
		return err
	}
	fn, err := c.function("cuFuncSetAttribute", f)
	if err != nil {
		return err
	}
	switch attr {
	case funcMaxDynamicSharedMem:
		if v < 0 || v > c.props.Attrs[attrMaxSmemOptin] {
			return device.Errorf("cuFuncSetAttribute", device.ErrInvalidValue, "dynamic shared memory %d > %d", v, c.props.Attrs[attrMaxSmemOptin])
		}
	case funcPreferredCarveout:
		if v < -1 || v > 100 {
			return device.Errorf("cuFuncSetAttribute", device.ErrInvalidValue, "carveout %d", v)
		}
	case funcRequiredClusterWidth, funcRequiredClusterWidth + 1, funcRequiredClusterWidth + 2,
		funcRequiredClusterWidth + 3, funcClusterSchedPolicy:
		if v < 0 || v > 16 {
			return device.Errorf("cuFuncSetAttribute", device.ErrInvalidValue, "cluster attribute %d = %d", attr, v)
		}
	default:
		return device.Errorf("cuFuncSetAttribute", device.ErrInvalidValue, "attribute %d is not settable", attr)
	}
	fn.mu.Lock()
	fn.attrs[attr] = v
	fn.mu.Unlock()
	return nil
}

// OccupancyMaxBlocks computes blocks per SM from the H100's limits
// (threads, blocks and shared memory per SM; registers at 32 per thread).
func (c *Context) OccupancyMaxBlocks(f device.Function, blockSize int, dynSmem uint64, flags uint32) (int32, error) {
	if _, err := c.function("cuOccupancyMaxActiveBlocksPerMultiprocessor", f); err != nil {
		return 0, err
	}
	if blockSize <= 0 || blockSize > int(c.props.Attrs[attrMaxThreadsPerBlock]) {
		return 0, nil
	}
	a := &c.props.Attrs
	warps := (blockSize + 31) / 32
	n := int(a[attrMaxThreadsPerSM]) / (warps * 32)
	n = min(n, int(a[attrMaxBlocksPerSM]), 65536/(warps*32*32))
	if dynSmem > uint64(a[attrMaxSmemOptin]) {
		return 0, nil // more than a block may have: no block fits (as the driver answers)
	}
	if dynSmem > 0 {
		n = min(n, int(uint64(a[attrMaxSmemPerSM])/(dynSmem+1024)))
	}
	return int32(n), nil
}

// Launch validates a launch and records it. The kernel is NOT executed.
func (c *Context) Launch(f device.Function, cfg device.LaunchConfig, params []byte) error {
	if err := c.broken("cuLaunchKernel"); err != nil {
		return err
	}
	work, err := c.kernelWork(f, cfg, params)
	if err != nil {
		return err
	}
	// A capture's kernel node keeps its launch (its own copy of the block).
	kn := &device.KernelNode{Func: f, Config: cfg, Params: append([]byte(nil), params...)}
	kn.Config.Stream = 0
	_, _, err = c.submitNode("cuLaunchKernel", cfg.Stream, work, &node{kern: kn})
	return err
}

// kernelWork checks a launch of f and returns the work that runs it (a
// launch on a stream, or a kernel node of a graph).
func (c *Context) kernelWork(f device.Function, cfg device.LaunchConfig, params []byte) (func(), error) {
	fn, err := c.function("cuLaunchKernel", f)
	if err != nil {
		return nil, err
	}
	a := &c.props.Attrs
	threads := uint64(1)
	for i := 0; i < 3; i++ {
		if cfg.Grid[i] == 0 || cfg.Block[i] == 0 {
			return nil, device.Errorf("cuLaunchKernel", device.ErrInvalidValue, "zero grid or block dimension %v/%v", cfg.Grid, cfg.Block)
		}
		if cfg.Grid[i] > uint32(a[attrMaxGridDimX+i]) || cfg.Block[i] > uint32(a[attrMaxBlockDimX+i]) {
			return nil, device.Errorf("cuLaunchKernel", device.ErrInvalidValue, "grid %v or block %v exceeds the device's limits", cfg.Grid, cfg.Block)
		}
		threads *= uint64(cfg.Block[i])
	}
	if threads > uint64(a[attrMaxThreadsPerBlock]) {
		return nil, device.Errorf("cuLaunchKernel", device.ErrInvalidValue, "%d threads per block > %d", threads, a[attrMaxThreadsPerBlock])
	}
	fn.mu.Lock()
	maxDyn := fn.attrs[funcMaxDynamicSharedMem]
	first := !fn.logged
	fn.logged = true
	fn.mu.Unlock()
	if cfg.SharedMem > uint32(maxDyn) {
		return nil, device.Errorf("cuLaunchKernel", device.ErrInvalidValue, "%d bytes of dynamic shared memory > %d (raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)", cfg.SharedMem, maxDyn)
	}
	if cfg.HasCluster() {
		shape, _, err := clusterShape("cuLaunchKernelEx", fn, &cfg)
		if err != nil {
			return nil, err
		}
		for i := range shape {
			if cfg.Grid[i]%shape[i] != 0 {
				return nil, device.Errorf("cuLaunchKernelEx", device.ErrInvalidClusterSize, "grid %v is not a multiple of cluster %v", cfg.Grid, shape)
			}
		}
	}
	if cfg.Attrs.Cooperative() {
		if err := c.cooperativeFits(f, cfg, threads); err != nil {
			return nil, err
		}
	}
	if want := device.ParamBytes(fn.params); uint32(len(params)) != want {
		return nil, device.Errorf("cuLaunchKernel", device.ErrInvalidValue, "parameter block of %d bytes, kernel %s takes %d", len(params), fn.kernel.Name, want)
	}
	emulate := c.testKernel(fn.kernel.Name, cfg, params)
	if first && emulate == nil {
		c.log.Info("kernel launch validated and recorded, NOT executed (sim device)", "kernel", fn.kernel.Name, "grid", cfg.Grid, "block", cfg.Block)
	}
	c.launches.Add(1)
	return func() {
		switch {
		case !c.healthy():
		case emulate != nil:
			emulate()
		default:
			c.skipped.Add(1)
		}
	}, nil
}

// ModuleFunctionNames lists the kernels the image defines, by name.
func (c *Context) ModuleFunctionNames(m device.Module) ([]string, error) {
	c.mu.Lock()
	mod, ok := c.modules[m]
	c.mu.Unlock()
	if !ok {
		return nil, device.Errorf("cuModuleEnumerateFunctions", device.ErrInvalidHandle, "module %#x", uintptr(m))
	}
	names := make([]string, 0, len(mod.img.Kernels))
	for name := range mod.img.Kernels {
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

// cooperativeFits checks that every block of a cooperative launch can be
// resident at once, as the driver does: at most the occupancy calculator's
// blocks per SM times the SMs (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE).
func (c *Context) cooperativeFits(f device.Function, cfg device.LaunchConfig, threads uint64) error {
	if c.props.Attrs[attrCooperativeLaunch] == 0 {
		return device.Errorf("cuLaunchCooperativeKernel", device.ErrNotSupported, "the device does not support cooperative launches")
	}
	perSM, err := c.OccupancyMaxBlocks(f, int(threads), uint64(cfg.SharedMem), 0)
	if err != nil {
		return err
	}
	blocks := uint64(cfg.Grid[0]) * uint64(cfg.Grid[1]) * uint64(cfg.Grid[2])
	if most := uint64(perSM) * uint64(c.props.Attrs[attrSMCount]); blocks > most {
		return device.Errorf("cuLaunchCooperativeKernel", device.ErrCooperativeTooLarge, "%d blocks, at most %d can be resident at once (%d per SM)", blocks, most, perSM)
	}
	return nil
}
