package session

import (
	"crypto/sha256"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/device/image"
	"github.com/vgpu-project/vgpu/protocol"
)

// MaxModuleBytes bounds one module image.
const MaxModuleBytes = 512 << 20

// MaxNameLen bounds kernel and global names.
const MaxNameLen = 4096

func moduleLoad(s *Session, c *call, r *protocol.ModuleLoadReq) (protocol.ModuleLoadReply, error) {
	const op = "OpModuleLoad"
	ctx, err := s.device(r.Device)
	if err != nil {
		return protocol.ModuleLoadReply{}, err
	}
	if err := room(op, len(s.st.modules)); err != nil {
		return protocol.ModuleLoadReply{}, err
	}
	var img []byte
	cached := uint32(0)
	if r.Image.Kind == protocol.BufNone {
		b, ok := s.mods.Get(r.Hash)
		if !ok {
			return protocol.ModuleLoadReply{}, device.Errorf(op, device.ErrNotFound, "no image with this SHA-256 in this VM's cache: send the image bytes")
		}
		img, cached = b, 1
	} else {
		if r.Image.Len == 0 || r.Image.Len > MaxModuleBytes {
			return protocol.ModuleLoadReply{}, device.Errorf(op, device.ErrInvalidValue, "image of %d bytes (want 1..%d)", r.Image.Len, MaxModuleBytes)
		}
		b, err := s.gatherImage(c, op, r.Image)
		if err != nil {
			return protocol.ModuleLoadReply{}, err
		}
		if r.Hash != ([32]byte{}) && sha256.Sum256(b) != r.Hash {
			return protocol.ModuleLoadReply{}, device.Errorf(op, device.ErrInvalidValue, "the image's SHA-256 differs from the hash sent with it")
		}
		img = b
	}
	// The driver parses the image itself (cuModuleLoadData detects the
	// kind): it gets nothing that is not recognisably a fatbin, a cubin
	// or PTX.
	if image.Detect(img) == image.KindAuto {
		return protocol.ModuleLoadReply{}, device.Errorf(op, device.ErrInvalidImage, "not a fatbin, cubin or PTX image")
	}
	if err := s.newObject(op, len(s.st.modules)); err != nil {
		return protocol.ModuleLoadReply{}, err
	}
	h, err := ctx.ModuleLoad(img)
	if err != nil {
		s.dropObject()
		return protocol.ModuleLoadReply{}, err
	}
	if cached == 0 {
		s.cacheImage(img)
	}
	id := s.st.handle()
	s.st.modules[id] = &moduleObj{dev: int(r.Device), h: h, funcs: map[string]uint64{}}
	s.proc.touch(int(r.Device))
	return protocol.ModuleLoadReply{Module: id, Cached: cached}, nil
}

// cacheImage keeps an image the device has loaded in the VM's cache, once
// package image can parse it too: what is cached is a valid image, never
// arbitrary bytes a guest uses to fill the cache.
func (s *Session) cacheImage(img []byte) {
	if _, err := image.Parse(img, image.KindAuto); err != nil {
		s.log.Debug("module image not cached: the device loaded it but it does not parse", "err", err)
		return
	}
	s.mods.Put(sha256.Sum256(img), img)
}

func moduleUnload(s *Session, c *call, r *protocol.HandleReq) error {
	m, ok := s.st.modules[r.Handle]
	if !ok {
		return device.Errorf("OpModuleUnload", device.ErrInvalidHandle, "module %#x is not this session's", r.Handle)
	}
	s.unloadModule(r.Handle, m)
	return nil
}

// name returns a NameReq's module and name.
func (s *Session) name(c *call, op string, r *protocol.NameReq) (*moduleObj, string, error) {
	m, ok := s.st.modules[r.Module]
	if !ok {
		return nil, "", device.Errorf(op, device.ErrInvalidHandle, "module %#x is not this session's", r.Module)
	}
	if r.NameLen == 0 || r.NameLen > MaxNameLen || uint64(r.NameLen) > uint64(len(c.tail)) {
		return nil, "", device.Errorf(op, device.ErrInvalidValue, "name of %d bytes (tail has %d, limit %d)", r.NameLen, len(c.tail), MaxNameLen)
	}
	return m, string(c.tail[:r.NameLen]), nil
}

func moduleGetFunction(s *Session, c *call, r *protocol.NameReq) error {
	const op = "OpModuleGetFunction"
	m, name, err := s.name(c, op, r)
	if err != nil {
		return err
	}
	id, ok := m.funcs[name]
	if !ok {
		ctx := s.cfg.Devices[m.dev]
		fh, err := ctx.ModuleGetFunction(m.h, name)
		if err != nil {
			return err
		}
		params, err := ctx.FuncParams(fh)
		if err != nil {
			return err
		}
		id = s.st.handle()
		s.st.funcs[id] = &funcObj{dev: m.dev, module: r.Module, h: fh, params: params, bytes: device.ParamBytes(params)}
		m.funcs[name] = id
	}
	fo := s.st.funcs[id]
	rep := protocol.FunctionReply{Func: id, NumParams: uint32(len(fo.params)), ParamBytes: fo.bytes}
	c.out = protocol.Append(c.out, &rep)
	for _, p := range fo.params {
		pi := protocol.ParamInfo{Offset: p.Offset, Size: p.Size}
		c.out = protocol.Append(c.out, &pi)
	}
	return nil
}

// moduleListFunctions answers the names of a module's kernels from r.First
// on, as many as fit MaxFunctionListBytes (cuModuleEnumerateFunctions; the
// guest gets each one's handle with MODULE_GET_FUNCTION).
func moduleListFunctions(s *Session, c *call, r *protocol.ModuleFunctionsReq) error {
	const op = "OpModuleListFunctions"
	m, ok := s.st.modules[r.Module]
	if !ok {
		return device.Errorf(op, device.ErrInvalidHandle, "module %#x is not this session's", r.Module)
	}
	names, err := s.cfg.Devices[m.dev].ModuleFunctionNames(m.h)
	if err != nil {
		return err
	}
	if uint64(r.First) > uint64(len(names)) {
		return device.Errorf(op, device.ErrInvalidValue, "from kernel %d of %d", r.First, len(names))
	}
	rep := protocol.ModuleFunctionsReply{Total: uint32(len(names))}
	var tail []byte
	for _, n := range names[r.First:] {
		if len(n) == 0 || len(n) > MaxNameLen {
			return device.Errorf(op, device.ErrUnknown, "the device named a kernel with %d bytes", len(n))
		}
		if len(tail)+len(n)+1 > protocol.MaxFunctionListBytes {
			break
		}
		tail = append(append(tail, n...), 0)
		rep.Count++
	}
	c.out = append(protocol.Append(c.out, &rep), tail...)
	return nil
}

func moduleGetGlobal(s *Session, c *call, r *protocol.NameReq) (protocol.GlobalReply, error) {
	const op = "OpModuleGetGlobal"
	m, name, err := s.name(c, op, r)
	if err != nil {
		return protocol.GlobalReply{}, err
	}
	p, size, err := s.cfg.Devices[m.dev].ModuleGetGlobal(m.h, name)
	if err != nil {
		return protocol.GlobalReply{}, err
	}
	if size > 0 {
		if _, err := s.st.find(op, uint64(p), size); err != nil { // first lookup: track it
			if err := s.st.add(memRange{base: uint64(p), size: size, dev: m.dev, kind: kindGlobal, owner: r.Module}); err != nil {
				return protocol.GlobalReply{}, err
			}
		}
	}
	return protocol.GlobalReply{Ptr: uint64(p), Size: size}, nil
}

func (s *Session) function(op string, h uint64) (*funcObj, error) {
	f, ok := s.st.funcs[h]
	if !ok {
		return nil, device.Errorf(op, device.ErrInvalidHandle, "function %#x is not this session's", h)
	}
	return f, nil
}

func funcGetAttributes(s *Session, c *call, r *protocol.HandleReq) (protocol.FuncAttributesReply, error) {
	var rep protocol.FuncAttributesReply
	f, err := s.function("OpFuncGetAttributes", r.Handle)
	if err != nil {
		return rep, err
	}
	ctx := s.cfg.Devices[f.dev]
	for a := range rep.Attrs {
		v, err := ctx.FuncGetAttribute(f.h, a)
		if err != nil {
			if a < 10 { // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK..PREFERRED_SHARED_MEMORY_CARVEOUT exist everywhere
				return rep, err
			}
			continue // newer attributes the driver may not know stay 0
		}
		rep.Attrs[a] = v
	}
	return rep, nil
}

func funcSetAttribute(s *Session, c *call, r *protocol.FuncSetAttributeReq) error {
	const op = "OpFuncSetAttribute"
	f, err := s.function(op, r.Func)
	if err != nil {
		return err
	}
	ctx := s.cfg.Devices[f.dev]
	props, err := ctx.Properties()
	if err != nil {
		return err
	}
	if err := checkFuncSetAttribute(op, props, r.Attr, r.Value); err != nil {
		return err
	}
	return ctx.FuncSetAttribute(f.h, int(r.Attr), r.Value)
}

func occupancyMaxBlocks(s *Session, c *call, r *protocol.OccupancyReq) (protocol.OccupancyReply, error) {
	f, err := s.function("OpOccupancyMaxBlocks", r.Func)
	if err != nil {
		return protocol.OccupancyReply{}, err
	}
	if r.BlockSize == 0 || r.BlockSize > 1<<16 {
		return protocol.OccupancyReply{}, device.Errorf("OpOccupancyMaxBlocks", device.ErrInvalidValue, "block size %d", r.BlockSize)
	}
	if err := checkOccupancyFlags("OpOccupancyMaxBlocks", r.Flags); err != nil {
		return protocol.OccupancyReply{}, err
	}
	ctx := s.cfg.Devices[f.dev]
	props, err := ctx.Properties()
	if err != nil {
		return protocol.OccupancyReply{}, err
	}
	if r.DynSmem > uint64(max(optinSmem(props), 0)) {
		// No block of this kernel fits: the driver's answer, without
		// handing it a size near 2^64.
		return protocol.OccupancyReply{}, nil
	}
	n, err := ctx.OccupancyMaxBlocks(f.h, int(r.BlockSize), r.DynSmem, r.Flags)
	return protocol.OccupancyReply{NumBlocks: n}, err
}

// occupancyMaxClusters answers cuOccupancyMaxActiveClusters (in the
// reply's NumBlocks).
func occupancyMaxClusters(s *Session, c *call, r *protocol.ClusterOccupancyReq) (protocol.OccupancyReply, error) {
	f, err := s.function("OpOccupancyMaxClusters", r.Func)
	if err != nil {
		return protocol.OccupancyReply{}, err
	}
	ctx := s.cfg.Devices[f.dev]
	props, err := ctx.Properties()
	if err != nil {
		return protocol.OccupancyReply{}, err
	}
	if int64(r.SharedMem) > int64(optinSmem(props)) {
		return protocol.OccupancyReply{}, nil // no block fits, so no cluster: the driver's answer
	}
	cfg := device.LaunchConfig{
		Grid:          [3]uint32{r.GridX, r.GridY, r.GridZ},
		Block:         [3]uint32{r.BlockX, r.BlockY, r.BlockZ},
		SharedMem:     r.SharedMem,
		Cluster:       [3]uint32{r.Cluster.X, r.Cluster.Y, r.Cluster.Z},
		ClusterPolicy: r.Cluster.Policy,
	}
	n, err := ctx.OccupancyMaxClusters(f.h, cfg)
	return protocol.OccupancyReply{NumBlocks: n}, err
}

func launchKernel(s *Session, c *call, r *protocol.LaunchReq) error {
	return launch(s, c, "OpLaunchKernel", r, protocol.Cluster{})
}

// launchKernelEx is a launch in thread-block clusters.
func launchKernelEx(s *Session, c *call, r *protocol.LaunchExReq) error {
	return launch(s, c, "OpLaunchKernelEx", &r.Launch, r.Cluster)
}

// launchKernelAttrs is a launch with launch attributes (cuLaunchKernelEx
// with more than a cluster, cuLaunchCooperativeKernel). An access policy
// window must lie in one of the session's allocations on the kernel's
// device, as a stream's must.
func launchKernelAttrs(s *Session, c *call, r *protocol.LaunchAttrsReq) error {
	const op = "OpLaunchKernelAttrs"
	a := r.Attrs
	attrs := device.LaunchAttrs{Has: a.Has}
	attrs.Value[device.LaunchAttrCooperative] = a.Cooperative
	attrs.Value[device.LaunchAttrProgrammaticSerialization] = a.ProgrammaticSerialization
	attrs.Value[device.StreamAttrPriority] = uint32(a.Priority)
	attrs.Value[device.StreamAttrMemSyncDomainMap] = a.MemSyncDomainMap
	attrs.Value[device.StreamAttrMemSyncDomain] = a.MemSyncDomain
	attrs.Value[device.LaunchAttrCarveout] = a.Carveout
	if attrs.Given(device.StreamAttrAccessPolicyWindow) {
		attrs.Window = toStreamAttr(protocol.StreamAttrValue{Window: a.Window}).Window
		if w := a.Window; w.Bytes != 0 {
			m, err := s.st.find(op, w.Base, w.Bytes)
			if err != nil {
				return err
			}
			if f, ok := s.st.funcs[r.Launch.Func]; ok && f.dev != m.dev {
				return device.Errorf(op, device.ErrInvalidValue, "an access policy window over memory of device %d for a kernel of device %d", m.dev, f.dev)
			}
		}
	}
	return launchWith(s, c, op, &r.Launch, r.Cluster, attrs)
}

func launch(s *Session, c *call, op string, r *protocol.LaunchReq, cl protocol.Cluster) error {
	return launchWith(s, c, op, r, cl, device.LaunchAttrs{})
}

func launchWith(s *Session, c *call, op string, r *protocol.LaunchReq, cl protocol.Cluster, attrs device.LaunchAttrs) error {
	f, err := s.function(op, r.Func)
	if err != nil {
		return err
	}
	if uint64(r.ParamSize) > uint64(len(c.tail)) {
		return device.Errorf(op, device.ErrInvalidValue, "parameter block of %d bytes declared, %d sent", r.ParamSize, len(c.tail))
	}
	if r.ParamSize != f.bytes {
		return device.Errorf(op, device.ErrInvalidValue, "parameter block of %d bytes, the kernel's layout takes %d", r.ParamSize, f.bytes)
	}
	st, err := s.stream(r.Stream, f.dev, true)
	if err != nil {
		return err
	}
	cfg := device.LaunchConfig{
		Grid:          [3]uint32{r.GridX, r.GridY, r.GridZ},
		Block:         [3]uint32{r.BlockX, r.BlockY, r.BlockZ},
		SharedMem:     r.SharedMem,
		Stream:        st,
		Cluster:       [3]uint32{cl.X, cl.Y, cl.Z},
		ClusterPolicy: cl.Policy,
		Attrs:         attrs,
	}
	return s.cfg.Devices[f.dev].Launch(f.h, cfg, c.tail[:r.ParamSize])
}
