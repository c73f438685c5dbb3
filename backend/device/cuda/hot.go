package cuda

import (
	"runtime"

	"github.com/ebitengine/purego"
)

// hotSyms are the driver calls of the per-call hot path, called with
// purego.SyscallN instead of through their RegisterFunc bindings: a bound
// function builds each call's frame by reflection, ~2.6–3.7 µs and 3–7
// allocations per call on the CI machine against ~0.4 µs and one for
// SyscallN (BenchmarkPuregoCall), and every call of this package made two
// (cuCtxSetCurrent first). A zero entry is a symbol the driver lacks: the
// call answers CUDA_ERROR_NOT_SUPPORTED as its stub would.
type hotSyms struct {
	ctxSetCurrent, ctxSynchronize                            uintptr
	memcpyHtoD, memcpyDtoH, memcpyHtoDAsync, memcpyDtoHAsync uintptr
	launchKernel                                             uintptr
	streamSynchronize, streamQuery, streamWaitEvent          uintptr
	eventRecord, eventSynchronize, eventQuery                uintptr
}

func (l *lib) hotSyms() hotSyms {
	return hotSyms{
		ctxSetCurrent: l.syms["cuCtxSetCurrent"], ctxSynchronize: l.syms["cuCtxSynchronize"],
		memcpyHtoD: l.syms["cuMemcpyHtoD"], memcpyDtoH: l.syms["cuMemcpyDtoH"],
		memcpyHtoDAsync: l.syms["cuMemcpyHtoDAsync"], memcpyDtoHAsync: l.syms["cuMemcpyDtoHAsync"],
		launchKernel:      l.syms["cuLaunchKernel"],
		streamSynchronize: l.syms["cuStreamSynchronize"], streamQuery: l.syms["cuStreamQuery"], streamWaitEvent: l.syms["cuStreamWaitEvent"],
		eventRecord: l.syms["cuEventRecord"], eventSynchronize: l.syms["cuEventSynchronize"], eventQuery: l.syms["cuEventQuery"],
	}
}

// sysCall calls the driver function at fn with args (integers, handles
// and pointers as uintptr) and returns its CUresult; fn 0 (absent) answers
// CUDA_ERROR_NOT_SUPPORTED. A pointer argument is converted to uintptr in
// the call expression itself (uintptrescapes: what it points to is kept
// alive, on the heap, for the call).
//
//go:uintptrescapes
func sysCall(fn uintptr, args ...uintptr) int32 {
	if fn == 0 {
		return notSupported
	}
	r, _, _ := purego.SyscallN(fn, args...)
	return int32(r)
}

// enterFast is enter with cuCtxSetCurrent through SyscallN.
func (c *Context) enterFast(op string) error {
	runtime.LockOSThread()
	if r := sysCall(c.l.hot.ctxSetCurrent, c.ctx); r != 0 {
		runtime.UnlockOSThread()
		return c.l.err(op+": cuCtxSetCurrent", r)
	}
	return nil
}

// callN runs the hot driver call fn(args...) with the context current;
// pointers as for sysCall.
//
//go:uintptrescapes
func (c *Context) callN(op string, fn uintptr, args ...uintptr) error {
	if err := c.enterFast(op); err != nil {
		return err
	}
	r := sysCall(fn, args...)
	leave()
	return c.l.err(op, r)
}
