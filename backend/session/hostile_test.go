package session_test

import (
	"sync/atomic"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/protocol"
)

// spyDriver wraps the sim driver so a test can see which device calls a
// session makes, and make one of them panic.
type spyDriver struct {
	device.Driver
	setAttr    atomic.Int64 // FuncSetAttribute calls that reached the device
	occupancy  atomic.Int64 // OccupancyMaxBlocks calls that reached the device
	panicMem   atomic.Bool  // MemGetInfo panics
	eventsGone atomic.Int64 // EventDestroy calls that reached the device
}

type spyContext struct {
	device.Context
	d *spyDriver
}

func (d *spyDriver) Context(i int) (device.Context, error) {
	c, err := d.Driver.Context(i)
	if err != nil {
		return nil, err
	}
	return spyContext{c, d}, nil
}

func (c spyContext) FuncSetAttribute(f device.Function, attr int, v int32) error {
	c.d.setAttr.Add(1)
	return c.Context.FuncSetAttribute(f, attr, v)
}

func (c spyContext) OccupancyMaxBlocks(f device.Function, block int, smem uint64, flags uint32) (int32, error) {
	c.d.occupancy.Add(1)
	return c.Context.OccupancyMaxBlocks(f, block, smem, flags)
}

func (c spyContext) MemGetInfo() (uint64, uint64, error) {
	if c.d.panicMem.Load() {
		panic("spyContext: injected panic")
	}
	return c.Context.MemGetInfo()
}

func (c spyContext) EventDestroy(e device.Event) error {
	c.d.eventsGone.Add(1)
	return c.Context.EventDestroy(e)
}

func newSpy(t *testing.T) *spyDriver {
	t.Helper()
	d, err := sim.New(sim.Config{Devices: 1, MemBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return &spyDriver{Driver: d}
}

// saxpy loads testPTX and returns its saxpy function's handle.
func (e *env) saxpy() uint64 {
	e.t.Helper()
	img := []byte(testPTX)
	req := protocol.ModuleLoadReq{Kind: protocol.ImagePTX, Image: protocol.BufRef{Kind: protocol.BufInline, Len: uint64(len(img))}}
	mod, _ := must[protocol.ModuleLoadReq, protocol.ModuleLoadReply](e, protocol.OpModuleLoad, req, img)
	fn, _ := must[protocol.NameReq, protocol.FunctionReply](e, protocol.OpModuleGetFunction, protocol.NameReq{Module: mod.Module, NameLen: 5}, []byte("saxpy"))
	return fn.Func
}

// The hostile client's crash through the driver (issue 20, item 8): an
// attribute outside the enum reached cuFuncSetAttribute, and libcuda
// segfaulted. Such values must never reach a device.
func TestFuncSetAttributeValidatedBeforeDevice(t *testing.T) {
	spy := newSpy(t)
	e := start(t, opts{drv: spy})
	fn := e.saxpy()
	bad := []protocol.FuncSetAttributeReq{
		{Func: fn, Attr: 0x7fffffff, Value: 1},
		{Func: fn, Attr: 0xffffffff, Value: 0},
		{Func: fn, Attr: 0, Value: 1},  // MAX_THREADS_PER_BLOCK: read-only
		{Func: fn, Attr: 10, Value: 1}, // CLUSTER_SIZE_MUST_BE_SET: read-only
		{Func: fn, Attr: 8, Value: -1},
		{Func: fn, Attr: 8, Value: 1 << 30},
		{Func: fn, Attr: 9, Value: 101},
		{Func: fn, Attr: 9, Value: -2},
		{Func: fn, Attr: 14, Value: 2},
		{Func: fn, Attr: 15, Value: 7},
	}
	for _, r := range bad {
		st, _, _ := do[protocol.FuncSetAttributeReq, protocol.Empty](e, protocol.OpFuncSetAttribute, r, nil)
		wantStatus(t, "bad attribute", st, device.ErrInvalidValue)
	}
	if n := spy.setAttr.Load(); n != 0 {
		t.Fatalf("%d invalid attribute calls reached the device", n)
	}
	for _, r := range []protocol.FuncSetAttributeReq{{Func: fn, Attr: 8, Value: 48 << 10}, {Func: fn, Attr: 9, Value: 50}, {Func: fn, Attr: 9, Value: -1}} {
		st, _, _ := do[protocol.FuncSetAttributeReq, protocol.Empty](e, protocol.OpFuncSetAttribute, r, nil)
		wantStatus(t, "valid attribute", st, device.Success)
	}
	e.ping()
}

// The hostile client's first crash (issue 20, item 1): a dynamic shared
// memory size near 2^64 made the sim device divide by zero and took the
// whole process down. The exact request: block 128, 0xfffffffffffffc00.
func TestOccupancyHugeDynamicSharedMemory(t *testing.T) {
	spy := newSpy(t)
	e := start(t, opts{drv: spy})
	fn := e.saxpy()
	for _, smem := range []uint64{0xfffffffffffffc00, ^uint64(0), 1 << 63, 1 << 32, 228<<10 + 1} {
		st, rep, _ := do[protocol.OccupancyReq, protocol.OccupancyReply](e, protocol.OpOccupancyMaxBlocks, protocol.OccupancyReq{Func: fn, BlockSize: 128, DynSmem: smem}, nil)
		wantStatus(t, "huge dynamic shared memory", st, device.Success)
		if rep.NumBlocks != 0 {
			t.Fatalf("dynamic shared memory %#x: %d blocks, want 0", smem, rep.NumBlocks)
		}
	}
	if n := spy.occupancy.Load(); n != 0 {
		t.Fatalf("%d oversized requests reached the device", n)
	}
	st, _, _ := do[protocol.OccupancyReq, protocol.OccupancyReply](e, protocol.OpOccupancyMaxBlocks, protocol.OccupancyReq{Func: fn, BlockSize: 128, Flags: 2}, nil)
	wantStatus(t, "unknown occupancy flag", st, device.ErrInvalidValue)
	st, rep, _ := do[protocol.OccupancyReq, protocol.OccupancyReply](e, protocol.OpOccupancyMaxBlocks, protocol.OccupancyReq{Func: fn, BlockSize: 128, DynSmem: 1024}, nil)
	wantStatus(t, "ordinary occupancy", st, device.Success)
	if rep.NumBlocks <= 0 {
		t.Fatalf("ordinary occupancy: %d blocks", rep.NumBlocks)
	}
	// The sim device itself must not divide by zero either.
	ctx, _ := spy.Driver.Context(0)
	if n, err := ctx.OccupancyMaxBlocks(0, 128, 0xfffffffffffffc00, 0); err == nil && n != 0 {
		t.Fatalf("sim occupancy with a huge size: %d", n)
	}
}

// A panic inside a handler or a device ends that session's work, not the
// process: the call gets CUDA_ERROR_UNKNOWN, later calls too (the session's
// state is no longer trusted), the panic is counted, the process is told
// (OnStickyError), and other sessions keep working.
func TestRecoverBoundary(t *testing.T) {
	spy := newSpy(t)
	var sticky atomic.Int64
	e := start(t, opts{drv: spy, onSticky: func(error) { sticky.Add(1) }})
	p := e.alloc(4096)
	spy.panicMem.Store(true)
	st, _, _ := do[protocol.DeviceReq, protocol.MemInfoReply](e, protocol.OpMemGetInfo, protocol.DeviceReq{}, nil)
	wantStatus(t, "panicking call", st, device.ErrUnknown)
	spy.panicMem.Store(false)
	wantStatus(t, "a later call", e.htod(p, []byte("x")), device.ErrUnknown)
	st, _, _ = do[protocol.DeviceReq, protocol.MemInfoReply](e, protocol.OpMemGetInfo, protocol.DeviceReq{}, nil)
	wantStatus(t, "the same call again", st, device.ErrUnknown)
	if got := e.stats.Snapshot().Panics; got != 1 {
		t.Fatalf("panics counted: %d, want 1", got)
	}
	if got := sticky.Load(); got != 1 {
		t.Fatalf("OnStickyError called %d times, want 1", got)
	}
	// A sibling session of the same process (same driver) is unaffected.
	other := start(t, opts{drv: spy})
	q := other.alloc(4096)
	if st := other.htod(q, []byte("fine")); st != 0 {
		t.Fatalf("sibling session: %v", device.Result(st))
	}
	other.ping()
}
