package session

import (
	"sort"

	"github.com/vgpu-project/vgpu/backend/budget"
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/engine"
	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/protocol"
)

// call is one request being executed.
type call struct {
	f    *protocol.Frame
	tail []byte // the payload after the fixed part
	out  []byte // reply payload
	// frame, if set, is a whole reply frame whose payload a handler wrote
	// in place (after the header's room); finish fills the header.
	frame  *[]byte
	frameN int
	status device.Result
	batch  bool // inside OpBatch: no reply payload, no segments
	table  *guestmem.Table
	pieces []engine.Piece
	src    segSource
	// syncs lists streams to synchronize before guest memory is released.
	syncs []syncPoint
	// sink takes the reply (nil: the stream); set per frame, kept by reset.
	sink ReplySink
	// first and read stamp the frame's first byte and its whole arrival
	// (unix ns; 0: not known, the receipt time is used), validated the
	// handler's start (tracing only); set per frame.
	first, read, validated int64
	// inline: the frame runs on the goroutine that received it, nothing
	// before it (tryInline): its receipt is its start (execute reads the
	// clock once less); set per frame.
	inline bool
}

type syncPoint struct {
	ctx device.Context
	s   device.Stream
}

func (c *call) reset(f *protocol.Frame) {
	c.f = f
	c.tail = nil
	if cap(c.out) > 1<<20 { // do not keep a large reply buffer for ever
		c.out = nil
	}
	c.out = c.out[:0]
	if c.frame != nil { // not sent (an error, or no reply wanted)
		putBuf(c.frame)
		c.frame = nil
	}
	c.status = device.Success
	c.validated = 0
	c.batch = false
	c.table = nil
	c.pieces = c.pieces[:0]
	c.syncs = c.syncs[:0]
}

// release ends the call's use of guest memory: it waits for copies touching
// it, then drops the table reference.
func (c *call) release() {
	for _, p := range c.syncs {
		_ = p.ctx.StreamSynchronize(p.s)
	}
	c.syncs = c.syncs[:0]
	if c.table != nil {
		c.table.Release()
		c.table = nil
	}
	clear(c.pieces)
	c.pieces = c.pieces[:0]
	c.src = segSource{}
}

type memKind uint8

const (
	kindAlloc  memKind = iota // OpMemAlloc
	kindMapped                // registered guest memory with a device address
	kindGlobal                // a module's global variable
	kindVMM                   // accessible mappings of the virtual-memory API (handlers_vmm.go)
)

// memRange is device memory the session may touch.
type memRange struct {
	base, size uint64
	dev        int
	kind       memKind
	owner      uint64 // module handle (globals) or region id (mapped)
}

type streamObj struct {
	dev int
	h   device.Stream
	// Shared contexts (defstream.go): the guest asked for a blocking
	// stream; work queued through the session; the default stream's work
	// this stream last waited for; the event joins are recorded with.
	blocking bool
	work     uint64
	seen     uint64
	ev       device.Event
	// capturing: the guest began a capture on it (handlers_graph.go);
	// capRegions: the pinned memory its captured copies use; capInvalid:
	// a call ordered in the capture failed, so the capture is invalidated
	// (its calls and its end answer CUDA_ERROR_STREAM_CAPTURE_INVALIDATED).
	capturing  bool
	capRegions []*region
	capInvalid bool
}

type eventObj struct {
	dev int
	h   device.Event
	// users: the graphs and executable graphs whose event nodes use it;
	// retired: the guest destroyed it while in use, and the device's
	// event goes with its last user (handlers_graphevents.go).
	users   int
	retired bool
}

type moduleObj struct {
	dev   int
	h     device.Module
	funcs map[string]uint64
}

type funcObj struct {
	dev    int
	module uint64
	h      device.Function
	params []device.Param
	bytes  uint32
}

// state is everything a session created; only the executor touches it.
type state struct {
	ranges  []memRange // sorted by base, non-overlapping
	next    uint64
	streams map[uint64]*streamObj
	events  map[uint64]*eventObj
	modules map[uint64]*moduleObj
	funcs   map[uint64]*funcObj
	// funcIDs finds a function's handle from the device's (funcID); a
	// cache, checked against funcs at each use.
	funcIDs map[funcKey]uint64
	regions map[uint64]*region
	// defaults are the session's own default streams per device (shared
	// contexts); dirty, per device, the blocking streams with work the
	// default stream has not waited for yet.
	defaults map[int]*streamObj
	dirty    map[int]map[*streamObj]struct{}
	// graphs and execs are the guest's graphs and executable graphs;
	// captures counts its streams that are capturing.
	graphs   map[uint64]*graphObj
	execs    map[uint64]*execObj
	nodes    map[uint64]*nodeObj
	captures int
	// touched is the stream the call being run orders its work on, noted
	// while a capture is in progress (noteStream): if the call fails, the
	// capture it belongs to is invalidated (handlers_graph.go).
	touched *streamObj
	// capturesOn and invalidOn count, per device, its capturing streams
	// and those whose capture is invalidated (capInvalid); a device with
	// none has no entry.
	capturesOn map[int]int
	invalidOn  map[int]int
	// externalWaits counts CU_EVENT_WAIT_EXTERNAL waits made while a
	// capture was in progress: each may be a wait node of a captured graph,
	// whose event the graph must hold (handlers_graphevents.go).
	externalWaits int
	// The virtual-memory API (handlers_vmm.go): reservations by base,
	// physical memory by handle, mappings by base.
	reserves      map[uint64]*reserveObj
	reservedBytes uint64
	phys          map[uint64]*physObj
	maps          map[uint64]*mappingObj
	// arrays are the session's CUDA arrays (handlers_array.go).
	arrays map[uint64]*arrayObj
	// texObjs are its texture and surface objects, by the driver's value
	// (handlers_texture.go).
	texObjs map[uint64]*texObj
	// Memory pools (handlers_mempool.go): created pools by handle, and the
	// release thresholds the guest set on default pools, by device.
	pools        map[uint64]*poolObj
	defThreshold map[int]*uint64
}

func (st *state) init() {
	st.next = 0x1000
	st.streams = map[uint64]*streamObj{}
	st.events = map[uint64]*eventObj{}
	st.modules = map[uint64]*moduleObj{}
	st.funcs = map[uint64]*funcObj{}
	st.regions = map[uint64]*region{}
	st.defaults = map[int]*streamObj{}
	st.dirty = map[int]map[*streamObj]struct{}{}
	st.graphs = map[uint64]*graphObj{}
	st.capturesOn = map[int]int{}
	st.invalidOn = map[int]int{}
	st.execs = map[uint64]*execObj{}
	st.nodes = map[uint64]*nodeObj{}
	st.reserves = map[uint64]*reserveObj{}
	st.phys = map[uint64]*physObj{}
	st.maps = map[uint64]*mappingObj{}
	st.arrays = map[uint64]*arrayObj{}
	st.texObjs = map[uint64]*texObj{}
	st.pools = map[uint64]*poolObj{}
}

func (st *state) handle() uint64 {
	st.next++
	return st.next
}

// MaxObjects bounds each kind of object one session may hold (streams,
// events, modules, regions, allocations): a guest cannot grow the
// backend's tables without limit.
const MaxObjects = 1 << 16

// room fails when a session already holds MaxObjects of a kind.
func room(op string, n int) error {
	if n >= MaxObjects {
		return device.Errorf(op, device.ErrOutOfMemory, "this session already holds %d of these; free some first", n)
	}
	return nil
}

// newObject takes one object of the client's budget (its VM's and the
// process's too) for a session holding n of that kind; dropObject gives it
// back.
func (s *Session) newObject(op string, n int) error {
	if err := room(op, n); err != nil {
		return err
	}
	if err := s.pool.Take(budget.Objects, 1); err != nil {
		return device.Errorf(op, device.ErrOutOfMemory, "%v: free some streams, events, modules or allocations first", err)
	}
	return nil
}

func (s *Session) dropObject() { s.pool.Give(budget.Objects, 1) }

// find returns the range holding [p, p+n) (n > 0).
func (st *state) find(op string, p, n uint64) (*memRange, error) {
	i := sort.Search(len(st.ranges), func(i int) bool { return st.ranges[i].base+st.ranges[i].size > p })
	if i == len(st.ranges) || st.ranges[i].base > p {
		return nil, device.Errorf(op, device.ErrInvalidValue, "device address %#x is not memory this session allocated (freed, foreign or never allocated)", p)
	}
	r := &st.ranges[i]
	if n > r.size-(p-r.base) {
		return nil, device.Errorf(op, device.ErrInvalidValue, "[%#x, +%d) runs past the end of its allocation [%#x, +%d)", p, n, r.base, r.size)
	}
	return r, nil
}

func (st *state) add(r memRange) error {
	i := sort.Search(len(st.ranges), func(i int) bool { return st.ranges[i].base >= r.base })
	if (i < len(st.ranges) && st.ranges[i].base < r.base+r.size) || (i > 0 && st.ranges[i-1].base+st.ranges[i-1].size > r.base) {
		return device.Errorf("track", device.ErrUnknown, "device returned [%#x, +%d), which overlaps memory the session already holds", r.base, r.size)
	}
	st.ranges = append(st.ranges, memRange{})
	copy(st.ranges[i+1:], st.ranges[i:])
	st.ranges[i] = r
	return nil
}

func (st *state) remove(base uint64) {
	i := sort.Search(len(st.ranges), func(i int) bool { return st.ranges[i].base >= base })
	if i < len(st.ranges) && st.ranges[i].base == base {
		st.ranges = append(st.ranges[:i], st.ranges[i+1:]...)
	}
}

// releaseAll frees what the session holds on device dev (-1: everything):
// streams are drained first, then events, streams, modules, memory and
// registered regions go.
func (s *Session) releaseAll(dev int) {
	st := &s.st
	match := func(d int) bool { return dev < 0 || d == dev }
	for _, o := range st.streams {
		if match(o.dev) {
			_ = s.cfg.Devices[o.dev].StreamSynchronize(o.h)
		}
	}
	for dev, d := range st.defaults {
		if match(dev) {
			_ = s.cfg.Devices[dev].StreamSynchronize(d.h)
		}
	}
	s.releaseGraphs(match)
	for id, o := range st.events {
		if match(o.dev) {
			_ = s.cfg.Devices[o.dev].EventDestroy(o.h)
			delete(st.events, id)
			s.dropObject()
		}
	}
	for dev := range st.dirty {
		if match(dev) {
			delete(st.dirty, dev) // everything is synchronized: no joins left to make
		}
	}
	for id, o := range st.streams {
		if match(o.dev) {
			_ = s.dropStream(o)
			delete(st.streams, id)
			s.dropObject()
		}
	}
	for dev, d := range st.defaults {
		if match(dev) {
			if d.ev != 0 {
				_ = s.cfg.Devices[dev].EventDestroy(d.ev)
			}
			_ = s.cfg.Devices[dev].StreamDestroy(d.h)
			delete(st.defaults, dev)
			delete(st.dirty, dev)
		}
	}
	for id, m := range st.modules {
		if match(m.dev) {
			s.unloadModule(id, m)
		}
	}
	s.releaseVMM(match)
	s.releaseTexObjects(match)
	s.releaseArrays(match)
	kept := st.ranges[:0]
	for _, r := range st.ranges {
		if r.kind == kindAlloc && match(r.dev) {
			if err := s.cfg.Devices[r.dev].MemFree(device.Ptr(r.base)); err != nil {
				s.log.Warn("freeing device memory at session end failed", "ptr", r.base, "err", err)
			}
			s.cfg.Quota.Release(r.size)
			s.dropObject()
			s.proc.uncharge(r.dev, r.size)
			continue
		}
		kept = append(kept, r)
	}
	st.ranges = kept
	s.releasePools(match)
	for id, r := range st.regions {
		if match(r.dev) {
			s.dropRegion(id, r)
		}
	}
	s.proc.reset(dev)
}

func (s *Session) unloadModule(id uint64, m *moduleObj) {
	st := &s.st
	for _, f := range m.funcs {
		delete(st.funcs, f)
	}
	kept := st.ranges[:0]
	for _, r := range st.ranges {
		if !(r.kind == kindGlobal && r.owner == id) {
			kept = append(kept, r)
		}
	}
	st.ranges = kept
	if err := s.cfg.Devices[m.dev].ModuleUnload(m.h); err != nil {
		s.log.Warn("unloading module failed", "module", id, "err", err)
	}
	delete(st.modules, id)
	s.dropObject()
}
