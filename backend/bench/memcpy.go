package bench

import (
	"errors"
	"fmt"
	"time"
	"unsafe"
)

// Path is one way a copy can travel.
type Path struct {
	Name   string
	Pinned bool   // host buffer from cuMemAllocHost (else ordinary memory)
	Engine uint64 // vgpu copy engine (protocol.Engine*), 0 = auto
	Inline bool   // vgpu: data inline in the frame instead of guest-physical segments
	VGPU   bool   // only through vgpu's library
	// MaxSize bounds the sizes measured on this path (0: all): the inline
	// path moves every byte through the vsock stream, which under TCG runs
	// at tens of MB/s, so a 1 GiB copy would take minutes.
	MaxSize uint64
}

// vgpu library option keys (vgpuSetOption); see guest-lib.
const (
	optCopyEngine uint64 = 1
	optInline     uint32 = 0x100
)

// Paths returns the paths worth measuring through this library.
func (d *Driver) Paths() []Path {
	if !d.IsVGPU() {
		return []Path{{Name: "native-pageable"}, {Name: "native-pinned", Pinned: true}}
	}
	return []Path{
		{Name: "pinned", Pinned: true, VGPU: true},
		{Name: "pageable-auto", VGPU: true},
		{Name: "segments-runs", Engine: 1, VGPU: true},
		{Name: "segments-gather", Engine: 2, VGPU: true},
		{Name: "inline", Inline: true, VGPU: true, MaxSize: 16 << 20},
	}
}

// Result is one measurement.
type Result struct {
	Path        string
	Dir         string // "H2D" or "D2H"
	Size        uint64
	Iters       int
	GBps        float64 // bandwidth the program sees
	BackendGBps float64 // bandwidth the backend saw (receipt to completion); 0 if unknown
}

// MemcpyOptions bound a run.
type MemcpyOptions struct {
	Sizes   []uint64
	MinTime time.Duration // per size and direction
	MaxIter int
	Paths   []string // names to run; empty = all
}

// DefaultSizes is 4 KiB … 1 GiB in steps of 4x.
func DefaultSizes(max uint64) []uint64 {
	var s []uint64
	for n := uint64(4 << 10); n <= max; n *= 4 {
		s = append(s, n)
	}
	return s
}

func (d *Driver) setPath(p Path) error {
	if !d.IsVGPU() {
		return nil
	}
	if r := d.vgpuSetOption(uint32(optCopyEngine), p.Engine); r != 0 {
		return &CUDAError{Call: "vgpuSetOption(copy engine)", Code: r}
	}
	inline := uint64(0)
	if p.Inline {
		inline = 1
	}
	if r := d.vgpuSetOption(optInline, inline); r != 0 {
		return &CUDAError{Call: "vgpuSetOption(inline)", Code: r}
	}
	return nil
}

// Memcpy measures every path at every size, both directions. report is
// called after each measurement (for progress output).
func (d *Driver) Memcpy(opt MemcpyOptions, report func(Result)) ([]Result, error) {
	if len(opt.Sizes) == 0 {
		return nil, fmt.Errorf("bench: no sizes")
	}
	max := opt.Sizes[len(opt.Sizes)-1]
	var dev uint64
	if err := check("cuMemAlloc", d.cuMemAlloc(&dev, max)); err != nil {
		return nil, err
	}
	defer d.cuMemFree(dev)

	pageable := make([]byte, max)
	for i := range pageable {
		pageable[i] = byte(i*7 + 1)
	}
	var pinnedPtr unsafe.Pointer
	if err := check("cuMemAllocHost", d.cuMemAllocHost(&pinnedPtr, max)); err != nil {
		return nil, err
	}
	defer d.cuMemFreeHost(pinnedPtr)
	pinned := unsafe.Slice((*byte)(pinnedPtr), max)
	copy(pinned, pageable)

	want := map[string]bool{}
	for _, n := range opt.Paths {
		want[n] = true
	}
	var out []Result
	for _, p := range d.Paths() {
		if len(want) > 0 && !want[p.Name] {
			continue
		}
		if err := d.setPath(p); err != nil {
			return out, fmt.Errorf("path %s: %w", p.Name, err)
		}
		host := pageable
		if p.Pinned {
			host = pinned
		}
		measured := 0 // copies measured on this path so far
	sizes:
		for _, size := range opt.Sizes {
			if p.MaxSize != 0 && size > p.MaxSize {
				break
			}
			for _, dir := range []string{"H2D", "D2H"} {
				r, err := d.measure(p.Name, dir, host[:size], dev, opt)
				var ce *CUDAError
				if measured == 0 && errors.As(err, &ce) && ce.Code == 801 {
					// CUDA_ERROR_NOT_SUPPORTED on a path's first copy: this
					// backend has no such engine (the sim has no gather kernel).
					if report != nil {
						report(Result{Path: p.Name + " (not supported by this backend: skipped)", Dir: dir})
					}
					break sizes
				}
				if err != nil {
					return out, fmt.Errorf("path %s %s %d bytes: %w", p.Name, dir, size, err)
				}
				out = append(out, r)
				measured++
				if report != nil {
					report(r)
				}
			}
		}
	}
	_ = d.setPath(Path{})
	return out, nil
}

func (d *Driver) copyOnce(dir string, host []byte, dev uint64) error {
	if dir == "H2D" {
		return check("cuMemcpyHtoD", d.cuMemcpyHtoD(dev, unsafe.Pointer(&host[0]), uint64(len(host))))
	}
	return check("cuMemcpyDtoH", d.cuMemcpyDtoH(unsafe.Pointer(&host[0]), dev, uint64(len(host))))
}

func (d *Driver) measure(path, dir string, host []byte, dev uint64, opt MemcpyOptions) (Result, error) {
	r := Result{Path: path, Dir: dir, Size: uint64(len(host))}
	if err := d.copyOnce(dir, host, dev); err != nil { // warm-up (pins, registers)
		return r, err
	}
	before, haveStats := d.Stats()
	start := time.Now()
	var elapsed time.Duration
	for r.Iters = 0; r.Iters < opt.MaxIter; {
		if err := d.copyOnce(dir, host, dev); err != nil {
			return r, err
		}
		r.Iters++
		if elapsed = time.Since(start); elapsed >= opt.MinTime && r.Iters >= 3 {
			break
		}
	}
	bytes := float64(r.Size) * float64(r.Iters)
	r.GBps = bytes / elapsed.Seconds() / 1e9
	if after, ok := d.Stats(); ok && haveStats {
		var ns, b uint64
		if dir == "H2D" {
			ns, b = after.NanosHtoD-before.NanosHtoD, after.BytesHtoD-before.BytesHtoD
		} else {
			ns, b = after.NanosDtoH-before.NanosDtoH, after.BytesDtoH-before.BytesDtoH
		}
		if ns > 0 {
			r.BackendGBps = float64(b) / float64(ns)
		}
	}
	return r, nil
}
