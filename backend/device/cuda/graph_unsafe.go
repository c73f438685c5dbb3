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
	var pin runtime.Pinner
	defer pin.Unpin()
	kp, err := c.kernelNode(op, &pin, device.KernelNode{Func: f, Config: cfg, Params: params})
	if err != nil {
		return 0, err
	}
	d, nd := depsArg(deps)
	var n uintptr
	// The driver copies the parameters into the node before it returns.
	err = c.call(op, func() int32 { return c.l.cuGraphAddKernelNode(&n, uintptr(g), d, nd, unsafe.Pointer(kp)) })
	runtime.KeepAlive(deps)
	return device.GraphNode(n), err
}

// kernelNode lays p out as the driver's CUDA_KERNEL_NODE_PARAMS, its
// pointers pinned by pin (the caller unpins after the driver call).
func (c *Context) kernelNode(op string, pin *runtime.Pinner, p device.KernelNode) (*kernelNodeParams, error) {
	cfg, params := p.Config, p.Params
	if cfg.HasCluster() || cfg.Attrs.Has != 0 {
		return nil, device.Errorf(op, device.ErrNotSupported, "kernel nodes with a cluster shape or launch attributes are not supported yet")
	}
	ps, err := c.FuncParams(p.Func)
	if err != nil {
		return nil, err
	}
	if len(ps) > 0 && len(params) == 0 {
		return nil, device.Errorf(op, device.ErrInvalidValue, "the kernel takes %d parameters, the block is empty", len(ps))
	}
	ptrs := make([]unsafe.Pointer, len(ps))
	for i, p := range ps {
		if uint64(p.Offset)+uint64(p.Size) > uint64(len(params)) {
			return nil, device.Errorf(op, device.ErrInvalidValue, "parameter %d at [%d,+%d) outside a %d-byte block", i, p.Offset, p.Size, len(params))
		}
		ptrs[i] = unsafe.Pointer(&params[min(int(p.Offset), len(params)-1)])
	}
	kp := &kernelNodeParams{fn: uintptr(p.Func), gridX: cfg.Grid[0], gridY: cfg.Grid[1], gridZ: cfg.Grid[2],
		blockX: cfg.Block[0], blockY: cfg.Block[1], blockZ: cfg.Block[2], sharedMem: cfg.SharedMem}
	if len(ptrs) > 0 {
		pin.Pin(&params[0])
		pin.Pin(&ptrs[0])
		kp.kernelParams = unsafe.Pointer(&ptrs[0])
	}
	pin.Pin(kp)
	return kp, nil
}

// GraphKernelNodeParams reads the node's launch with the first ABI of
// cuGraphKernelNodeGetParams (the function, never a CUkernel) and copies
// its parameters into a block laid out by the function's parameters.
func (c *Context) GraphKernelNodeParams(n device.GraphNode) (device.KernelNode, error) {
	const op = "cuGraphKernelNodeGetParams"
	var kp kernelNodeParams
	if err := c.call(op, func() int32 { return c.l.cuGraphKernelNodeGetParams(uintptr(n), unsafe.Pointer(&kp)) }); err != nil {
		return device.KernelNode{}, err
	}
	if kp.fn == 0 {
		return device.KernelNode{}, device.Errorf(op, device.ErrNotSupported, "the node launches a CUkernel the driver does not name as a function")
	}
	ps, err := c.FuncParams(device.Function(kp.fn))
	if err != nil {
		return device.KernelNode{}, err
	}
	// The node's parameter memory is the driver's, valid until the node
	// changes (only this session's calls change it).
	block := make([]byte, device.ParamBytes(ps))
	if len(ps) > 0 && kp.kernelParams == nil {
		return device.KernelNode{}, device.Errorf(op, device.ErrNotSupported, "the node passes its parameters in an extra buffer, not one pointer per parameter")
	}
	for i, p := range ps {
		src := *(*unsafe.Pointer)(unsafe.Add(kp.kernelParams, uintptr(i)*unsafe.Sizeof(uintptr(0))))
		if src == nil || uint64(p.Offset)+uint64(p.Size) > uint64(len(block)) {
			return device.KernelNode{}, device.Errorf(op, device.ErrInvalidValue, "parameter %d of the node has no value", i)
		}
		copy(block[p.Offset:p.Offset+p.Size], unsafe.Slice((*byte)(src), p.Size))
	}
	return device.KernelNode{Func: device.Function(kp.fn), Params: block, Config: device.LaunchConfig{
		Grid: [3]uint32{kp.gridX, kp.gridY, kp.gridZ}, Block: [3]uint32{kp.blockX, kp.blockY, kp.blockZ}, SharedMem: kp.sharedMem}}, nil
}

func (c *Context) GraphKernelNodeSetParams(e device.GraphExec, n device.GraphNode, p device.KernelNode) error {
	op := "cuGraphKernelNodeSetParams"
	if e != 0 {
		op = "cuGraphExecKernelNodeSetParams"
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	kp, err := c.kernelNode(op, &pin, p)
	if err != nil {
		return err
	}
	return c.call(op, func() int32 {
		if e != 0 {
			return c.l.cuGraphExecKernelNodeSetParams(uintptr(e), uintptr(n), unsafe.Pointer(kp))
		}
		return c.l.cuGraphKernelNodeSetParams(uintptr(n), unsafe.Pointer(kp))
	})
}

func (c *Context) GraphAddMemcpyNode(g device.Graph, deps []device.GraphNode, cp device.GraphCopy) (device.GraphNode, error) {
	const op = "cuGraphAddMemcpyNode"
	p, err := copyNode(op, cp)
	if err != nil {
		return 0, err
	}
	d, nd := depsArg(deps)
	var n uintptr
	err = c.call(op, func() int32 { return c.l.cuGraphAddMemcpyNode(&n, uintptr(g), d, nd, unsafe.Pointer(p), c.ctx) })
	runtime.KeepAlive(deps)
	runtime.KeepAlive(p)
	return device.GraphNode(n), err
}

// copyNode lays cp out as the driver's CUDA_MEMCPY3D: one row on each
// side, its pitch the row (what cuMemcpy3D accepts of any 1D copy). Host
// memory is the backend's mmapped memory, not Go's.
func copyNode(op string, cp device.GraphCopy) (*memcpy3D, error) {
	if cp.N == 0 {
		return nil, device.Errorf(op, device.ErrInvalidValue, "a copy of 0 bytes")
	}
	p := &memcpy3D{width: cp.N, height: 1, depth: 1, srcPitch: cp.N, dstPitch: cp.N, srcHeight: 1, dstHeight: 1}
	if cp.SrcHost != nil {
		if uint64(len(cp.SrcHost)) != cp.N {
			return nil, device.Errorf(op, device.ErrInvalidValue, "host buffer of %d bytes for a copy of %d", len(cp.SrcHost), cp.N)
		}
		p.srcType, p.srcHost = memTypeHost, uintptr(ptrOf(cp.SrcHost))
	} else {
		p.srcType, p.srcDevice = memTypeDevice, uint64(cp.Src)
	}
	if cp.DstHost != nil {
		if uint64(len(cp.DstHost)) != cp.N {
			return nil, device.Errorf(op, device.ErrInvalidValue, "host buffer of %d bytes for a copy of %d", len(cp.DstHost), cp.N)
		}
		p.dstType, p.dstHost = memTypeHost, uintptr(ptrOf(cp.DstHost))
	} else {
		p.dstType, p.dstDevice = memTypeDevice, uint64(cp.Dst)
	}
	return p, nil
}

// GraphMemcpyNodeParams reads a memcpy node's copy: one contiguous range
// on each side, of device or host memory (host memory: a slice of it,
// which the caller maps back to what it gave).
func (c *Context) GraphMemcpyNodeParams(n device.GraphNode) (device.GraphCopy, error) {
	const op = "cuGraphMemcpyNodeGetParams"
	var p memcpy3D
	if err := c.call(op, func() int32 { return c.l.cuGraphMemcpyNodeGetParams(uintptr(n), unsafe.Pointer(&p)) }); err != nil {
		return device.GraphCopy{}, err
	}
	h, d := max(p.height, 1), max(p.depth, 1)
	flat := h*d == 1 || (p.srcPitch == p.width && p.dstPitch == p.width && (d == 1 || (p.srcHeight == h && p.dstHeight == h)))
	if !flat || p.width == 0 || p.srcType == memTypeArray || p.dstType == memTypeArray || p.width > (1<<48)/(h*d) {
		return device.GraphCopy{}, device.Errorf(op, device.ErrNotSupported, "the node's copy is not one contiguous range of linear memory (%d×%d×%d, pitches %d/%d)", p.width, h, d, p.srcPitch, p.dstPitch)
	}
	cp := device.GraphCopy{N: p.width * h * d}
	side := func(typ uint32, host *uintptr, dev, x, y, z, pitch, height uint64, hostOut *[]byte, devOut *device.Ptr) {
		off := x + (y+z*height)*pitch
		if typ == memTypeHost { // the driver's pointer, read as one
			*hostOut = unsafe.Slice((*byte)(unsafe.Add(*(*unsafe.Pointer)(unsafe.Pointer(host)), off)), cp.N)
		} else {
			*devOut = device.Ptr(dev + off)
		}
	}
	side(p.srcType, &p.srcHost, p.srcDevice, p.srcX, p.srcY, p.srcZ, p.srcPitch, p.srcHeight, &cp.SrcHost, &cp.Src)
	side(p.dstType, &p.dstHost, p.dstDevice, p.dstX, p.dstY, p.dstZ, p.dstPitch, p.dstHeight, &cp.DstHost, &cp.Dst)
	return cp, nil
}

func (c *Context) GraphMemcpyNodeSetParams(e device.GraphExec, n device.GraphNode, cp device.GraphCopy) error {
	op := "cuGraphMemcpyNodeSetParams"
	if e != 0 {
		op = "cuGraphExecMemcpyNodeSetParams"
	}
	p, err := copyNode(op, cp)
	if err != nil {
		return err
	}
	err = c.call(op, func() int32 {
		if e != 0 {
			return c.l.cuGraphExecMemcpyNodeSetParams(uintptr(e), uintptr(n), unsafe.Pointer(p), c.ctx)
		}
		return c.l.cuGraphMemcpyNodeSetParams(uintptr(n), unsafe.Pointer(p))
	})
	runtime.KeepAlive(p)
	return err
}

func (c *Context) GraphAddMemsetNode(g device.Graph, deps []device.GraphNode, dst device.Ptr, value uint32, elemSize int, width, height, pitch uint64) (device.GraphNode, error) {
	p := memsetNode(device.MemsetNode{Dst: dst, Value: value, ElemSize: elemSize, Width: width, Height: height, Pitch: pitch})
	d, nd := depsArg(deps)
	var n uintptr
	err := c.call("cuGraphAddMemsetNode", func() int32 {
		return c.l.cuGraphAddMemsetNode(&n, uintptr(g), d, nd, unsafe.Pointer(&p), c.ctx)
	})
	runtime.KeepAlive(deps)
	return device.GraphNode(n), err
}

// memsetNode lays m out as the driver's CUDA_MEMSET_NODE_PARAMS.
func memsetNode(m device.MemsetNode) memsetNodeParams {
	if m.Height <= 1 {
		m.Height, m.Pitch = 1, m.Width*uint64(m.ElemSize) // one row: a pitch the driver accepts
	}
	return memsetNodeParams{dst: uint64(m.Dst), pitch: m.Pitch, value: m.Value, elementSize: uint32(m.ElemSize), width: m.Width, height: m.Height}
}

func (c *Context) GraphMemsetNodeParams(n device.GraphNode) (device.MemsetNode, error) {
	var p memsetNodeParams
	err := c.call("cuGraphMemsetNodeGetParams", func() int32 { return c.l.cuGraphMemsetNodeGetParams(uintptr(n), unsafe.Pointer(&p)) })
	return device.MemsetNode{Dst: device.Ptr(p.dst), Value: p.value, ElemSize: int(p.elementSize), Width: p.width, Height: p.height, Pitch: p.pitch}, err
}

func (c *Context) GraphMemsetNodeSetParams(e device.GraphExec, n device.GraphNode, m device.MemsetNode) error {
	p := memsetNode(m)
	if e != 0 {
		return c.call("cuGraphExecMemsetNodeSetParams", func() int32 {
			return c.l.cuGraphExecMemsetNodeSetParams(uintptr(e), uintptr(n), unsafe.Pointer(&p), c.ctx)
		})
	}
	return c.call("cuGraphMemsetNodeSetParams", func() int32 { return c.l.cuGraphMemsetNodeSetParams(uintptr(n), unsafe.Pointer(&p)) })
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

// nodeList returns the driver's array of nodes (nil: none).
func nodeList(nodes []device.GraphNode) *uintptr {
	if len(nodes) == 0 {
		return nil
	}
	return (*uintptr)(unsafe.Pointer(unsafe.SliceData(nodes)))
}

// edgesV2 says whether the edge calls are bound to their _v2 ABI (CUDA
// 12.3+: CUgraphEdgeData* before the count; nil asks for default edges).
func (c *Context) edgesV2() bool { return c.l.version >= 12030 }

// countArgs places a count (or a pointer to it) after the edge data (nil)
// of the _v2 ABI, or first, as the first ABI takes it (the other argument
// is ignored).
func countArgs[T uintptr | unsafe.Pointer](v2 bool, n T) (a, b T) {
	var none T
	if v2 {
		return none, n
	}
	return n, none
}

func (c *Context) GraphAddDependencies(g device.Graph, from, to []device.GraphNode) error {
	if len(from) != len(to) {
		return device.Errorf("cuGraphAddDependencies", device.ErrInvalidValue, "%d from nodes for %d to nodes", len(from), len(to))
	}
	a, b := countArgs(c.edgesV2(), uintptr(len(from)))
	err := c.call("cuGraphAddDependencies", func() int32 {
		return c.l.cuGraphAddDependencies(uintptr(g), nodeList(from), nodeList(to), a, b)
	})
	runtime.KeepAlive(from)
	runtime.KeepAlive(to)
	return err
}

func (c *Context) GraphRemoveDependencies(g device.Graph, from, to []device.GraphNode) error {
	if len(from) != len(to) {
		return device.Errorf("cuGraphRemoveDependencies", device.ErrInvalidValue, "%d from nodes for %d to nodes", len(from), len(to))
	}
	a, b := countArgs(c.edgesV2(), uintptr(len(from)))
	err := c.call("cuGraphRemoveDependencies", func() int32 {
		return c.l.cuGraphRemoveDependencies(uintptr(g), nodeList(from), nodeList(to), a, b)
	})
	runtime.KeepAlive(from)
	runtime.KeepAlive(to)
	return err
}

// GraphEdges asks the count, then the edges (a graph changes only by this
// session's calls, which come one at a time).
func (c *Context) GraphEdges(g device.Graph) ([]device.GraphNode, []device.GraphNode, error) {
	const op = "cuGraphGetEdges"
	var n uintptr
	a, b := countArgs(c.edgesV2(), unsafe.Pointer(&n))
	if err := c.call(op, func() int32 { return c.l.cuGraphGetEdges(uintptr(g), nil, nil, a, b) }); err != nil || n == 0 {
		return nil, nil, err
	}
	from, to := make([]device.GraphNode, n), make([]device.GraphNode, n)
	err := c.call(op, func() int32 { return c.l.cuGraphGetEdges(uintptr(g), nodeList(from), nodeList(to), a, b) })
	if err != nil {
		return nil, nil, err
	}
	k := min(n, uintptr(len(from)))
	return from[:k], to[:k], nil
}

func (c *Context) GraphNodeDeps(h device.GraphNode, dependents bool) ([]device.GraphNode, error) {
	op, fn := "cuGraphNodeGetDependencies", c.l.cuGraphNodeGetDependencies
	if dependents {
		op, fn = "cuGraphNodeGetDependentNodes", c.l.cuGraphNodeGetDependentNodes
	}
	var n uintptr
	a, b := countArgs(c.edgesV2(), unsafe.Pointer(&n))
	if err := c.call(op, func() int32 { return fn(uintptr(h), nil, a, b) }); err != nil || n == 0 {
		return nil, err
	}
	out := make([]device.GraphNode, n)
	if err := c.call(op, func() int32 { return fn(uintptr(h), nodeList(out), a, b) }); err != nil {
		return nil, err
	}
	return out[:min(n, uintptr(len(out)))], nil
}

func (c *Context) GraphAddEventNode(g device.Graph, deps []device.GraphNode, ev device.Event, wait bool) (device.GraphNode, error) {
	op, fn := "cuGraphAddEventRecordNode", c.l.cuGraphAddEventRecordNode
	if wait {
		op, fn = "cuGraphAddEventWaitNode", c.l.cuGraphAddEventWaitNode
	}
	d, nd := depsArg(deps)
	var n uintptr
	err := c.call(op, func() int32 { return fn(&n, uintptr(g), d, nd, uintptr(ev)) })
	runtime.KeepAlive(deps)
	return device.GraphNode(n), err
}

func (c *Context) GraphEventNodeEvent(n device.GraphNode, wait bool) (device.Event, error) {
	op, fn := "cuGraphEventRecordNodeGetEvent", c.l.cuGraphEventRecordNodeGetEvent
	if wait {
		op, fn = "cuGraphEventWaitNodeGetEvent", c.l.cuGraphEventWaitNodeGetEvent
	}
	var ev uintptr
	err := c.call(op, func() int32 { return fn(uintptr(n), &ev) })
	return device.Event(ev), err
}

func (c *Context) GraphEventNodeSetEvent(e device.GraphExec, n device.GraphNode, wait bool, ev device.Event) error {
	switch {
	case e == 0 && !wait:
		return c.call("cuGraphEventRecordNodeSetEvent", func() int32 { return c.l.cuGraphEventRecordNodeSetEvent(uintptr(n), uintptr(ev)) })
	case e == 0:
		return c.call("cuGraphEventWaitNodeSetEvent", func() int32 { return c.l.cuGraphEventWaitNodeSetEvent(uintptr(n), uintptr(ev)) })
	case !wait:
		return c.call("cuGraphExecEventRecordNodeSetEvent", func() int32 {
			return c.l.cuGraphExecEventRecordNodeSetEvent(uintptr(e), uintptr(n), uintptr(ev))
		})
	}
	return c.call("cuGraphExecEventWaitNodeSetEvent", func() int32 {
		return c.l.cuGraphExecEventWaitNodeSetEvent(uintptr(e), uintptr(n), uintptr(ev))
	})
}

func (c *Context) GraphAddChildGraphNode(g device.Graph, deps []device.GraphNode, child device.Graph) (device.GraphNode, error) {
	d, nd := depsArg(deps)
	var n uintptr
	err := c.call("cuGraphAddChildGraphNode", func() int32 {
		return c.l.cuGraphAddChildGraphNode(&n, uintptr(g), d, nd, uintptr(child))
	})
	runtime.KeepAlive(deps)
	return device.GraphNode(n), err
}

func (c *Context) GraphChildGraph(n device.GraphNode) (device.Graph, error) {
	var g uintptr
	err := c.call("cuGraphChildGraphNodeGetGraph", func() int32 { return c.l.cuGraphChildGraphNodeGetGraph(uintptr(n), &g) })
	return device.Graph(g), err
}

func (c *Context) GraphExecChildGraphSetParams(e device.GraphExec, n device.GraphNode, child device.Graph) error {
	return c.call("cuGraphExecChildGraphNodeSetParams", func() int32 {
		return c.l.cuGraphExecChildGraphNodeSetParams(uintptr(e), uintptr(n), uintptr(child))
	})
}

func (c *Context) GraphNodeFindInClone(n device.GraphNode, clone device.Graph) (device.GraphNode, error) {
	var h uintptr
	err := c.call("cuGraphNodeFindInClone", func() int32 { return c.l.cuGraphNodeFindInClone(&h, uintptr(n), uintptr(clone)) })
	return device.GraphNode(h), err
}

func (c *Context) GraphNodeSetEnabled(e device.GraphExec, n device.GraphNode, enabled bool) error {
	var on uint32
	if enabled {
		on = 1
	}
	return c.call("cuGraphNodeSetEnabled", func() int32 { return c.l.cuGraphNodeSetEnabled(uintptr(e), uintptr(n), on) })
}

func (c *Context) GraphNodeGetEnabled(e device.GraphExec, n device.GraphNode) (bool, error) {
	var on uint32
	err := c.call("cuGraphNodeGetEnabled", func() int32 { return c.l.cuGraphNodeGetEnabled(uintptr(e), uintptr(n), &on) })
	return on != 0, err
}
