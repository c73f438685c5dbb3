package engine

import (
	_ "embed"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/vgpu-project/vgpu/backend/device"
)

// copyPTX is the gather/scatter kernel, generated from copy.cu by
// scripts/gen-copy-ptx.sh (TestCopyPTXCurrent checks it is current). The
// driver JIT-compiles it for the device at hand (compute_70 and newer; on
// older devices, or drivers older than CUDA 11.8, the kernel does not load
// and Auto falls back to the direct engine).
//
//go:generate ../../scripts/gen-copy-ptx.sh
//go:embed copy.ptx
var copyPTX string

// Gather geometry. One launch takes up to slotDescs descriptors from one
// slot of pinned, device-mapped host memory. The engine launches the kernel
// before it has translated the piece list, then writes descriptors into the
// slot and raises the slot's published count every publishEvery
// descriptors; the kernel copies what is published, and returns once the
// count carries finalMark and it has copied that many (copy.cu). So the GPU
// starts moving bytes microseconds after the copy begins, and the whole list
// takes one launch. The batches of earlier versions (a launch per 8,192
// descriptors, the first ones ramped from 256) reached 88-90 % of native
// pinned HtoD on scattered 4 KiB pages on the H100, this 90-92 % (median
// 91 %, same-machine A/B in bench/results/2026-11-22-h100-engine-persistent).
//
// The rule that makes it safe: while a launch is open (its count not yet
// final) the engine calls nothing that could wait for the GPU: no driver
// call, no lock that someone may hold across a driver call. Translating a
// piece and looking up a registered chunk are pure; a chunk that must be
// registered first closes the launch (launcher.close), as does every
// return, error and panic included.
const (
	descSize            = 24
	numSlots            = 2
	gatherThreads       = 256 // 8 warps; copy.cu gives each warp 4 descriptors at a time
	descsPerBlock       = 32
	maxDescLen          = 64 << 10 // longer runs are split, so that many warps share them
	finalMark           = 1 << 63
	publishedOff        = 0 // the published count sits in the slot's first 64 bytes
	slotHeader          = 64
	mirrorSize          = 16  // struct vgpu_mirror
	eventNoTiming       = 0x2 // CU_EVENT_DISABLE_TIMING
	attrMultiprocessors = 16  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
)

// slotDescs is the number of descriptors one launch takes, and
// publishEvery how many the engine writes between raises of the published
// count (variables so that tests can make launches small and measure the
// GPU alone: publishEvery = slotDescs publishes only the final count).
var (
	slotDescs    = 65536
	publishEvery = 64
)

type slot struct {
	host   []byte       // pinned, device-mapped: the published count, then descriptors
	dev    device.Ptr   // device address of host
	mirror device.Ptr   // the launch's shared count in device memory
	ev     device.Event // recorded after the launch that reads the slot
	busy   bool
}

// published is the slot's published count, read by the kernel over PCIe.
func (sl *slot) published() *uint64 { return (*uint64)(unsafe.Pointer(&sl.host[publishedOff])) }

// gatherState is one context's kernel and descriptor slots, shared by every
// engine of the process (the PTX is JIT-compiled once per context).
type gatherState struct {
	mu    sync.Mutex
	fn    device.Function
	sms   uint32 // multiprocessors: the largest grid
	descs int    // descriptors per slot
	slots [numSlots]slot
	next  int
	err   error
}

var gatherStates sync.Map // device.Context -> *gatherState

// getGather returns c's gather state, locked.
func getGather(c device.Context) *gatherState {
	v, _ := gatherStates.LoadOrStore(c, &gatherState{})
	g := v.(*gatherState)
	g.mu.Lock()
	if g.fn == 0 && g.err == nil {
		g.err = g.init(c)
	}
	return g
}

// gatherBroken returns why c's gather kernel cannot be used (nil if it can).
func gatherBroken(c device.Context) error {
	g := getGather(c)
	defer g.mu.Unlock()
	return g.err
}

func (g *gatherState) init(c device.Context) error {
	m, err := c.ModuleLoad([]byte(copyPTX))
	if err != nil {
		return err
	}
	fn, err := c.ModuleGetFunction(m, "vgpu_copy")
	if err != nil {
		return err
	}
	p, err := c.Properties()
	if err != nil {
		return err
	}
	g.sms = uint32(max(p.Attrs[attrMultiprocessors], 1))
	g.descs = slotDescs
	mirrors, err := c.MemAlloc(numSlots * mirrorSize)
	if err != nil {
		return err
	}
	for i := range g.slots {
		host, err := mapAnon(slotHeader + g.descs*descSize)
		if err != nil {
			return device.Errorf("engine.Gather", device.ErrOutOfMemory, "descriptor buffer: %v", err)
		}
		d, err := c.HostRegister(host, false)
		if err != nil {
			unmapAnon(host)
			return err
		}
		ev, err := c.EventCreate(eventNoTiming)
		if err != nil {
			return err
		}
		g.slots[i] = slot{host: host, dev: d, mirror: mirrors + device.Ptr(i*mirrorSize), ev: ev}
	}
	g.fn = fn
	return nil
}

// launcher is one copy's open launch, if any.
type launcher struct {
	c    device.Context
	g    *gatherState
	s    device.Stream
	grid uint32
	sl   *slot // the open launch's slot; nil when none is open
	n    int   // descriptors written to sl
}

// open launches the kernel on the next slot, with nothing published yet.
func (l *launcher) open() error {
	g := l.g
	sl := &g.slots[g.next]
	if sl.busy { // its launch was closed earlier: it ends by itself
		if err := l.c.EventSynchronize(sl.ev); err != nil {
			return err
		}
		sl.busy = false
	}
	g.next = (g.next + 1) % numSlots
	atomic.StoreUint64(sl.published(), 0)
	if err := l.c.Memset(sl.mirror, 0, 4, mirrorSize/4, 1, mirrorSize, l.s, true); err != nil {
		return err
	}
	var params [24]byte
	le := binary.LittleEndian
	le.PutUint64(params[0:], uint64(sl.dev+slotHeader))
	le.PutUint64(params[8:], uint64(sl.dev+publishedOff))
	le.PutUint64(params[16:], uint64(sl.mirror))
	cfg := device.LaunchConfig{Grid: [3]uint32{l.grid, 1, 1}, Block: [3]uint32{gatherThreads, 1, 1}, Stream: l.s}
	if err := l.c.Launch(g.fn, cfg, params[:]); err != nil {
		return err
	}
	l.sl, l.n = sl, 0
	return nil
}

// add appends one descriptor, opening a launch if none is open or the open
// one is full.
func (l *launcher) add(dst, src device.Ptr, n uint64) error {
	if l.sl != nil && l.n == l.g.descs {
		if err := l.close(); err != nil {
			return err
		}
	}
	if l.sl == nil {
		if err := l.open(); err != nil {
			return err
		}
	}
	le := binary.LittleEndian
	d := l.sl.host[slotHeader+l.n*descSize : slotHeader+(l.n+1)*descSize]
	le.PutUint64(d[0:], uint64(dst))
	le.PutUint64(d[8:], uint64(src))
	le.PutUint64(d[16:], n)
	l.n++
	if l.n%publishEvery == 0 {
		// The descriptors' stores come first: an atomic store is a release
		// (and amd64 keeps stores in order), so the kernel, which reads the
		// count before the descriptors, never sees one half-written.
		atomic.StoreUint64(l.sl.published(), uint64(l.n))
	}
	return nil
}

// close publishes the open launch's final count, after which the kernel
// ends by itself, and records the slot's event.
func (l *launcher) close() error {
	sl := l.sl
	if sl == nil {
		return nil
	}
	atomic.StoreUint64(sl.published(), uint64(l.n)|finalMark)
	l.sl = nil
	sl.busy = true
	if err := l.c.EventRecord(sl.ev, l.s); err != nil {
		// Without the event nothing says when the kernel stops reading the
		// slot: wait for it here (a broken context returns at once).
		_ = l.c.StreamSynchronize(l.s)
		sl.busy = false
		return err
	}
	return nil
}

// gather copies with the kernel: one launch per slot's worth of
// descriptors, opened before the first descriptor is written.
func (e *Engine) gather(c device.Context, dir Dir, dev device.Ptr, total uint64, src Source, s device.Stream) (err error) {
	g := getGather(c)
	defer g.mu.Unlock()
	if g.err != nil {
		return g.err
	}
	descs := max(uint64(src.Count()), total/maxDescLen) // about
	grid := uint32((min(descs, uint64(g.descs)) + descsPerBlock - 1) / descsPerBlock)
	l := launcher{c: c, g: g, s: s, grid: min(max(grid, 1), g.sms)}
	defer func() { // never leave a launch open: its kernel would wait forever
		if cerr := l.close(); err == nil {
			err = cerr
		}
	}()
	var cc chunkCache
	var off uint64
	emit := func(run *Piece) error {
		p := *run
		for len(p.Host) > 0 {
			q := p
			if len(q.Host) > maxDescLen {
				q.Host = q.Host[:maxDescLen]
			}
			if p.Dev == 0 { // stop at the registration chunk's end
				if rest := (p.Off/ChunkSize+1)*ChunkSize - p.Off; uint64(len(q.Host)) > rest {
					q.Host = p.Host[:rest]
				}
			}
			hd, ok := e.lookupDev(&cc, c, &q)
			if !ok { // registering calls the driver: close the launch first
				if err := l.close(); err != nil {
					return err
				}
				var err error
				if hd, err = e.devOf(&cc, c, &q); err != nil {
					return err
				}
			}
			n := uint64(len(q.Host))
			dst, from := dev+device.Ptr(off), hd
			if dir == DtoH {
				dst, from = hd, dev+device.Ptr(off)
			}
			if err := l.add(dst, from, n); err != nil {
				return err
			}
			off += n
			p.Host = p.Host[n:]
			p.Off += n
			if p.Dev != 0 {
				p.Dev += device.Ptr(n)
			}
		}
		return nil
	}
	return eachRun(src, emit)
}
