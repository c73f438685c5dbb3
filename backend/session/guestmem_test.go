package session_test

import (
	"bytes"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// guestFill writes a pattern into guest RAM at gpa.
func (e *env) guestFill(gpa, n uint64, seed byte) []byte {
	e.t.Helper()
	b, err := e.table.Slice(guestGPA(gpa), n)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := range b {
		b[i] = byte(i*31) ^ seed
	}
	return append([]byte(nil), b...)
}

func (e *env) guestRead(gpa, n uint64) []byte {
	e.t.Helper()
	b, err := e.table.Slice(guestGPA(gpa), n)
	if err != nil {
		e.t.Fatal(err)
	}
	return append([]byte(nil), b...)
}

// scattered returns segments of page-sized pieces in a scrambled order
// across both regions, and their total length.
func scattered(pages int) ([]protocol.Segment, uint64) {
	var segs []protocol.Segment
	for i := 0; i < pages; i++ {
		base := uint64(1 << 32)
		if i%3 == 0 {
			base = 0
		}
		segs = append(segs, protocol.Segment{GPA: base + uint64((i*7)%64)*4096, Len: 4096})
	}
	return segs, uint64(pages) * 4096
}

func TestSegmentsCopyAllEngines(t *testing.T) {
	for _, eng := range []uint64{protocol.EngineAuto, protocol.EngineRuns, protocol.EngineStaging} {
		e := start(t, opts{mem: true, allowAll: true})
		if eng != protocol.EngineAuto {
			must[protocol.SetOptionReq, protocol.Empty](e, protocol.OpSetOption, protocol.SetOptionReq{Key: protocol.OptionCopyEngine, Value: eng}, nil)
		}
		segs, n := scattered(20)
		segs = segs[:10] // distinct pages (i*7 mod 64 repeats only after 64)
		n = 10 * 4096
		var want []byte
		for _, s := range segs {
			want = append(want, e.guestFill(s.GPA, s.Len, byte(eng))...)
		}
		p := e.alloc(n)
		st, _, _, err := sessiontestDoSegs[protocol.MemcpyHtoDReq, protocol.Empty](e, protocol.OpMemcpyHtoD,
			protocol.MemcpyHtoDReq{Dst: p, Src: protocol.BufRef{Kind: protocol.BufSegments, Len: n}}, segs)
		if err != nil || st != 0 {
			t.Fatalf("engine %d: htod with segments: %v status %v", eng, err, device.Result(st))
		}
		_, got := e.dtoh(p, n)
		if !bytes.Equal(got, want) {
			t.Fatalf("engine %d: device bytes differ from the scattered guest pages", eng)
		}
		// And back, into other pages.
		back := []protocol.Segment{{GPA: 1<<32 + 1<<20, Len: n / 2}, {GPA: 512 << 10, Len: n / 2}}
		st, _, _, err = sessiontestDoSegs[protocol.MemcpyDtoHReq, protocol.Empty](e, protocol.OpMemcpyDtoH,
			protocol.MemcpyDtoHReq{Src: p, Dst: protocol.BufRef{Kind: protocol.BufSegments, Len: n}}, back)
		if err != nil || st != 0 {
			t.Fatalf("engine %d: dtoh with segments: %v status %v", eng, err, device.Result(st))
		}
		got = append(e.guestRead(back[0].GPA, n/2), e.guestRead(back[1].GPA, n/2)...)
		if !bytes.Equal(got, want) {
			t.Fatalf("engine %d: guest bytes differ after dtoh", eng)
		}
		e.close()
	}
}

func TestSegmentContinuation(t *testing.T) {
	e := start(t, opts{mem: true, allowAll: true})
	segs, n := scattered(30)
	segs, n = segs[:30], 30*4096
	var want []byte
	for _, s := range segs {
		b := e.guestRead(s.GPA, s.Len)
		want = append(want, b...)
	}
	p := e.alloc(n)
	id := e.c.ID()
	ch := e.c.Expect(id)
	req := protocol.MemcpyHtoDReq{Dst: p, Src: protocol.BufRef{Kind: protocol.BufSegments, Len: n}}
	h := protocol.NewHeader(protocol.OpMemcpyHtoD, id)
	h.Flags = protocol.FlagMoreSegments
	frames := protocol.AppendFrame(nil, h, protocol.Bytes(&req), segs[:10])
	h2 := protocol.NewHeader(protocol.OpSegments, id)
	h2.Flags = protocol.FlagMoreSegments
	frames = protocol.AppendFrame(frames, h2, nil, segs[10:20])
	h3 := protocol.NewHeader(protocol.OpSegments, id)
	frames = protocol.AppendFrame(frames, h3, nil, segs[20:])
	if err := e.c.Send(frames); err != nil {
		t.Fatal(err)
	}
	f, err := waitReply(ch)
	if err != nil || f.Status != 0 {
		t.Fatalf("continued call: %v %v", err, device.Result(f.Status))
	}
	_, got := e.dtoh(p, n)
	if !bytes.Equal(got, want) {
		t.Fatal("continued segment list copied the wrong bytes")
	}
}

func TestGuestRegister(t *testing.T) {
	e := start(t, opts{mem: true, allowAll: true})
	segs := []protocol.Segment{{GPA: 1<<32 + 8192, Len: 8192}, {GPA: 4096, Len: 4096}, {GPA: 1<<32 + 65536, Len: 4096}}
	var want []byte
	for i, s := range segs {
		want = append(want, e.guestFill(s.GPA, s.Len, byte(i+1))...)
	}
	for _, flags := range []uint32{0, protocol.RegisterMapped} {
		st, reg, _, err := sessiontestDoSegs[protocol.GuestRegisterReq, protocol.GuestRegisterReply](e, protocol.OpGuestRegister,
			protocol.GuestRegisterReq{Flags: flags, Size: 16384}, segs)
		if err != nil || st != 0 {
			t.Fatalf("register flags %d: %v %v", flags, err, device.Result(st))
		}
		p := e.alloc(16384)
		st, _, _ = do[protocol.MemcpyHtoDReq, protocol.Empty](e, protocol.OpMemcpyHtoD,
			protocol.MemcpyHtoDReq{Dst: p, Src: protocol.BufRef{Kind: protocol.BufRegion, Region: reg.Region, Len: 12288, Offset: 4096}}, nil)
		wantStatus(t, "htod from a region", st, 0)
		if _, got := e.dtoh(p, 12288); !bytes.Equal(got, want[4096:]) {
			t.Fatalf("flags %d: region copy differs", flags)
		}
		if flags&protocol.RegisterMapped != 0 {
			if reg.DevPtr == 0 {
				t.Fatal("mapped registration without a device pointer")
			}
			// The mapped range is device memory of the session: DtoD from it works.
			q := e.alloc(16384)
			must[protocol.MemcpyDtoDReq, protocol.Empty](e, protocol.OpMemcpyDtoD, protocol.MemcpyDtoDReq{Dst: q, Src: reg.DevPtr, Size: 16384}, nil)
			if _, got := e.dtoh(q, 16384); !bytes.Equal(got, want) {
				t.Fatal("device view of the mapped region differs from guest memory")
			}
			// Writes through the device address land in guest RAM.
			wantStatus(t, "htod into the mapped region", e.htod(reg.DevPtr+8192, []byte("through-the-mapping")), 0)
			if got := e.guestRead(4096, 19); string(got) != "through-the-mapping" {
				t.Fatalf("guest RAM after a write through the mapping: %q", got)
			}
		}
		st, _, _ = do[protocol.MemcpyHtoDReq, protocol.Empty](e, protocol.OpMemcpyHtoD,
			protocol.MemcpyHtoDReq{Dst: p, Src: protocol.BufRef{Kind: protocol.BufRegion, Region: reg.Region, Len: 8192, Offset: 12288}}, nil)
		wantStatus(t, "region range past its end", st, device.ErrInvalidValue)
		must[protocol.HandleReq, protocol.Empty](e, protocol.OpGuestUnregister, protocol.HandleReq{Handle: reg.Region}, nil)
		st, _, _ = do[protocol.MemcpyHtoDReq, protocol.Empty](e, protocol.OpMemcpyHtoD,
			protocol.MemcpyHtoDReq{Dst: p, Src: protocol.BufRef{Kind: protocol.BufRegion, Region: reg.Region, Len: 4096}}, nil)
		wantStatus(t, "unregistered region", st, device.ErrInvalidHandle)
		if flags&protocol.RegisterMapped != 0 {
			wantStatus(t, "htod into an unregistered mapping", e.htod(reg.DevPtr, []byte("x")), device.ErrInvalidValue)
		}
	}
}

// TestRegionCopyReadsAtStreamTime: an async copy from registered guest
// memory reads it when the stream reaches the copy (like DMA from pinned
// memory), so a host function queued before it can still fill the buffer.
func TestRegionCopyReadsAtStreamTime(t *testing.T) {
	e := start(t, opts{mem: true, allowAll: true})
	st, reg, _, err := sessiontestDoSegs[protocol.GuestRegisterReq, protocol.GuestRegisterReply](e, protocol.OpGuestRegister,
		protocol.GuestRegisterReq{Size: 4096}, []protocol.Segment{{GPA: 1 << 32, Len: 4096}})
	if err != nil || st != 0 {
		t.Fatalf("register: %v %v", err, device.Result(st))
	}
	sh, _ := must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{}, nil)
	p := e.alloc(4096)
	must[protocol.HostFuncReq, protocol.Empty](e, protocol.OpHostFuncLaunch, protocol.HostFuncReq{Stream: sh.Handle, CallbackID: 5}, nil)
	copyReq := protocol.MemcpyHtoDReq{Dst: p, Stream: sh.Handle, Flags: protocol.CopyAsync, Src: protocol.BufRef{Kind: protocol.BufRegion, Region: reg.Region, Len: 4}}
	must[protocol.MemcpyHtoDReq, protocol.Empty](e, protocol.OpMemcpyHtoD, copyReq, nil)
	<-e.c.Notes // the stream reached the host function
	ram, _ := e.table.Slice(guestGPA(1<<32), 4)
	copy(ram, "seed") // what the guest's callback writes
	must[protocol.HostFuncDoneReq, protocol.Empty](e, protocol.OpHostFuncDone, protocol.HostFuncDoneReq{CallbackID: 5}, nil)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpStreamSynchronize, protocol.HandleReq{Handle: sh.Handle}, nil)
	if _, got := e.dtoh(p, 4); string(got) != "seed" {
		t.Fatalf("copy queued after the host function read %q, want the callback's write", got)
	}
}
