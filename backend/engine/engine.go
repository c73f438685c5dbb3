// Package engine moves bytes between guest memory and device memory for
// copies whose guest side is a list of guest-physical pieces (the guest
// driver's segments, or a registered region).
//
// Three engines, chosen per request by segment layout and size (or forced by
// configuration, for benchmarks):
//
//   - Direct: one asynchronous copy per host-contiguous run. Guest RAM is
//     registered with the device lazily (cuMemHostRegister DEVICEMAP, in
//     ChunkSize pieces, on first use), so the runs are DMA'd at pinned
//     bandwidth. Good for few, large runs.
//   - Gather: a gather (HtoD) or scatter (DtoH) kernel reads or writes
//     device-mapped guest memory directly, from descriptors the CPU
//     publishes in pinned memory while the kernel runs (gather.go, copy.cu).
//     Good for many small, scattered pages, where one copy per page costs
//     more than the bytes. Needs a device that executes kernels (not sim).
//   - Staging: the CPU gathers into (or scatters from) a pinned bounce
//     buffer that the DMA engine moves; the baseline, needing no
//     registration of guest RAM.
//   - Inline: the bytes travel in the frame (host mode); the session copies
//     them itself, this package is not involved.
//
// Trust: pieces have been bounds-checked by guestmem (every Host slice lies
// inside a mapped region). The engine trusts device pointers and lengths
// the session has validated against its own allocations.
//
// Ordering: copies are enqueued on the given stream; the caller synchronizes
// the stream before it releases the guest memory (before replying).
package engine

import (
	"fmt"
	"strings"
	"sync"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/guestmem"
)

// Kind selects an engine.
type Kind int

// Engines.
const (
	Auto    Kind = iota // choose per request
	Direct              // one copy per contiguous run ("runs")
	Gather              // gather/scatter kernel
	Staging             // CPU copy through a pinned bounce buffer
)

func (k Kind) String() string {
	switch k {
	case Auto:
		return "auto"
	case Direct:
		return "direct"
	case Gather:
		return "gather"
	case Staging:
		return "staging"
	}
	return fmt.Sprintf("engine(%d)", int(k))
}

// ParseKind parses "auto", "direct" (or "runs"), "gather" or "staging".
func ParseKind(s string) (Kind, error) {
	switch strings.ToLower(s) {
	case "", "auto":
		return Auto, nil
	case "direct", "runs", "dma":
		return Direct, nil
	case "gather", "kernel":
		return Gather, nil
	case "staging", "bounce":
		return Staging, nil
	}
	return Auto, fmt.Errorf("engine: unknown engine %q (want auto, direct, gather or staging)", s)
}

// Piece is one host-contiguous piece of guest memory.
type Piece struct {
	Host   []byte
	Region *guestmem.Region // nil for memory outside guest RAM regions (registered mappings)
	Off    uint64           // offset of Host in Region
	Dev    device.Ptr       // device address of Host[0] if already registered, else 0
}

// Dir is a copy direction.
type Dir int

// Directions.
const (
	HtoD Dir = iota
	DtoH
)

// Source yields the guest pieces of one buffer, in order. Translating a
// piece (guest-physical address to host bytes, bounds-checked) happens in
// Piece, so engines can overlap it with the device's work.
type Source interface {
	Count() int
	Piece(i int) (Piece, error)
}

// Pieces is a Source over pieces already translated.
type Pieces []Piece

func (ps Pieces) Count() int                 { return len(ps) }
func (ps Pieces) Piece(i int) (Piece, error) { return ps[i], nil }

// adjacent reports whether q continues p in the same region.
func adjacent(p, q *Piece) bool {
	return q.Region != nil && q.Region == p.Region && q.Off == p.Off+uint64(len(p.Host))
}

// extend grows p by q (adjacent(p, q) must hold).
func extend(p *Piece, q *Piece) {
	end := q.Off + uint64(len(q.Host))
	p.Host = p.Region.Host[p.Off:end:end]
}

// Coalesce merges adjacent pieces, in place.
func Coalesce(ps []Piece) []Piece {
	if len(ps) < 2 {
		return ps
	}
	out := ps[:1]
	for i := 1; i < len(ps); i++ {
		last := &out[len(out)-1]
		if adjacent(last, &ps[i]) {
			extend(last, &ps[i])
			continue
		}
		out = append(out, ps[i])
	}
	return out
}

// Policy thresholds for Auto: the gather kernel wins when the average run is
// small and there are many runs (measured on the H100: one cudaMemcpyAsync
// per 4 KiB page 1.5 GB/s, gather kernel 50.5 GB/s, 2 MiB runs 51 GB/s).
const (
	GatherMaxAvgRun = 256 << 10
	GatherMinRuns   = 8
)

// Choose returns the engine Auto picks for count pieces of total bytes.
func Choose(count int, total uint64, canGather bool) Kind {
	if !canGather || count < GatherMinRuns {
		return Direct
	}
	if total/uint64(count) <= GatherMaxAvgRun {
		return Gather
	}
	return Direct
}

// Engine copies between pieces of guest memory and device memory. It is
// used by one session at a time.
type Engine struct {
	kind Kind
	reg  *Registry

	mu       sync.Mutex // staging and bounce buffers
	stage    []byte
	stageCtx device.Context
	bounce   map[device.Context][]byte // ReadBounce's, per context
}

// New returns an engine. reg may be shared by every session of a VM (guest
// RAM is registered once per VM); nil means no registration (pageable copies).
func New(kind Kind, reg *Registry) *Engine {
	return &Engine{kind: kind, reg: reg}
}

// Kind returns the configured engine kind.
func (e *Engine) Kind() Kind { return e.kind }

// Registry returns the guest RAM registry the engine uses (may be nil).
func (e *Engine) Registry() *Registry { return e.reg }

// Copy moves total bytes between dev and the source's pieces, enqueued on
// s, and returns the engine it used. On error part of the copy may have
// happened.
func (e *Engine) Copy(c device.Context, dir Dir, dev device.Ptr, total uint64, src Source, s device.Stream) (Kind, error) {
	k := e.kind
	canGather := e.reg != nil && device.ExecutesKernels(c)
	if k == Auto {
		k = Choose(src.Count(), total, canGather)
	}
	switch k {
	case Staging:
		return k, e.staging(c, dir, dev, src, s)
	case Gather:
		if !canGather {
			return k, device.Errorf("engine.Gather", device.ErrNotSupported, "the gather engine needs a device that executes kernels and registered guest memory")
		}
		if e.kind == Auto && gatherBroken(c) != nil {
			return Direct, e.direct(c, dir, dev, src, s) // chosen, not demanded: fall back
		}
		return k, e.gather(c, dir, dev, total, src, s)
	}
	return Direct, e.direct(c, dir, dev, src, s)
}

// chunkCache remembers the last registration chunk looked up.
type chunkCache struct {
	c      device.Context
	region *guestmem.Region
	idx    uint64
	dev    device.Ptr
	ok     bool
}

// devOf returns the device address of guest memory piece p (which must not
// cross a chunk boundary), registering its chunk on first use.
func (e *Engine) devOf(cc *chunkCache, c device.Context, p *Piece) (device.Ptr, error) {
	if d, ok := e.lookupDev(cc, c, p); ok {
		return d, nil
	}
	if p.Region == nil {
		return 0, device.Errorf("engine", device.ErrInvalidValue, "guest memory without a device mapping")
	}
	idx := p.Off / ChunkSize
	d, err := e.reg.Ensure(c, p.Region, idx*ChunkSize, 1)
	if err != nil {
		return 0, err
	}
	*cc = chunkCache{c: c, region: p.Region, idx: idx, dev: d, ok: true}
	return d + device.Ptr(p.Off-idx*ChunkSize), nil
}

// lookupDev is devOf for chunks already registered: it takes no lock and
// calls no driver (the gather engine's rule while a launch is open). ok is
// false where devOf must register first (or report a piece that has no
// device mapping).
func (e *Engine) lookupDev(cc *chunkCache, c device.Context, p *Piece) (device.Ptr, bool) {
	if p.Dev != 0 {
		return p.Dev, true
	}
	if p.Region == nil {
		return 0, false // devOf reports it
	}
	idx := p.Off / ChunkSize
	if !cc.ok || cc.region != p.Region || cc.idx != idx || cc.c != c {
		d, ok := e.reg.lookup(c, p.Region, idx)
		if !ok {
			return 0, false
		}
		*cc = chunkCache{c: c, region: p.Region, idx: idx, dev: d, ok: true}
	}
	return cc.dev + device.Ptr(p.Off-idx*ChunkSize), true
}

// direct issues one asynchronous copy per run of adjacent pieces; guest RAM
// is registered first, so each run is a DMA from pinned memory. A run is cut
// at each registration chunk's end: CUDA refuses a host range that leaves
// the registration it starts in (CUDA_ERROR_INVALID_VALUE), and guest pages
// that are physically contiguous across a chunk boundary are common in a
// guest with more than a chunk of RAM.
func (e *Engine) direct(c device.Context, dir Dir, dev device.Ptr, src Source, s device.Stream) error {
	var cc chunkCache
	var off device.Ptr
	return eachRun(src, func(run *Piece) error {
		h := run.Host
		for len(h) > 0 {
			n := uint64(len(h))
			if e.reg != nil && run.Region != nil {
				o := run.Off + uint64(len(run.Host)-len(h))
				n = min(n, (o/ChunkSize+1)*ChunkSize-o)
				q := Piece{Region: run.Region, Off: o, Host: h[:1]}
				if _, err := e.devOf(&cc, c, &q); err != nil {
					return err
				}
			}
			var err error
			if dir == HtoD {
				err = c.MemcpyHtoD(dev+off, h[:n], s, true)
			} else {
				err = c.MemcpyDtoH(h[:n], dev+off, s, true)
			}
			if err != nil {
				return err
			}
			off += device.Ptr(n)
			h = h[n:]
		}
		return nil
	})
}

// eachRun calls fn with each run of adjacent pieces of src, in order. A
// piece is translated (src.Piece) only when the loop reaches it, so the
// translation of later pieces overlaps the device's work on earlier runs.
func eachRun(src Source, fn func(run *Piece) error) error {
	var run Piece
	have := false
	for i, n := 0, src.Count(); i < n; i++ {
		p, err := src.Piece(i)
		if err != nil {
			return err
		}
		if have && adjacent(&run, &p) {
			extend(&run, &p)
			continue
		}
		if have {
			if err := fn(&run); err != nil {
				return err
			}
		}
		run, have = p, true
	}
	if !have {
		return nil
	}
	return fn(&run)
}
