package cuda

import (
	"runtime"
	"unsafe"

	"github.com/vgpu-project/vgpu/backend/device"
)

// launchAttr is CUlaunchAttribute (cuda.h): an id, padding to 8 bytes and
// a 64-byte value union.
type launchAttr struct {
	id  uint32
	_   uint32
	val [16]uint32
}

// launchConfig is CUlaunchConfig (cuda.h, 56 bytes on LP64).
type launchConfig struct {
	grid     [3]uint32
	block    [3]uint32
	smem     uint32
	_        uint32
	stream   uintptr
	attrs    *launchAttr
	numAttrs uint32
	_        uint32
}

// CUlaunchAttributeID values (cuda.h).
const (
	launchAttrClusterDimension = 4
	launchAttrClusterPolicy    = 5
)

// allocProp is CUmemAllocationProp (cuda.h, 32 bytes on LP64).
type allocProp struct {
	typ         uint32
	handleTypes uint32
	locType     uint32
	locID       int32
	win32Meta   uintptr
	compression uint8
	rdma        uint8
	usage       uint16
	_           [4]uint8
}

// memLocationDevice is CU_MEM_LOCATION_TYPE_DEVICE.
const memLocationDevice = 1

// Compile-time checks of the C layouts.
var (
	_ [56 - unsafe.Sizeof(launchConfig{})]byte
	_ [unsafe.Sizeof(launchConfig{}) - 56]byte
	_ [72 - unsafe.Sizeof(launchAttr{})]byte
	_ [unsafe.Sizeof(launchAttr{}) - 72]byte
	_ [32 - unsafe.Sizeof(allocProp{})]byte
	_ [unsafe.Sizeof(allocProp{}) - 32]byte
)

// maxLaunchAttrs is the most attributes a launch passes: the cluster's
// two and those of launchAttrIDs.
const maxLaunchAttrs = 2 + len(launchAttrIDs)

// launchAttrIDs are the attributes of device.LaunchAttrs, in the order
// they are passed. The synchronization policy is not among them: the
// driver refuses it on a launch, and so does the session's validator.
var launchAttrIDs = [...]int{device.StreamAttrAccessPolicyWindow, device.LaunchAttrCooperative,
	device.LaunchAttrProgrammaticSerialization, device.StreamAttrPriority, device.StreamAttrMemSyncDomainMap,
	device.StreamAttrMemSyncDomain, device.LaunchAttrCarveout}

// clusterConfig fills lc (and attrs, which must stay pinned while the
// driver reads them) from cfg: the cluster shape when one is given, the
// scheduling policy when it is not the default, and cfg.Attrs's
// attributes.
func clusterConfig(cfg *device.LaunchConfig, lc *launchConfig, attrs *[maxLaunchAttrs]launchAttr) {
	*lc = launchConfig{grid: cfg.Grid, block: cfg.Block, smem: cfg.SharedMem, stream: uintptr(cfg.Stream)}
	n := 0
	if cfg.Cluster != [3]uint32{} {
		attrs[n] = launchAttr{id: launchAttrClusterDimension}
		copy(attrs[n].val[:3], cfg.Cluster[:])
		n++
	}
	if cfg.ClusterPolicy != 0 {
		attrs[n] = launchAttr{id: launchAttrClusterPolicy}
		attrs[n].val[0] = cfg.ClusterPolicy
		n++
	}
	a := &cfg.Attrs
	for _, id := range launchAttrIDs {
		if !a.Given(id) {
			continue
		}
		attrs[n] = launchAttr{id: uint32(id)}
		b := encodeStreamAttr(id, device.StreamAttr{Value: a.Value[id], Window: a.Window})
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&attrs[n].val[0])), len(b)), b[:])
		n++
	}
	if n > 0 {
		lc.attrs = &attrs[0]
		lc.numAttrs = uint32(n)
	}
}

func (c *Context) OccupancyMaxClusters(f device.Function, cfg device.LaunchConfig) (int32, error) {
	const op = "cuOccupancyMaxActiveClusters"
	if !c.l.has(op) {
		return 0, missing(op)
	}
	var (
		lc     launchConfig
		attrs  [maxLaunchAttrs]launchAttr
		n      int32
		pinner runtime.Pinner
	)
	cfg.Stream = 0 // occupancy does not depend on a stream
	clusterConfig(&cfg, &lc, &attrs)
	pinner.Pin(&attrs[0])
	defer pinner.Unpin()
	err := c.call(op, func() int32 { return c.l.cuOccupancyClusters(&n, uintptr(f), &lc) })
	return n, err
}

// launchEx launches f with cfg's cluster and other attributes
// (cuLaunchKernelEx);
// kp is the kernelParams array Launch built and pinned.
func (c *Context) launchEx(f device.Function, cfg *device.LaunchConfig, kp unsafe.Pointer) error {
	const op = "cuLaunchKernelEx"
	if !c.l.has(op) {
		return missing(op)
	}
	var (
		lc     launchConfig
		attrs  [maxLaunchAttrs]launchAttr
		pinner runtime.Pinner
	)
	clusterConfig(cfg, &lc, &attrs)
	pinner.Pin(&attrs[0])
	defer pinner.Unpin()
	return c.call(op, func() int32 { return c.l.cuLaunchKernelEx(&lc, uintptr(f), kp, nil) })
}

func (c *Context) MemGetGranularity(p device.AllocProp, option uint32) (uint64, error) {
	const op = "cuMemGetAllocationGranularity"
	if !c.l.has(op) {
		return 0, missing(op)
	}
	prop := allocProp{typ: p.Type, handleTypes: p.HandleTypes, locType: memLocationDevice, locID: c.dev,
		compression: p.Compression, rdma: p.RDMA, usage: p.Usage}
	var g uint64
	err := c.call(op, func() int32 { return c.l.cuMemGranularity(&g, &prop, option) })
	return g, err
}

// maxModuleFunctions bounds the kernels listed of one module (cuBLAS's
// largest modules have a few thousand).
const maxModuleFunctions = 1 << 16

// ModuleFunctionNames lists m's kernels with the driver's public calls
// (CUDA 12.4+): cuModuleGetFunctionCount, cuModuleEnumerateFunctions and
// cuFuncGetName.
func (c *Context) ModuleFunctionNames(m device.Module) ([]string, error) {
	for _, s := range []string{"cuModuleGetFunctionCount", "cuModuleEnumerateFunctions", "cuFuncGetName"} {
		if !c.l.has(s) {
			return nil, missing(s)
		}
	}
	var n uint32
	if err := c.call("cuModuleGetFunctionCount", func() int32 { return c.l.cuModuleFuncCount(&n, uintptr(m)) }); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	if n > maxModuleFunctions {
		return nil, device.Errorf("cuModuleGetFunctionCount", device.ErrNotSupported, "%d kernels in one module (vgpu lists at most %d)", n, maxModuleFunctions)
	}
	fns := make([]uintptr, n)
	if err := c.call("cuModuleEnumerateFunctions", func() int32 { return c.l.cuModuleEnumFuncs(&fns[0], n, uintptr(m)) }); err != nil {
		return nil, err
	}
	names := make([]string, 0, n)
	for _, f := range fns {
		var p *byte
		if err := c.call("cuFuncGetName", func() int32 { return c.l.cuFuncGetName(&p, f) }); err != nil {
			return nil, err
		}
		names = append(names, goString(p))
	}
	return names, nil
}
