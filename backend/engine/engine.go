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
//     device-mapped guest memory directly, from a descriptor list uploaded
//     per request through a pinned staging buffer. Good for many small,
//     scattered pages, where one copy per page costs more than the bytes.
//     Needs a device that executes kernels (not sim).
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

// Coalesce merges pieces that are adjacent in the same region, in place.
func Coalesce(ps []Piece) []Piece {
	if len(ps) < 2 {
		return ps
	}
	out := ps[:1]
	for _, p := range ps[1:] {
		last := &out[len(out)-1]
		if p.Region != nil && p.Region == last.Region && p.Off == last.Off+uint64(len(last.Host)) {
			last.Host = last.Region.Host[last.Off : p.Off+uint64(len(p.Host)) : p.Off+uint64(len(p.Host))]
			continue
		}
		out = append(out, p)
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

// Choose returns the engine Auto picks for these (coalesced) pieces.
func Choose(ps []Piece, canGather bool) Kind {
	if !canGather || len(ps) < GatherMinRuns {
		return Direct
	}
	var total uint64
	for _, p := range ps {
		total += uint64(len(p.Host))
	}
	if total/uint64(len(ps)) <= GatherMaxAvgRun {
		return Gather
	}
	return Direct
}

// Engine copies between pieces of guest memory and device memory.
type Engine struct {
	kind Kind
	reg  *Registry

	mu       sync.Mutex // staging buffer
	stage    []byte
	stageCtx device.Context
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

// Copy moves len(pieces) bytes between dev and the pieces, enqueued on s.
// It returns the engine it used.
func (e *Engine) Copy(c device.Context, dir Dir, dev device.Ptr, pieces []Piece, s device.Stream) (Kind, error) {
	pieces = Coalesce(pieces)
	k := e.kind
	canGather := e.reg != nil && device.ExecutesKernels(c)
	if k == Auto {
		k = Choose(pieces, canGather)
	}
	if k == Staging {
		return k, e.staging(c, dir, dev, pieces, s)
	}
	if k == Gather {
		if !canGather {
			return k, device.Errorf("engine.Gather", device.ErrNotSupported, "the gather engine needs a device that executes kernels and registered guest memory")
		}
		return k, e.gather(c, dir, dev, pieces, s)
	}
	return Direct, e.direct(c, dir, dev, pieces, s)
}

func (e *Engine) direct(c device.Context, dir Dir, dev device.Ptr, pieces []Piece, s device.Stream) error {
	if e.reg != nil {
		for _, p := range pieces {
			if p.Region != nil {
				if _, err := e.reg.Ensure(c, p.Region, p.Off, uint64(len(p.Host))); err != nil {
					return err
				}
			}
		}
	}
	off := device.Ptr(0)
	for _, p := range pieces {
		var err error
		if dir == HtoD {
			err = c.MemcpyHtoD(dev+off, p.Host, s, true)
		} else {
			err = c.MemcpyDtoH(p.Host, dev+off, s, true)
		}
		if err != nil {
			return err
		}
		off += device.Ptr(len(p.Host))
	}
	return nil
}
