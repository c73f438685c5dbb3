package session_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/backend/session"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/protocol"
)

// fuzzSeeds are byte streams of frames: every bad-input case, and a valid
// conversation touching memory, modules, launches, streams and batches.
func fuzzSeeds() [][]byte {
	var seeds [][]byte
	const p = 0x7f0000000000 // the sim's first allocation
	// A session serves nothing before HELLO: every seed starts with it.
	hello := req(protocol.OpHello, 1<<40, protocol.HelloReq{Major: 1, Features: ^uint64(0)}, nil, nil)
	for i, tc := range badCases {
		seeds = append(seeds, append(append([]byte(nil), hello...), tc.frame(uint64(i+1), p, p+4096, p+8192)...))
	}
	var conv []byte
	add := func(b []byte) { conv = append(conv, b...) }
	add(req(protocol.OpHello, 1, protocol.HelloReq{Major: 1, Features: ^uint64(0)}, nil, nil))
	add(req(protocol.OpMemAlloc, 2, protocol.MemAllocReq{Size: 1 << 16}, nil, nil))
	add(req(protocol.OpMemcpyHtoD, 3, protocol.MemcpyHtoDReq{Dst: p, Src: protocol.BufRef{Kind: protocol.BufInline, Len: 8}}, []byte("12345678"), nil))
	add(req(protocol.OpMemcpyHtoD, 4, protocol.MemcpyHtoDReq{Dst: p, Src: protocol.BufRef{Kind: protocol.BufSegments, Len: 8192}}, nil,
		[]protocol.Segment{{GPA: 4096, Len: 4096}, {GPA: 1 << 32, Len: 4096}}))
	add(req(protocol.OpMemcpyDtoH, 5, protocol.MemcpyDtoHReq{Src: p, Dst: protocol.BufRef{Kind: protocol.BufSegments, Len: 4096}}, nil, []protocol.Segment{{GPA: 0, Len: 4096}}))
	add(req(protocol.OpGuestRegister, 6, protocol.GuestRegisterReq{Flags: protocol.RegisterMapped, Size: 8192}, nil, []protocol.Segment{{GPA: 8192, Len: 8192}}))
	img := []byte(testPTX)
	add(req(protocol.OpModuleLoad, 7, protocol.ModuleLoadReq{Image: protocol.BufRef{Kind: protocol.BufInline, Len: uint64(len(img))}}, img, nil))
	add(req(protocol.OpModuleGetFunction, 8, protocol.NameReq{Module: 0x1002, NameLen: 5}, []byte("saxpy"), nil))
	add(req(protocol.OpLaunchKernel, 9, protocol.LaunchReq{Func: 0x1003, GridX: 1, GridY: 1, GridZ: 1, BlockX: 32, BlockY: 1, BlockZ: 1, ParamSize: 24}, make([]byte, 24), nil))
	add(req(protocol.OpStreamCreate, 10, protocol.StreamCreateReq{}, nil, nil))
	add(req(protocol.OpHostFuncLaunch, 11, protocol.HostFuncReq{Stream: 0x1004, CallbackID: 1}, nil, nil))
	add(req(protocol.OpEventCreate, 12, protocol.EventCreateReq{}, nil, nil))
	sub := protocol.AppendBatchCall(nil, protocol.NewHeader(protocol.OpMemset, 14), protocol.Bytes(&protocol.MemsetReq{Dst: p, Count: 8, ElemSize: 1}))
	add(req(protocol.OpBatch, 13, protocol.BatchReq{Count: 1}, sub, nil))
	sync := protocol.AppendBatchCall(sub, protocol.NewHeader(protocol.OpMemcpyDtoH, 19), protocol.Bytes(&protocol.MemcpyDtoHReq{Src: p, Dst: protocol.BufRef{Kind: protocol.BufInline, Len: 8}}))
	add(req(protocol.OpBatchSync, 18, protocol.BatchReq{Count: 2}, sync, nil))
	add(req(protocol.OpHostFuncDone, 15, protocol.HostFuncDoneReq{CallbackID: 1}, nil, nil))
	// Host mode's shares (no fd can come over this pipe: refused; the
	// hostmode package's FuzzHostShare sends real memfds).
	add(req(protocol.OpHostShare, 16, protocol.HostShareReq{Base: 1 << 40, Size: 4096}, nil, nil))
	add(req(protocol.OpHostUnshare, 17, protocol.HostUnshareReq{Base: 1 << 40}, nil, nil))
	seeds = append(seeds, conv)
	return seeds
}

// FuzzSession feeds arbitrary bytes to a session with a sim device and
// guest RAM in a memfd. It must neither panic nor hang, and every guest
// access goes through guestmem's bounds checks (a stray one would fault).
func FuzzSession(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	drv, err := sim.New(sim.Config{Devices: 2, MemBytes: 64 << 20})
	if err != nil {
		f.Fatal(err)
	}
	table, err := sessiontest.GuestRAM(sessiontest.RegionSpec{GPA: 0, Size: 1 << 20}, sessiontest.RegionSpec{GPA: 1 << 32, Size: 1 << 20})
	if err != nil {
		f.Fatal(err)
	}
	var devs []device.Context
	for i := 0; i < 2; i++ {
		d, _ := drv.Context(i)
		devs = append(devs, d)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		bc, gc := sessiontest.Pipe(3, 1023, table)
		s := session.New(bc, session.Config{Devices: devs, DeviceKind: "sim", Limits: protocol.Limits{MaxPayload: 1 << 20, MaxSegments: 4096}})
		done := make(chan error, 1)
		go func() { done <- s.Serve(context.Background()) }()
		go io.Copy(io.Discard, gc) //nolint:errcheck // drain replies
		_, _ = gc.Write(data)
		gc.Close()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("session did not end after its input ended")
		}
	})
}
