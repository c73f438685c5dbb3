package bench

import (
	"time"
	"unsafe"
)

// nullKernelPTX is an empty kernel; the driver JIT-compiles it for the GPU.
const nullKernelPTX = `.version 7.0
.target sm_52
.address_size 64
.visible .entry vgpu_null_kernel()
{
	ret;
}
` + "\x00"

// CallResult is one latency or rate measurement.
type CallResult struct {
	Name      string
	Count     int
	PerCallUS float64 // microseconds per call as the program sees it
	BackendUS float64 // the backend's own time per call (vgpu only; 0 if unknown)
	// Layers is where each call's time went, when the backend traces
	// (vgpu serve --trace); nil otherwise.
	Layers *Layers
	// Waits is how the library waited for this measurement's replies on
	// the rings (VGPU_STATS=1); nil when it counted none.
	Waits *Waits
}

// Waits is one measurement's waits on the rings, from the library's
// counters: replies waited for per program call, the share of them the
// caller slept for (its spin ended first), and per reply the microseconds
// from request written to reply handed over by the library's reader
// thread (the backend, both transports, the reader's wake-up and read) and
// from hand-over to the caller running; the reader thread's sleeps and the
// doorbells the library rang, per program call; the share of replies their
// caller read from the ring itself.
type Waits struct {
	PerCall, SleptShare, ReplyUS, HandoffUS, ReaderSleeps, Bells, OwnShare float64
}

func waits(before, after WaitStats, calls int) *Waits {
	n := after.Waits - before.Waits
	if n == 0 || calls == 0 {
		return nil
	}
	return &Waits{PerCall: float64(n) / float64(calls), SleptShare: float64(after.Slept-before.Slept) / float64(n),
		ReplyUS:      float64(after.NanosReply-before.NanosReply) / 1e3 / float64(n),
		HandoffUS:    float64(after.NanosHandoff-before.NanosHandoff) / 1e3 / float64(n),
		ReaderSleeps: float64(after.ReaderSleeps-before.ReaderSleeps) / float64(calls),
		Bells:        float64(after.Bells-before.Bells) / float64(calls),
		OwnShare:     float64(after.Own-before.Own) / float64(n)}
}

// Layers is one measurement's time per program call in each layer the
// backend stamps (microseconds, averaged over the calls: a launch batched
// with 999 others carries a thousandth of its frame). Rest is what the
// backend did not see: the library (encoding, batching, waiting), the
// transport both ways (socket or vsock, the guest kernel) and, in a guest,
// the guest's own emulation.
type Layers struct {
	FramesPerCall                                    float64
	ReadUS, QueuedUS, ValidateUS, HandlerUS, ReplyUS float64
	RestUS                                           float64
}

// layers computes a measurement's breakdown from the stats before and
// after it; nil when nothing was traced.
func layers(before, after BackendStats, calls int, perCallUS float64) *Layers {
	n := after.Traced - before.Traced
	if n == 0 || calls == 0 {
		return nil
	}
	per := func(a, b uint64) float64 { return float64(b-a) / 1e3 / float64(calls) }
	l := &Layers{FramesPerCall: float64(n) / float64(calls),
		ReadUS: per(before.NanosRead, after.NanosRead), QueuedUS: per(before.NanosQueued, after.NanosQueued),
		ValidateUS: per(before.NanosValidate, after.NanosValidate), HandlerUS: per(before.NanosHandler, after.NanosHandler),
		ReplyUS: per(before.NanosReply, after.NanosReply)}
	l.RestUS = perCallUS - l.BackendUS()
	return l
}

// BackendUS is the layers' sum: the backend's time per call, from a
// frame's first byte to its reply written.
func (l *Layers) BackendUS() float64 {
	return l.ReadUS + l.QueuedUS + l.ValidateUS + l.HandlerUS + l.ReplyUS
}

// Calls measures the async null-kernel launch rate, launch+synchronize
// latency and 4-byte D2H copy latency.
func (d *Driver) Calls(minTime time.Duration) ([]CallResult, error) {
	var mod, fn uintptr
	ptx := []byte(nullKernelPTX)
	if err := check("cuModuleLoadData", d.cuModuleLoadData(&mod, &ptx[0])); err != nil {
		return nil, err
	}
	name := []byte("vgpu_null_kernel\x00")
	if err := check("cuModuleGetFunction", d.cuModuleGetFunction(&fn, mod, &name[0])); err != nil {
		return nil, err
	}
	launch := func() error {
		return check("cuLaunchKernel", d.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, 0, nil, nil))
	}
	var dev uint64
	if err := check("cuMemAlloc", d.cuMemAlloc(&dev, 4)); err != nil {
		return nil, err
	}
	defer d.cuMemFree(dev)
	var word [4]byte

	tests := []struct {
		name  string
		batch int // calls per timed step
		step  func() error
	}{
		{"launch-async", 1000, func() error {
			for i := 0; i < 1000; i++ {
				if err := launch(); err != nil {
					return err
				}
			}
			return check("cuCtxSynchronize", d.cuCtxSynchronize())
		}},
		{"launch+sync", 1, func() error {
			if err := launch(); err != nil {
				return err
			}
			return check("cuCtxSynchronize", d.cuCtxSynchronize())
		}},
		{"d2h-4B", 1, func() error {
			return check("cuMemcpyDtoH", d.cuMemcpyDtoH(unsafe.Pointer(&word[0]), dev, 4))
		}},
	}
	var out []CallResult
	for _, t := range tests {
		if err := t.step(); err != nil { // warm-up
			return out, err
		}
		before, haveStats := d.Stats()
		wBefore, haveWaits := d.Waits()
		start := time.Now()
		steps := 0
		for time.Since(start) < minTime || steps < 3 {
			if err := t.step(); err != nil {
				return out, err
			}
			steps++
		}
		el := time.Since(start)
		r := CallResult{Name: t.name, Count: steps * t.batch}
		r.PerCallUS = el.Seconds() * 1e6 / float64(r.Count)
		if after, ok := d.Stats(); ok && haveStats && after.Calls > before.Calls {
			r.BackendUS = float64(after.NanosInCall-before.NanosInCall) / 1e3 / float64(after.Calls-before.Calls)
			r.Layers = layers(before, after, r.Count, r.PerCallUS)
		}
		if wAfter, ok := d.Waits(); ok && haveWaits {
			r.Waits = waits(wBefore, wAfter, r.Count)
		}
		out = append(out, r)
	}
	return out, nil
}
