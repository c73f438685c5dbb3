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
	drv, err := sim.New(sim.Config{MemBytes: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	sc, _ := drv.Context(0)
	var src *sessiontestTable
	bc, gc := sessiontest.Pipe(3, 1023, nil)
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
	return c, stats, func() {
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
// is the backend's own time per call (the budget is 5 µs).
func BenchmarkSyncCall(b *testing.B) {
	c, stats, stop := benchSession(b, engine.Auto, false)
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
