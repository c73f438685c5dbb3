package session_test

import (
	"sync/atomic"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// countingDriver counts the device calls that take guest arguments.
type countingDriver struct {
	*spyDriver
	calls atomic.Int64
}

type countingContext struct {
	device.Context
	n *atomic.Int64
}

func (d *countingDriver) Context(i int) (device.Context, error) {
	c, err := d.spyDriver.Context(i)
	if err != nil {
		return nil, err
	}
	return countingContext{c, &d.calls}, nil
}

func (c countingContext) MemAlloc(n uint64) (device.Ptr, error) {
	c.n.Add(1)
	return c.Context.MemAlloc(n)
}
func (c countingContext) SetLimit(l int, v uint64) error { c.n.Add(1); return c.Context.SetLimit(l, v) }
func (c countingContext) GetLimit(l int) (uint64, error) { c.n.Add(1); return c.Context.GetLimit(l) }
func (c countingContext) StreamCreate(f uint32, p int32) (device.Stream, error) {
	c.n.Add(1)
	return c.Context.StreamCreate(f, p)
}
func (c countingContext) EventCreate(f uint32) (device.Event, error) {
	c.n.Add(1)
	return c.Context.EventCreate(f)
}
func (c countingContext) Launch(f device.Function, cfg device.LaunchConfig, p []byte) error {
	c.n.Add(1)
	return c.Context.Launch(f, cfg, p)
}
func (c countingContext) Memset(d device.Ptr, v uint32, e int, w, h, p uint64, s device.Stream, a bool) error {
	c.n.Add(1)
	return c.Context.Memset(d, v, e, w, h, p, s, a)
}
func (c countingContext) MemcpyDtoD(d, s device.Ptr, n uint64, st device.Stream, a bool) error {
	c.n.Add(1)
	return c.Context.MemcpyDtoD(d, s, n, st, a)
}
func (c countingContext) StreamWaitEvent(s device.Stream, e device.Event, f uint32) error {
	c.n.Add(1)
	return c.Context.StreamWaitEvent(s, e, f)
}
func (c countingContext) EventRecord(e device.Event, s device.Stream) error {
	c.n.Add(1)
	return c.Context.EventRecord(e, s)
}
func (c countingContext) ModuleLoad(b []byte) (device.Module, error) {
	c.n.Add(1)
	return c.Context.ModuleLoad(b)
}

// Every enum, flag set and size of the guest is checked before a device is
// called (issue 20, items 1 and 8): each bad value gets its error and the
// device sees no call at all.
func TestArgumentsCheckedBeforeDevice(t *testing.T) {
	cd := &countingDriver{spyDriver: newSpy(t)}
	e := start(t, opts{drv: cd, exclusive: true})
	fn := e.saxpy()
	p := e.alloc(4096)
	ev, _ := must[protocol.EventCreateReq, protocol.HandleReply](e, protocol.OpEventCreate, protocol.EventCreateReq{}, nil)
	inv, dev, oom := device.ErrInvalidValue, device.ErrInvalidDevice, device.ErrOutOfMemory
	launch := func(mod func(*protocol.LaunchReq)) []byte {
		r := protocol.LaunchReq{Func: fn, GridX: 1, GridY: 1, GridZ: 1, BlockX: 32, BlockY: 1, BlockZ: 1, ParamSize: 24}
		mod(&r)
		return append(protocol.Bytes(&r), make([]byte, 24)...)
	}
	cases := []struct {
		name    string
		op      protocol.Opcode
		payload []byte
		want    device.Result
	}{
		{"set limit: read-only SHMEM_SIZE", protocol.OpDeviceSetLimit, protocol.Bytes(&protocol.LimitReq{Limit: 7, Value: 1}), inv},
		{"set limit: unknown", protocol.OpDeviceSetLimit, protocol.Bytes(&protocol.LimitReq{Limit: 0x7fffffff, Value: 1}), inv},
		{"set limit: stack of 2^63", protocol.OpDeviceSetLimit, protocol.Bytes(&protocol.LimitReq{Limit: 0, Value: 1 << 63}), inv},
		{"set limit: malloc heap past the device", protocol.OpDeviceSetLimit, protocol.Bytes(&protocol.LimitReq{Limit: 2, Value: 1 << 40}), inv},
		{"set limit: L2 fetch 48", protocol.OpDeviceSetLimit, protocol.Bytes(&protocol.LimitReq{Limit: 5, Value: 48}), inv},
		{"set limit: device 9", protocol.OpDeviceSetLimit, protocol.Bytes(&protocol.LimitReq{Device: 9, Limit: 0, Value: 1024}), dev},
		{"get limit: unknown", protocol.OpDeviceGetLimit, protocol.Bytes(&protocol.LimitReq{Limit: 99}), inv},
		{"alloc: flags", protocol.OpMemAlloc, protocol.Bytes(&protocol.MemAllocReq{Flags: 1, Size: 64}), inv},
		{"alloc: 2^64-1 bytes", protocol.OpMemAlloc, protocol.Bytes(&protocol.MemAllocReq{Size: ^uint64(0)}), oom},
		{"alloc: device 2^32-1", protocol.OpMemAlloc, protocol.Bytes(&protocol.MemAllocReq{Device: ^uint32(0), Size: 64}), dev},
		{"dtod: flags", protocol.OpMemcpyDtoD, protocol.Bytes(&protocol.MemcpyDtoDReq{Dst: p, Src: p, Size: 8, Flags: 6}), inv},
		{"dtod: 2^63 bytes", protocol.OpMemcpyDtoD, protocol.Bytes(&protocol.MemcpyDtoDReq{Dst: p, Src: p, Size: 1 << 63}), inv},
		{"memset: element size 3", protocol.OpMemset, protocol.Bytes(&protocol.MemsetReq{Dst: p, Count: 1, ElemSize: 3}), inv},
		{"memset: element size 2^32-1", protocol.OpMemset, protocol.Bytes(&protocol.MemsetReq{Dst: p, Count: 1, ElemSize: ^uint32(0)}), inv},
		{"memset: value wider than a byte", protocol.OpMemset, protocol.Bytes(&protocol.MemsetReq{Dst: p, Count: 1, ElemSize: 1, Value: 0x100}), inv},
		{"memset: flags", protocol.OpMemset, protocol.Bytes(&protocol.MemsetReq{Dst: p, Count: 1, ElemSize: 1, Flags: 0x80000000}), inv},
		{"memset: 2^63 rows", protocol.OpMemset, protocol.Bytes(&protocol.MemsetReq{Dst: p, Count: 1, ElemSize: 1, Height: 1 << 63, Pitch: 1}), inv},
		{"htod: buffer kind 7", protocol.OpMemcpyHtoD, protocol.Bytes(&protocol.MemcpyHtoDReq{Dst: p, Src: protocol.BufRef{Kind: 7, Len: 8}}), inv},
		{"htod: 2^64-1 bytes", protocol.OpMemcpyHtoD, protocol.Bytes(&protocol.MemcpyHtoDReq{Dst: p, Src: protocol.BufRef{Kind: protocol.BufRegion, Len: ^uint64(0)}}), inv},
		{"dtoh: buffer kind none", protocol.OpMemcpyDtoH, protocol.Bytes(&protocol.MemcpyDtoHReq{Src: p, Dst: protocol.BufRef{Kind: protocol.BufNone, Len: 8}}), inv},
		{"module: kind 4", protocol.OpModuleLoad, protocol.Bytes(&protocol.ModuleLoadReq{Kind: 4, Image: protocol.BufRef{Kind: protocol.BufInline, Len: 1}}), inv},
		{"module: flags", protocol.OpModuleLoad, protocol.Bytes(&protocol.ModuleLoadReq{Flags: 1}), inv},
		{"module: 2^40 bytes", protocol.OpModuleLoad, protocol.Bytes(&protocol.ModuleLoadReq{Image: protocol.BufRef{Kind: protocol.BufRegion, Len: 1 << 40}}), inv},
		{"get function: NUL in the name", protocol.OpModuleGetFunction, append(protocol.Bytes(&protocol.NameReq{Module: 1, NameLen: 5}), "sa\x00py\x00\x00\x00"...), inv},
		{"occupancy: block 2^31", protocol.OpOccupancyMaxBlocks, protocol.Bytes(&protocol.OccupancyReq{Func: fn, BlockSize: 1 << 31}), inv},
		{"occupancy: block 2048", protocol.OpOccupancyMaxBlocks, protocol.Bytes(&protocol.OccupancyReq{Func: fn, BlockSize: 2048}), inv},
		{"launch: grid x 0", protocol.OpLaunchKernel, launch(func(r *protocol.LaunchReq) { r.GridX = 0 }), inv},
		{"launch: grid y 2^32-1", protocol.OpLaunchKernel, launch(func(r *protocol.LaunchReq) { r.GridY = ^uint32(0) }), inv},
		{"launch: block 1024x2", protocol.OpLaunchKernel, launch(func(r *protocol.LaunchReq) { r.BlockX, r.BlockY = 1024, 2 }), inv},
		{"launch: block z 65", protocol.OpLaunchKernel, launch(func(r *protocol.LaunchReq) { r.BlockZ = 65 }), inv},
		{"launch: 2^31 bytes of shared memory", protocol.OpLaunchKernel, launch(func(r *protocol.LaunchReq) { r.SharedMem = 1 << 31 }), inv},
		{"launch: parameter block of 2^32-1", protocol.OpLaunchKernel, launch(func(r *protocol.LaunchReq) { r.ParamSize = ^uint32(0) }), inv},
		{"stream: flags 2", protocol.OpStreamCreate, protocol.Bytes(&protocol.StreamCreateReq{Flags: 2}), inv},
		{"stream: device 1", protocol.OpStreamCreate, protocol.Bytes(&protocol.StreamCreateReq{Device: 1}), dev},
		{"event: flags 8", protocol.OpEventCreate, protocol.Bytes(&protocol.EventCreateReq{Flags: 8}), inv},
		{"event: interprocess with timing", protocol.OpEventCreate, protocol.Bytes(&protocol.EventCreateReq{Flags: 4}), inv},
		{"event record: flags 2", protocol.OpEventRecord, protocol.Bytes(&protocol.EventRecordReq{Event: ev.Handle, Flags: 2}), inv},
		{"stream wait: flags 0x7fffffff", protocol.OpStreamWaitEvent, protocol.Bytes(&protocol.StreamWaitEventReq{Event: ev.Handle, Flags: 0x7fffffff}), inv},
		{"set option: engine 9", protocol.OpSetOption, protocol.Bytes(&protocol.SetOptionReq{Key: protocol.OptionCopyEngine, Value: 9}), inv},
		{"batch of 0 calls", protocol.OpBatch, protocol.Bytes(&protocol.BatchReq{}), inv},
		{"device info: device 2^31", protocol.OpDeviceGetInfo, protocol.Bytes(&protocol.DeviceReq{Device: 1 << 31}), dev},
	}
	for _, tc := range cases {
		before := cd.calls.Load()
		f, err := e.c.Call(tc.op, 0, tc.payload, nil)
		if err != nil {
			t.Fatal(err)
		}
		if device.Result(f.Status) != tc.want {
			t.Errorf("%s: status %v, want %v", tc.name, device.Result(f.Status), tc.want)
		}
		if n := cd.calls.Load() - before; n != 0 {
			t.Errorf("%s: %d device calls were made", tc.name, n)
		}
	}
	// The same calls with good values reach the device.
	before := cd.calls.Load()
	must[protocol.LimitReq, protocol.Empty](e, protocol.OpDeviceSetLimit, protocol.LimitReq{Limit: 0, Value: 2048}, nil)
	must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{Flags: 1, Priority: -1 << 31}, nil)
	must[protocol.EventCreateReq, protocol.HandleReply](e, protocol.OpEventCreate, protocol.EventCreateReq{Flags: 6}, nil)
	must[protocol.MemsetReq, protocol.Empty](e, protocol.OpMemset, protocol.MemsetReq{Dst: p, Count: 2, ElemSize: 2, Value: 0xffff}, nil)
	if f, _ := e.c.Call(protocol.OpLaunchKernel, 0, launch(func(*protocol.LaunchReq) {}), nil); f.Status != 0 {
		t.Fatalf("a good launch: %v", device.Result(f.Status))
	}
	if n := cd.calls.Load() - before; n < 5 {
		t.Fatalf("good calls made %d device calls", n)
	}
	e.ping()
}
