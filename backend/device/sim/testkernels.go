package sim

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/vgpu-project/vgpu/backend/device"
)

// Test kernels. The sim executes no kernel, except these three, whose
// effect it emulates when the stream reaches their launch: they let tests
// without a GPU check what a sticky error and device printf do to the
// processes of a backend. Their names are unmangled (extern "C") and their
// real bodies (scripts/reliability/isolation.cu) do on a GPU what the sim
// imitates here, so one program checks both. A guest can reach them only
// where the sim device serves it, which is a test device anyway.
const (
	// KernelFaultIllegalAddress(int *p) stores to p (the test passes an
	// unmapped address): CUDA_ERROR_ILLEGAL_ADDRESS (700), sticky.
	KernelFaultIllegalAddress = "vgpu_fault_illegal_address"
	// KernelFaultAssert(int x) runs assert(x == 0) (the test passes 1): the
	// device prints the assertion on stderr and the process gets
	// CUDA_ERROR_ASSERT (710), sticky.
	KernelFaultAssert = "vgpu_fault_assert"
	// KernelPrintfProbe(int tag) prints one line per thread on stdout:
	// "vgpu printf probe: tag T block B thread T\n" (x dimensions).
	KernelPrintfProbe = "vgpu_printf_probe"
)

// maxProbeLines bounds what one emulated printf launch writes.
const maxProbeLines = 4096

// fault is the process's sticky error. With a real driver a sticky error
// poisons every context of the process (bench/results/2026-11-25-h100-probe),
// so the sim keeps one per Driver, shared by its contexts: after a test
// kernel faults, every later call of every context fails with it, and no
// copy, memset or launch queued after it has any effect.
type fault struct{ err atomic.Pointer[device.Error] }

func (f *fault) set(r device.Result, detail string) {
	f.err.CompareAndSwap(nil, &device.Error{Op: "kernel", Result: r, Detail: detail})
}

// broken returns the sticky error, as op's, or nil.
func (c *Context) broken(op string) error {
	if e := c.fault.err.Load(); e != nil {
		return &device.Error{Op: op, Result: e.Result, Detail: e.Detail}
	}
	return nil
}

// healthy reports whether no sticky error has happened.
func (c *Context) healthy() bool { return c.fault.err.Load() == nil }

// testKernel returns the emulation of a test kernel's launch, or nil for
// any other kernel.
func (c *Context) testKernel(name string, cfg device.LaunchConfig, params []byte) func() {
	arg := int32(0)
	if len(params) >= 4 {
		arg = int32(binary.LittleEndian.Uint32(params))
	}
	switch name {
	case KernelFaultIllegalAddress:
		return func() {
			c.fault.set(device.ErrIllegalAddress, "an illegal memory access was encountered (simulated: test kernel "+name+")")
		}
	case KernelFaultAssert:
		return func() {
			if arg == 0 {
				return
			}
			fmt.Fprintf(c.stderr, "vgpu-sim: void %s(int): block: [0,0,0], thread: [0,0,0] Assertion `x == 0` failed.\n", name)
			c.fault.set(device.ErrAssert, "device-side assert triggered (simulated: test kernel "+name+")")
		}
	case KernelPrintfProbe:
		return func() { writeProbe(c.stdout, arg, cfg) }
	}
	return nil
}

func writeProbe(w io.Writer, tag int32, cfg device.LaunchConfig) {
	var b []byte
	n := 0
	for blk := uint32(0); blk < cfg.Grid[0] && n < maxProbeLines; blk++ {
		for th := uint32(0); th < cfg.Block[0] && n < maxProbeLines; th++ {
			b = fmt.Appendf(b, "vgpu printf probe: tag %d block %d thread %d\n", tag, blk, th)
			n++
		}
	}
	_, _ = w.Write(b)
}
