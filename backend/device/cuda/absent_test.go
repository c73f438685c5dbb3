package cuda

import (
	"errors"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
)

// TestAbsentSymbolsAnswer801 runs everywhere (no driver needed): a driver
// library that lacks every optional entry point (each one stubbed as load
// does) answers every Context method with CUDA_ERROR_NOT_SUPPORTED (801) or
// another error, never a nil call. Only cuCtxSetCurrent, which load
// requires, is real here.
func TestAbsentSymbolsAnswer801(t *testing.T) {
	l := &lib{version: 13000}
	l.stubAbsent()
	if len(l.absent) != len(l.entryPoints()) {
		t.Fatalf("%d of %d entry points stubbed", len(l.absent), len(l.entryPoints()))
	}
	l.cuCtxSetCurrent = func(uintptr) int32 { return 0 }
	c := newContext(&Driver{l: l}, 0, 0, 1)
	var ctx device.Context = c
	buf := make([]byte, 64)
	img := []byte(".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\nret;\n}\n")
	calls := map[string]func() error{
		"Properties": func() error { _, err := ctx.Properties(); return err },
		"MemAlloc":   func() error { _, err := ctx.MemAlloc(64); return err },
		"MemFree":    func() error { return ctx.MemFree(0x1000) },
		"MemGetInfo": func() error { _, _, err := ctx.MemGetInfo(); return err },
		"MemcpyHtoD": func() error { return ctx.MemcpyHtoD(0x1000, buf, 0, false) },
		"MemcpyHtoDAsync": func() error {
			return ctx.MemcpyHtoD(0x1000, buf, 0, true)
		},
		"MemcpyDtoH":      func() error { return ctx.MemcpyDtoH(buf, 0x1000, 0, false) },
		"MemcpyDtoHAsync": func() error { return ctx.MemcpyDtoH(buf, 0x1000, 0, true) },
		"MemcpyDtoD":      func() error { return ctx.MemcpyDtoD(0x1000, 0x2000, 64, 0, false) },
		"MemcpyDtoDAsync": func() error { return ctx.MemcpyDtoD(0x1000, 0x2000, 64, 0, true) },
		"Memset1":         func() error { return ctx.Memset(0x1000, 1, 1, 64, 1, 0, 0, false) },
		"Memset2Async":    func() error { return ctx.Memset(0x1000, 1, 2, 32, 1, 0, 0, true) },
		"Memset4x2D":      func() error { return ctx.Memset(0x1000, 1, 4, 4, 4, 64, 0, false) },
		"Memset1x2DAsync": func() error { return ctx.Memset(0x1000, 1, 1, 4, 4, 64, 0, true) },
		"HostRegister":    func() error { _, err := ctx.HostRegister(buf, false); return err },
		"HostUnregister":  func() error { return ctx.HostUnregister(buf) },
		"ModuleLoad":      func() error { _, err := ctx.ModuleLoad(img); return err },
		"ModuleUnload":    func() error { return ctx.ModuleUnload(1) },
		"ModuleGetFunction": func() error {
			_, err := ctx.ModuleGetFunction(1, "k")
			return err
		},
		"ModuleGetGlobal": func() error { _, _, err := ctx.ModuleGetGlobal(1, "g"); return err },
		"FuncParams":      func() error { _, err := ctx.FuncParams(1); return err },
		"FuncGetAttribute": func() error {
			_, err := ctx.FuncGetAttribute(1, 0)
			return err
		},
		"FuncSetAttribute":   func() error { return ctx.FuncSetAttribute(1, 8, 0) },
		"OccupancyMaxBlocks": func() error { _, err := ctx.OccupancyMaxBlocks(1, 32, 0, 0); return err },
		"OccupancyMaxClusters": func() error {
			_, err := ctx.OccupancyMaxClusters(1, device.LaunchConfig{Grid: [3]uint32{2, 1, 1}, Block: [3]uint32{32, 1, 1}, Cluster: [3]uint32{2, 1, 1}})
			return err
		},
		"LaunchCluster": func() error {
			return ctx.Launch(1, device.LaunchConfig{Grid: [3]uint32{2, 1, 1}, Block: [3]uint32{1, 1, 1}, Cluster: [3]uint32{2, 1, 1}}, nil)
		},
		"MemGetGranularity":   func() error { _, err := ctx.MemGetGranularity(device.AllocProp{Type: 1}, 0); return err },
		"ModuleFunctionNames": func() error { _, err := ctx.ModuleFunctionNames(1); return err },
		"Launch": func() error {
			return ctx.Launch(1, device.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}, nil)
		},
		"StreamCreate":      func() error { _, err := ctx.StreamCreate(0, 0); return err },
		"StreamDestroy":     func() error { return ctx.StreamDestroy(1) },
		"StreamSynchronize": func() error { return ctx.StreamSynchronize(1) },
		"StreamQuery":       func() error { return ctx.StreamQuery(1) },
		"StreamWaitEvent":   func() error { return ctx.StreamWaitEvent(1, 1, 0) },
		"EventCreate":       func() error { _, err := ctx.EventCreate(0); return err },
		"EventDestroy":      func() error { return ctx.EventDestroy(1) },
		"EventRecord":       func() error { return ctx.EventRecord(1, 0) },
		"EventSynchronize":  func() error { return ctx.EventSynchronize(1) },
		"EventQuery":        func() error { return ctx.EventQuery(1) },
		"EventElapsed":      func() error { _, err := ctx.EventElapsed(1, 2); return err },
		"LaunchHostFunc":    func() error { return ctx.LaunchHostFunc(0, func() {}) },
		"SetLimit":          func() error { return ctx.SetLimit(0, 1024) },
		"GetLimit":          func() error { _, err := ctx.GetLimit(0); return err },
		"Synchronize":       func() error { return ctx.Synchronize() },
		"Reset":             func() error { return ctx.Reset() },
	}
	for name, call := range calls {
		err := call()
		if err == nil {
			t.Errorf("%s: no error from a driver without the entry point", name)
			continue
		}
		if r := device.ResultOf(err); r != device.ErrNotSupported {
			t.Errorf("%s: %v (%v), want CUDA_ERROR_NOT_SUPPORTED", name, r, err)
		}
	}
	d := &Driver{l: l, ctxs: map[int]*Context{0: c}}
	if err := d.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if !errors.Is(missing("x"), device.NotSupported) {
		t.Error("missing() is not CUDA_ERROR_NOT_SUPPORTED")
	}
}
