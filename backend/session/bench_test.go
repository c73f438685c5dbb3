package session_test

import (
	"context"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/backend/engine"
	"github.com/vgpu-project/vgpu/backend/session"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/protocol"
)

// nopCopies is a sim context whose copies cost nothing and which claims to
// run kernels, so benchmarks measure the backend's own work per request
// (decode, validation, translation, engine bookkeeping).
type nopCopies struct{ *sim.Context }

func (nopCopies) MemcpyHtoD(device.Ptr, []byte, device.Stream, bool) error { return nil }
func (nopCopies) MemcpyDtoH([]byte, device.Ptr, device.Stream, bool) error { return nil }
func (nopCopies) ExecutesKernels() bool                                    { return true }

func benchSession(b *testing.B, eng engine.Kind, mem bool) (*sessiontest.Client, *session.Stats, func()) {
	c, stats, _, stop := benchSessionOn(b, eng, mem, false)
	return c, stats, stop
}

// benchSessionOn starts a session on nopCopies over net.Pipe or, with
// socket, a unix socket pair (host mode's transport: replies written
// directly).
func benchSessionOn(b testing.TB, eng engine.Kind, mem, socket bool) (*sessiontest.Client, *session.Stats, *session.Session, func()) {
	drv, err := sim.New(sim.Config{MemBytes: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	sc, _ := drv.Context(0)
	var src *sessiontestTable
	bc, gc := sessiontest.Pipe(3, 1023, nil)
	if socket {
		bc, gc, err = sessiontest.SocketPair(3, 1023, nil)
		if err != nil {
			b.Fatal(err)
		}
	}
	if mem {
		t, err := sessiontest.GuestRAM(sessiontest.RegionSpec{GPA: 0, Size: 256 << 20})
		if err != nil {
			b.Fatal(err)
		}
		src = &sessiontestTable{t}
		bc.Mem = t
	}
	stats := &session.Stats{}
	s := session.New(bc, session.Config{Devices: []device.Context{nopCopies{sc.(*sim.Context)}}, DeviceKind: "sim",
		Engine: engine.New(eng, engine.NewRegistry()), Stats: stats})
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background()) }()
	c, err := sessiontest.NewHelloClient(gc)
	if err != nil {
		b.Fatal(err)
	}
	return c, stats, s, func() {
		c.Close()
		<-done
		if src != nil {
			src.t.Release()
		}
		drv.Close()
	}
}

type sessiontestTable struct{ t interface{ Release() } }

// BenchmarkSyncCall is one synchronous memset round trip; "backend-ns/op"
// is the backend's own time per call (the budget is 5 µs), over net.Pipe
// (every reply through the writer goroutine) and over a unix socket pair
// (host mode: the fast path, replies written directly).
func BenchmarkSyncCall(b *testing.B) {
	for _, socket := range []bool{false, true} {
		b.Run(map[bool]string{false: "pipe", true: "socket"}[socket], func(b *testing.B) { benchSyncCall(b, socket) })
	}
}

func benchSyncCall(b *testing.B, socket bool) {
	c, stats, _, stop := benchSessionOn(b, engine.Auto, false, socket)
	defer stop()
	_, rep, _, _ := sessiontest.Do[protocol.MemAllocReq, protocol.PtrReply](c, protocol.OpMemAlloc, &protocol.MemAllocReq{Size: 4096}, nil)
	payload := protocol.Bytes(&protocol.MemsetReq{Dst: rep.Ptr, Count: 64, ElemSize: 4, Value: 7})
	before := stats.Snapshot().Ops["MEMSET"]
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if f, err := c.Call(protocol.OpMemset, 0, payload, nil); err != nil || f.Status != 0 {
			b.Fatal(err, f.Status)
		}
	}
	b.StopTimer()
	after := stats.Snapshot().Ops["MEMSET"]
	b.ReportMetric(float64(after.Nanos-before.Nanos)/float64(b.N), "backend-ns/op")
}

// BenchmarkScatteredPages copies 64 MiB as 16384 scattered 4 KiB pages of
// guest RAM (copies themselves are free): the backend's cost per page.
func BenchmarkScatteredPages(b *testing.B) {
	for _, eng := range []engine.Kind{engine.Direct, engine.Gather} {
		b.Run(eng.String(), func(b *testing.B) {
			c, stats, stop := benchSession(b, eng, true)
			defer stop()
			const pages = 16384
			_, rep, _, _ := sessiontest.Do[protocol.MemAllocReq, protocol.PtrReply](c, protocol.OpMemAlloc, &protocol.MemAllocReq{Size: pages * 4096}, nil)
			segs := make([]protocol.Segment, pages)
			for i := range segs {
				segs[i] = protocol.Segment{GPA: uint64((i*7919)%(2*pages)) * 4096, Len: 4096}
			}
			payload := protocol.Bytes(&protocol.MemcpyHtoDReq{Dst: rep.Ptr, Src: protocol.BufRef{Kind: protocol.BufSegments, Len: pages * 4096}})
			before := stats.Snapshot().Ops["MEMCPY_HTOD"]
			b.SetBytes(pages * 4096)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if f, err := c.Call(protocol.OpMemcpyHtoD, 0, payload, segs); err != nil || f.Status != 0 {
					b.Fatal(err, f.Status)
				}
			}
			b.StopTimer()
			after := stats.Snapshot().Ops["MEMCPY_HTOD"]
			b.ReportMetric(float64(after.Nanos-before.Nanos)/float64(b.N)/pages, "backend-ns/page")
		})
	}
}

// BenchmarkHotPath is the session's own cost per call, without a
// transport: a frame handed to Session.Submit (as a shared-memory ring
// would) runs inline and its reply is built in a pooled buffer. The
// calls are those a training step makes synchronously or in bursts.
func BenchmarkHotPath(b *testing.B) {
	c, _, s, stop := benchSessionOn(b, engine.Auto, false, false)
	defer stop()
	_, rep, _, _ := sessiontest.Do[protocol.MemAllocReq, protocol.PtrReply](c, protocol.OpMemAlloc, &protocol.MemAllocReq{Size: 4096}, nil)
	_, ev, _, _ := sessiontest.Do[protocol.EventCreateReq, protocol.HandleReply](c, protocol.OpEventCreate, &protocol.EventCreateReq{}, nil)
	ptx := []byte(sessiontest.FillPTX)
	_, mod, _, _ := sessiontest.Do[protocol.ModuleLoadReq, protocol.ModuleLoadReply](c, protocol.OpModuleLoad,
		&protocol.ModuleLoadReq{Kind: protocol.ImagePTX, Image: protocol.BufRef{Kind: protocol.BufInline, Len: uint64(len(ptx))}}, ptx)
	_, fn, _, _ := sessiontest.Do[protocol.NameReq, protocol.FunctionReply](c, protocol.OpModuleGetFunction, &protocol.NameReq{Module: mod.Module, NameLen: 4}, []byte("fill"))
	frame := func(op protocol.Opcode, flags protocol.Flags, payload []byte) []byte {
		h := protocol.NewHeader(op, 1)
		h.Flags = flags
		return protocol.AppendFrame(nil, h, payload, nil)
	}
	params := make([]byte, 21)
	launch := append(protocol.Bytes(&protocol.LaunchReq{Func: fn.Func, GridX: 1, GridY: 1, GridZ: 1, BlockX: 32, BlockY: 1, BlockZ: 1, ParamSize: 21}), params...)
	var batch []byte
	for i := 0; i < 64; i++ {
		h := protocol.NewHeader(protocol.OpLaunchKernel, uint64(i+1))
		h.Flags = protocol.FlagNoReply
		batch = protocol.AppendFrame(batch, h, launch, nil)
	}
	for _, t := range []struct {
		name  string
		frame []byte
		per   int // calls per frame
	}{
		{"d2h-4B", frame(protocol.OpMemcpyDtoH, 0, protocol.Bytes(&protocol.MemcpyDtoHReq{Src: rep.Ptr, Dst: protocol.BufRef{Kind: protocol.BufInline, Len: 4}})), 1},
		{"stream-sync", frame(protocol.OpStreamSynchronize, 0, protocol.Bytes(&protocol.HandleReq{})), 1},
		{"event-record", frame(protocol.OpEventRecord, protocol.FlagNoReply, protocol.Bytes(&protocol.EventRecordReq{Event: ev.Handle})), 1},
		{"launch", frame(protocol.OpLaunchKernel, protocol.FlagNoReply, launch), 1},
		{"launch-batched-64", frame(protocol.OpBatch, protocol.FlagNoReply, batch), 64},
	} {
		b.Run(t.name, func(b *testing.B) {
			sink := &countSink{}
			if err := s.Submit(t.frame, sink); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := s.Submit(t.frame, sink); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if t.per > 1 {
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*t.per), "ns/call")
			}
		})
	}
}

type countSink struct{ n int }

func (k *countSink) WriteReply([]byte) error { k.n++; return nil }
