package cuda

import (
	"runtime"
	"unsafe"

	"github.com/vgpu-project/vgpu/backend/device"
)

// Graphs node by node: the driver's cuGraphCreate, cuGraphGetNodes and
// cuGraphAdd*Node, with the parameter structs of cuda.h laid out here.

// kernelNodeParams is CUDA_KERNEL_NODE_PARAMS_v2 (CUDA 12); its first 56
// bytes are the first version's, so it serves either ABI of
// cuGraphAddKernelNode (kern and ctx stay 0: func names the kernel).
type kernelNodeParams struct {
	fn                     uintptr
	gridX, gridY, gridZ    uint32
	blockX, blockY, blockZ uint32
	sharedMem              uint32
	_                      uint32
	kernelParams           unsafe.Pointer
	extra                  uintptr
	kern                   uintptr
	ctx                    uintptr
}

// memsetNodeParams is CUDA_MEMSET_NODE_PARAMS.
type memsetNodeParams struct {
	dst           uint64
	pitch         uint64
	value         uint32
	elementSize   uint32
	width, height uint64
}

// memTypeHost is CU_MEMORYTYPE_HOST (cuda.h; the others: array_unsafe.go).
const memTypeHost = 1

// depsArg returns the driver's (dependencies, count) for deps.
func depsArg(deps []device.GraphNode) (*uintptr, uintptr) {
	if len(deps) == 0 {
		return nil, 0
	}
	return (*uintptr)(unsafe.Pointer(unsafe.SliceData(deps))), uintptr(len(deps))
}

func (c *Context) GraphCreate() (device.Graph, error) {
	var g uintptr
	err := c.call("cuGraphCreate", func() int32 { return c.l.cuGraphCreate(&g, 0) })
	return device.Graph(g), err
}

func (c *Context) GraphNodes(g device.Graph, roots bool) ([]device.GraphNode, error) {
	op, fn := "cuGraphGetNodes", c.l.cuGraphGetNodes
	if roots {
		op, fn = "cuGraphGetRootNodes", c.l.cuGraphGetRootNodes
	}
	var n uintptr
	if err := c.call(op, func() int32 { return fn(uintptr(g), nil, &n) }); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	out := make([]device.GraphNode, n)
	err := c.call(op, func() int32 { return fn(uintptr(g), (*uintptr)(unsafe.Pointer(&out[0])), &n) })
	if err != nil {
		return nil, err
	}
	return out[:min(n, uintptr(len(out)))], nil
}

func (c *Context) GraphNodeType(n device.GraphNode) (int, error) {
	var t int32
	err := c.call("cuGraphNodeGetType", func() int32 { return c.l.cuGraphNodeGetType(uintptr(n), &t) })
	return int(t), err
}

func (c *Context) GraphAddKernelNode(g device.Graph, deps []device.GraphNode, f device.Function, cfg device.LaunchConfig, params []byte) (device.GraphNode, error) {
	const op = "cuGraphAddKernelNode"
	if cfg.HasCluster() || cfg.Attrs.Has != 0 {
		return 0, device.Errorf(op, device.ErrNotSupported, "kernel nodes with a cluster shape or launch attributes are not supported yet")
	}
	ps, err := c.FuncParams(f)
	if err != nil {
		return 0, err
	}
	if len(ps) > 0 && len(params) == 0 {
		return 0, device.Errorf(op, device.ErrInvalidValue, "the kernel takes %d parameters, the block is empty", len(ps))
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	ptrs := make([]unsafe.Pointer, len(ps))
	for i, p := range ps {
		if uint64(p.Offset)+uint64(p.Size) > uint64(len(params)) {
			return 0, device.Errorf(op, device.ErrInvalidValue, "parameter %d at [%d,+%d) outside a %d-byte block", i, p.Offset, p.Size, len(params))
		}
		ptrs[i] = unsafe.Pointer(&params[min(int(p.Offset), len(params)-1)])
	}
	kp := kernelNodeParams{fn: uintptr(f), gridX: cfg.Grid[0], gridY: cfg.Grid[1], gridZ: cfg.Grid[2],
		blockX: cfg.Block[0], blockY: cfg.Block[1], blockZ: cfg.Block[2], sharedMem: cfg.SharedMem}
	if len(ptrs) > 0 {
		pin.Pin(&params[0])
		pin.Pin(&ptrs[0])
		kp.kernelParams = unsafe.Pointer(&ptrs[0])
	}
	d, nd := depsArg(deps)
	var n uintptr
	// The driver copies the parameters into the node before it returns.
	err = c.call(op, func() int32 { return c.l.cuGraphAddKernelNode(&n, uintptr(g), d, nd, unsafe.Pointer(&kp)) })
	runtime.KeepAlive(deps)
	return device.GraphNode(n), err
}

func (c *Context) GraphAddMemcpyNode(g device.Graph, deps []device.GraphNode, cp device.GraphCopy) (device.GraphNode, error) {
	const op = "cuGraphAddMemcpyNode"
	if cp.N == 0 {
		return 0, device.Errorf(op, device.ErrInvalidValue, "a copy of 0 bytes")
	}
	// One row on each side, its pitch the row (what cuMemcpy3D accepts of
	// any 1D copy).
	p := memcpy3D{width: cp.N, height: 1, depth: 1, srcPitch: cp.N, dstPitch: cp.N, srcHeight: 1, dstHeight: 1}
	if cp.SrcHost != nil {
		if uint64(len(cp.SrcHost)) != cp.N {
			return 0, device.Errorf(op, device.ErrInvalidValue, "host buffer of %d bytes for a copy of %d", len(cp.SrcHost), cp.N)
		}
		p.srcType, p.srcHost = memTypeHost, uintptr(ptrOf(cp.SrcHost)) // mmapped memory, not Go's
	} else {
		p.srcType, p.srcDevice = memTypeDevice, uint64(cp.Src)
	}
	if cp.DstHost != nil {
		if uint64(len(cp.DstHost)) != cp.N {
			return 0, device.Errorf(op, device.ErrInvalidValue, "host buffer of %d bytes for a copy of %d", len(cp.DstHost), cp.N)
		}
		p.dstType, p.dstHost = memTypeHost, uintptr(ptrOf(cp.DstHost))
	} else {
		p.dstType, p.dstDevice = memTypeDevice, uint64(cp.Dst)
	}
	d, nd := depsArg(deps)
	var n uintptr
	err := c.call(op, func() int32 { return c.l.cuGraphAddMemcpyNode(&n, uintptr(g), d, nd, unsafe.Pointer(&p), c.ctx) })
	runtime.KeepAlive(deps)
	return device.GraphNode(n), err
}

func (c *Context) GraphAddMemsetNode(g device.Graph, deps []device.GraphNode, dst device.Ptr, value uint32, elemSize int, width, height, pitch uint64) (device.GraphNode, error) {
	if height <= 1 {
		height, pitch = 1, width*uint64(elemSize) // one row: a pitch the driver accepts
	}
	p := memsetNodeParams{dst: uint64(dst), pitch: pitch, value: value, elementSize: uint32(elemSize), width: width, height: height}
	d, nd := depsArg(deps)
	var n uintptr
	err := c.call("cuGraphAddMemsetNode", func() int32 {
		return c.l.cuGraphAddMemsetNode(&n, uintptr(g), d, nd, unsafe.Pointer(&p), c.ctx)
	})
	runtime.KeepAlive(deps)
	return device.GraphNode(n), err
}

func (c *Context) GraphAddEmptyNode(g device.Graph, deps []device.GraphNode) (device.GraphNode, error) {
	d, nd := depsArg(deps)
	var n uintptr
	err := c.call("cuGraphAddEmptyNode", func() int32 { return c.l.cuGraphAddEmptyNode(&n, uintptr(g), d, nd) })
	runtime.KeepAlive(deps)
	return device.GraphNode(n), err
}

func (c *Context) GraphClone(g device.Graph) (device.Graph, error) {
	var n uintptr
	err := c.call("cuGraphClone", func() int32 { return c.l.cuGraphClone(&n, uintptr(g)) })
	return device.Graph(n), err
}

func (c *Context) GraphDestroyNode(n device.GraphNode) error {
	return c.call("cuGraphDestroyNode", func() int32 { return c.l.cuGraphDestroyNode(uintptr(n)) })
}

func (c *Context) GraphUpload(e device.GraphExec, s device.Stream) error {
	return c.call("cuGraphUpload", func() int32 { return c.l.cuGraphUpload(uintptr(e), uintptr(s)) })
}

// execUpdateInfo is CUgraphExecUpdateResultInfo (CUDA 12).
type execUpdateInfo struct {
	result        int32
	_             int32
	errorNode     uintptr
	errorFromNode uintptr
}

func (c *Context) GraphExecUpdate(e device.GraphExec, g device.Graph) (int, device.GraphNode, error) {
	const op = "cuGraphExecUpdate"
	var result int32
	var node uintptr
	err := c.call(op, func() int32 {
		if c.l.version >= 12000 {
			var info execUpdateInfo
			r := c.l.cuGraphExecUpdate(uintptr(e), uintptr(g), unsafe.Pointer(&info), nil)
			result, node = info.result, info.errorNode
			return r
		}
		return c.l.cuGraphExecUpdate(uintptr(e), uintptr(g), unsafe.Pointer(&node), unsafe.Pointer(&result))
	})
	if device.ResultOf(err) == device.ErrGraphUpdateFailed && result != device.GraphUpdateSuccess {
		return int(result), device.GraphNode(node), nil // the answer, not a failure of the call
	}
	return int(result), device.GraphNode(node), err
}
