package faulttest_test

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/protocol"
)

// attackEnv is what an attack can aim at: the attacker's own live and dead
// objects, and a victim VM's.
type attackEnv struct {
	p, freed                  uint64 // attacker's live 4 KiB allocation, a freed one
	stream, freedStream       uint64
	event, freedEvent         uint64
	victimPtr                 uint64 // another VM's allocation (4 KiB)
	victimStream, victimEvent uint64 // another VM's handles (not numbers the attacker has)
}

// raw sends b (a frame with request id id) and waits for the reply; closed
// reports that the backend hung up instead.
func (g *guest) raw(id uint64, b []byte) (st int32, closed bool) {
	g.t.Helper()
	ch := g.c.Expect(id)
	if err := g.c.Send(b); err != nil {
		return 0, true
	}
	f, err := sessiontest.Wait(ch, 10*time.Second)
	if err == sessiontest.ErrClosed {
		return 0, true
	}
	if err != nil {
		g.t.Fatal(err)
	}
	if f.Opcode == protocol.OpBatch && f.Status == 0 {
		rep, _, _ := protocol.Decode[protocol.BatchReply](f.Payload)
		return rep.FirstError, false
	}
	return f.Status, false
}

func frame[T any](op protocol.Opcode, id uint64, v T, tail []byte, segs []protocol.Segment) []byte {
	return protocol.AppendFrame(nil, protocol.NewHeader(op, id), append(protocol.Bytes(&v), tail...), segs)
}

// send builds one frame and returns its reply status.
func send[T any](op protocol.Opcode, v T, tail []byte, segs ...protocol.Segment) func(*guest, *attackEnv) (int32, bool) {
	return func(g *guest, _ *attackEnv) (int32, bool) {
		id := g.c.ID()
		return g.raw(id, frame(op, id, v, tail, segs))
	}
}

// sendE is send with the request built from the attack's targets.
func sendE(op protocol.Opcode, build func(e *attackEnv) (payload []byte, segs []protocol.Segment)) func(*guest, *attackEnv) (int32, bool) {
	return func(g *guest, e *attackEnv) (int32, bool) {
		id := g.c.ID()
		p, segs := build(e)
		return g.raw(id, protocol.AppendFrame(nil, protocol.NewHeader(op, id), p, segs))
	}
}

// htodSegs copies len(segs) bytes from guest RAM into the attacker's buffer.
func htodSegs(segs ...protocol.Segment) func(*guest, *attackEnv) (int32, bool) {
	return sendE(protocol.OpMemcpyHtoD, func(e *attackEnv) ([]byte, []protocol.Segment) {
		var n uint64
		for _, s := range segs {
			n += s.Len
		}
		return protocol.Bytes(&protocol.MemcpyHtoDReq{Dst: e.p, Src: protocol.BufRef{Kind: protocol.BufSegments, Len: n}}), segs
	})
}

// dtohSegs copies the attacker's buffer into guest RAM (a write by GPA).
func dtohSegs(segs ...protocol.Segment) func(*guest, *attackEnv) (int32, bool) {
	return sendE(protocol.OpMemcpyDtoH, func(e *attackEnv) ([]byte, []protocol.Segment) {
		var n uint64
		for _, s := range segs {
			n += s.Len
		}
		return protocol.Bytes(&protocol.MemcpyDtoHReq{Src: e.p, Dst: protocol.BufRef{Kind: protocol.BufSegments, Len: n}}), segs
	})
}

func inlineTo(pick func(e *attackEnv) uint64) func(*guest, *attackEnv) (int32, bool) {
	return sendE(protocol.OpMemcpyHtoD, func(e *attackEnv) ([]byte, []protocol.Segment) {
		r := protocol.MemcpyHtoDReq{Dst: pick(e), Src: protocol.BufRef{Kind: protocol.BufInline, Len: 16}}
		return append(protocol.Bytes(&r), make([]byte, 16)...), nil
	})
}

func handleOp(op protocol.Opcode, pick func(e *attackEnv) uint64) func(*guest, *attackEnv) (int32, bool) {
	return sendE(op, func(e *attackEnv) ([]byte, []protocol.Segment) {
		return protocol.Bytes(&protocol.HandleReq{Handle: pick(e)}), nil
	})
}

// hangUpAfter writes b and hangs up without waiting: the session must end
// and release everything.
func hangUpAfter(b func(id uint64) []byte) func(*guest, *attackEnv) (int32, bool) {
	return func(g *guest, _ *attackEnv) (int32, bool) {
		_ = g.c.Send(b(g.c.ID()))
		g.close()
		return 0, true
	}
}

const (
	okStatus  = device.Success
	valueErr  = device.ErrInvalidValue  // 1
	oomErr    = device.ErrOutOfMemory   // 2
	handleErr = device.ErrInvalidHandle // 400
	permErr   = device.ErrNotPermitted  // 800
	unsupErr  = device.ErrNotSupported  // 801
)

type attack struct {
	name   string
	port   uint32 // guest source port (0: 1000, privileged)
	noRAM  bool   // host-mode connection (no guest memory)
	do     func(*guest, *attackEnv) (int32, bool)
	want   device.Result
	closes bool // the backend hangs up (or the guest did): no more calls on it
}

var attacks = []attack{
	// Guest-physical ranges.
	{name: "gpa beyond guest RAM", do: htodSegs(protocol.Segment{GPA: 1 << 40, Len: 4096}), want: valueErr},
	{name: "gpa in the VGA hole", do: htodSegs(protocol.Segment{GPA: vgaHole, Len: 4096}), want: valueErr},
	{name: "gpa in the MMIO hole below 4 GiB", do: htodSegs(protocol.Segment{GPA: ioapic, Len: 4096}), want: valueErr},
	{name: "segment from low RAM into the MMIO hole", do: htodSegs(protocol.Segment{GPA: lowEnd - 2048, Len: 4096}), want: valueErr},
	{name: "segment from the hole into high RAM", do: htodSegs(protocol.Segment{GPA: highBase - 2048, Len: 4096}), want: valueErr},
	{name: "segment past the end of high RAM", do: htodSegs(protocol.Segment{GPA: highBase + highSize - 2048, Len: 4096}), want: valueErr},
	{name: "gpa wrap-around", do: htodSegs(protocol.Segment{GPA: ^uint64(0) - 2047, Len: 4096}), want: valueErr},
	{name: "segment length 2^63", do: htodSegs(protocol.Segment{GPA: lowStart, Len: 1 << 63}), want: valueErr},
	{name: "two segments whose lengths sum past 2^64", do: sendE(protocol.OpMemcpyHtoD, func(e *attackEnv) ([]byte, []protocol.Segment) {
		return protocol.Bytes(&protocol.MemcpyHtoDReq{Dst: e.p, Src: protocol.BufRef{Kind: protocol.BufSegments, Len: 4096}}), []protocol.Segment{{GPA: lowStart, Len: 1 << 63}, {GPA: lowStart, Len: 1<<63 + 4096}}
	}), want: valueErr},
	{name: "more segments than the buffers need", do: sendE(protocol.OpMemcpyHtoD, func(e *attackEnv) ([]byte, []protocol.Segment) {
		return protocol.Bytes(&protocol.MemcpyHtoDReq{Dst: e.p, Src: protocol.BufRef{Kind: protocol.BufSegments, Len: 4096}}), []protocol.Segment{{GPA: lowStart, Len: 4096}, {GPA: ioapic, Len: 4096}}
	}), want: valueErr},
	{name: "buffer index past the segment list", do: sendE(protocol.OpMemcpyHtoD, func(e *attackEnv) ([]byte, []protocol.Segment) {
		return protocol.Bytes(&protocol.MemcpyHtoDReq{Dst: e.p, Src: protocol.BufRef{Kind: protocol.BufSegments, Index: 7, Len: 4096}}), []protocol.Segment{{GPA: lowStart, Len: 4096}}
	}), want: valueErr},
	{name: "write by GPA into the MMIO hole", do: dtohSegs(protocol.Segment{GPA: ioapic, Len: 4096}), want: valueErr},
	{name: "write by GPA beyond guest RAM", do: dtohSegs(protocol.Segment{GPA: 1 << 40, Len: 4096}), want: valueErr},
	{name: "segments from an unprivileged port", port: 40000, do: htodSegs(protocol.Segment{GPA: lowStart, Len: 4096}), want: permErr},
	{name: "segments on a host-mode connection", noRAM: true, do: htodSegs(protocol.Segment{GPA: lowStart, Len: 4096}), want: unsupErr},
	{name: "more segments than a frame may carry", do: htodSegs(make([]protocol.Segment, 5000)...), want: valueErr},
	{name: "continued segment lists left open", do: func(g *guest, e *attackEnv) (int32, bool) {
		// Open lists are capped (4); the fifth is refused, the rest wait.
		var st int32
		for i := 0; i < 5; i++ {
			id := g.c.ID()
			h := protocol.NewHeader(protocol.OpMemcpyHtoD, id)
			h.Flags = protocol.FlagMoreSegments
			b := protocol.AppendFrame(nil, h, protocol.Bytes(&protocol.MemcpyHtoDReq{Dst: e.p, Src: protocol.BufRef{Kind: protocol.BufSegments, Len: 8192}}), []protocol.Segment{{GPA: lowStart, Len: 4096}})
			if i < 4 {
				if err := g.c.Send(b); err != nil {
					return 0, true
				}
				continue
			}
			var closed bool
			st, closed = g.raw(id, b)
			if closed {
				return st, closed
			}
		}
		return st, false
	}, want: valueErr},
	{name: "segments frame with no call open", do: send(protocol.OpSegments, protocol.Empty{}, nil, protocol.Segment{GPA: lowStart, Len: 4096}), want: valueErr},

	// Device pointers.
	{name: "copy into another VM's allocation", do: inlineTo(func(e *attackEnv) uint64 { return e.victimPtr }), want: valueErr},
	{name: "read another VM's allocation", do: sendE(protocol.OpMemcpyDtoD, func(e *attackEnv) ([]byte, []protocol.Segment) {
		return protocol.Bytes(&protocol.MemcpyDtoDReq{Dst: e.p, Src: e.victimPtr, Size: 4096}), nil
	}), want: valueErr},
	{name: "read another VM's allocation into guest RAM", do: sendE(protocol.OpMemcpyDtoH, func(e *attackEnv) ([]byte, []protocol.Segment) {
		return protocol.Bytes(&protocol.MemcpyDtoHReq{Src: e.victimPtr, Dst: protocol.BufRef{Kind: protocol.BufSegments, Len: 4096}}), []protocol.Segment{{GPA: lowStart, Len: 4096}}
	}), want: valueErr},
	{name: "memset another VM's allocation", do: sendE(protocol.OpMemset, func(e *attackEnv) ([]byte, []protocol.Segment) {
		return protocol.Bytes(&protocol.MemsetReq{Dst: e.victimPtr, Count: 16, ElemSize: 1}), nil
	}), want: valueErr},
	{name: "free another VM's allocation", do: sendE(protocol.OpMemFree, func(e *attackEnv) ([]byte, []protocol.Segment) {
		return protocol.Bytes(&protocol.PtrReq{Ptr: e.victimPtr}), nil
	}), want: valueErr},
	{name: "freed device pointer", do: inlineTo(func(e *attackEnv) uint64 { return e.freed }), want: valueErr},
	{name: "double free", do: sendE(protocol.OpMemFree, func(e *attackEnv) ([]byte, []protocol.Segment) {
		return protocol.Bytes(&protocol.PtrReq{Ptr: e.freed}), nil
	}), want: valueErr},
	{name: "copy running past the end of an allocation", do: inlineTo(func(e *attackEnv) uint64 { return e.p + 4096 - 8 }), want: valueErr},
	{name: "device range wraps around", do: sendE(protocol.OpMemcpyDtoD, func(e *attackEnv) ([]byte, []protocol.Segment) {
		return protocol.Bytes(&protocol.MemcpyDtoDReq{Dst: e.p, Src: e.p + 16, Size: ^uint64(0) - 8}), nil
	}), want: valueErr},
	{name: "memset of 2^62 elements", do: sendE(protocol.OpMemset, func(e *attackEnv) ([]byte, []protocol.Segment) {
		return protocol.Bytes(&protocol.MemsetReq{Dst: e.p, Count: 1 << 62, ElemSize: 4}), nil
	}), want: valueErr},
	{name: "2D memset whose pitch times height overflows", do: sendE(protocol.OpMemset, func(e *attackEnv) ([]byte, []protocol.Segment) {
		return protocol.Bytes(&protocol.MemsetReq{Dst: e.p, Count: 16, ElemSize: 1, Pitch: 1 << 40, Height: 1 << 40}), nil
	}), want: valueErr},

	// Handles.
	{name: "freed stream", do: handleOp(protocol.OpStreamSynchronize, func(e *attackEnv) uint64 { return e.freedStream }), want: handleErr},
	{name: "copy on a freed stream", do: sendE(protocol.OpMemcpyHtoD, func(e *attackEnv) ([]byte, []protocol.Segment) {
		r := protocol.MemcpyHtoDReq{Dst: e.p, Stream: e.freedStream, Src: protocol.BufRef{Kind: protocol.BufInline, Len: 16}}
		return append(protocol.Bytes(&r), make([]byte, 16)...), nil
	}), want: handleErr},
	{name: "stream destroyed twice", do: handleOp(protocol.OpStreamDestroy, func(e *attackEnv) uint64 { return e.freedStream }), want: handleErr},
	{name: "freed event recorded", do: sendE(protocol.OpEventRecord, func(e *attackEnv) ([]byte, []protocol.Segment) {
		return protocol.Bytes(&protocol.EventRecordReq{Event: e.freedEvent, Stream: e.stream}), nil
	}), want: handleErr},
	{name: "freed event synchronized", do: handleOp(protocol.OpEventSynchronize, func(e *attackEnv) uint64 { return e.freedEvent }), want: handleErr},
	{name: "event destroyed twice", do: handleOp(protocol.OpEventDestroy, func(e *attackEnv) uint64 { return e.freedEvent }), want: handleErr},
	{name: "stream waits on a freed event", do: sendE(protocol.OpStreamWaitEvent, func(e *attackEnv) ([]byte, []protocol.Segment) {
		return protocol.Bytes(&protocol.StreamWaitEventReq{Stream: e.stream, Event: e.freedEvent}), nil
	}), want: handleErr},
	{name: "another VM's stream", do: handleOp(protocol.OpStreamSynchronize, func(e *attackEnv) uint64 { return e.victimStream }), want: handleErr},
	{name: "destroy another VM's stream", do: handleOp(protocol.OpStreamDestroy, func(e *attackEnv) uint64 { return e.victimStream }), want: handleErr},
	{name: "another VM's event", do: handleOp(protocol.OpEventQuery, func(e *attackEnv) uint64 { return e.victimEvent }), want: handleErr},
	{name: "handle zero destroyed", do: handleOp(protocol.OpEventDestroy, func(*attackEnv) uint64 { return 0 }), want: handleErr},

	// Huge counts.
	{name: "allocation of 2^62 bytes", do: send(protocol.OpMemAlloc, protocol.MemAllocReq{Size: 1 << 62}, nil), want: oomErr},
	{name: "allocation larger than the device", do: send(protocol.OpMemAlloc, protocol.MemAllocReq{Size: simMem + 4096}, nil), want: oomErr},
	{name: "inline read of 2^40 bytes", do: sendE(protocol.OpMemcpyDtoH, func(e *attackEnv) ([]byte, []protocol.Segment) {
		return protocol.Bytes(&protocol.MemcpyDtoHReq{Src: e.p, Dst: protocol.BufRef{Kind: protocol.BufInline, Len: 1 << 40}}), nil
	}), want: valueErr},
	{name: "batch claiming 2^32-1 calls", do: send(protocol.OpBatch, protocol.BatchReq{Count: ^uint32(0)}, make([]byte, 64)), want: valueErr},
	{name: "launch with a huge grid on an unknown function", do: send(protocol.OpLaunchKernel, protocol.LaunchReq{Func: 0x1234, GridX: ^uint32(0), GridY: ^uint32(0), GridZ: ^uint32(0), BlockX: 1024, BlockY: 1024, BlockZ: 64, ParamSize: 1 << 30}, nil), want: valueErr}, // a 1 GiB parameter block is refused before the handle is looked up
	{name: "frame larger than the payload limit", do: func(g *guest, _ *attackEnv) (int32, bool) {
		id := g.c.ID()
		return g.raw(id, protocol.AppendFrame(nil, protocol.NewHeader(protocol.OpMemcpyHtoD, id), make([]byte, 2<<20), nil))
	}, want: valueErr},

	// Broken frames.
	{name: "truncated payload", do: func(g *guest, _ *attackEnv) (int32, bool) {
		id := g.c.ID()
		return g.raw(id, protocol.AppendFrame(nil, protocol.NewHeader(protocol.OpMemAlloc, id), make([]byte, 8), nil))
	}, want: valueErr},
	{name: "unknown opcode", do: send(protocol.Opcode(0x7bad), protocol.Empty{}, nil), want: unsupErr},
	{name: "reply flag from the guest", do: func(g *guest, _ *attackEnv) (int32, bool) {
		id := g.c.ID()
		h := protocol.NewHeader(protocol.OpPing, id)
		h.Flags = protocol.FlagReply
		return g.raw(id, protocol.AppendFrame(nil, h, nil, nil))
	}, want: valueErr},
	{name: "unknown flag bits", do: func(g *guest, _ *attackEnv) (int32, bool) {
		id := g.c.ID()
		b := protocol.AppendFrame(nil, protocol.NewHeader(protocol.OpPing, id), nil, nil)
		binary.LittleEndian.PutUint32(b[8:], 1<<27)
		return g.raw(id, b)
	}, want: valueErr},
	{name: "bad magic ends the connection", do: func(g *guest, _ *attackEnv) (int32, bool) {
		id := g.c.ID()
		b := protocol.AppendFrame(nil, protocol.NewHeader(protocol.OpPing, id), nil, nil)
		b[0] ^= 0xff
		st, _ := g.raw(id, b)
		<-g.c.Done()
		return st, true
	}, want: valueErr, closes: true},
	{name: "guest hangs up inside a frame header", do: hangUpAfter(func(id uint64) []byte {
		return protocol.AppendFrame(nil, protocol.NewHeader(protocol.OpPing, id), nil, nil)[:13]
	}), closes: true},
	{name: "guest hangs up inside a frame body", do: hangUpAfter(func(id uint64) []byte {
		r := protocol.MemcpyHtoDReq{Src: protocol.BufRef{Kind: protocol.BufInline, Len: 4096}}
		return protocol.AppendFrame(nil, protocol.NewHeader(protocol.OpMemcpyHtoD, id), append(protocol.Bytes(&r), make([]byte, 4096)...), nil)[:1000]
	}), closes: true},
	{name: "guest hangs up with a continued segment list open", do: hangUpAfter(func(id uint64) []byte {
		h := protocol.NewHeader(protocol.OpMemcpyHtoD, id)
		h.Flags = protocol.FlagMoreSegments
		return protocol.AppendFrame(nil, h, protocol.Bytes(&protocol.MemcpyHtoDReq{Src: protocol.BufRef{Kind: protocol.BufSegments, Len: 8192}}), []protocol.Segment{{GPA: lowStart, Len: 4096}})
	}), closes: true},
}

// TestAttacks sends each crafted attack through a real session of one
// backend while another VM (the victim) holds memory, a stream and events.
// Each attack gets its documented error (or the connection ends); the
// attacker's session keeps serving unless it hung up; the victim's bytes
// and handles are untouched; when the attacker leaves, device memory is
// back to the victim's baseline; at the end a new well-behaved VM works and
// the backend holds no more fds or mappings than before.
func TestAttacks(t *testing.T) {
	b := newBackend(t, 0)
	before := countResources(t)

	victimRAM := q35RAM(t)
	defer victimRAM.Release()
	victim := b.connect("victim", 1001, victimRAM)
	victimData := pattern(42, 4096)
	vp := victim.alloc(4096)
	if st := victim.htod(vp, victimData); st != 0 {
		t.Fatalf("victim htod: %v", device.Result(st))
	}
	var vs, ve uint64
	for i := 0; i < 8; i++ { // handle numbers the attacker's session never hands out
		vs, ve = victim.stream(), victim.event()
	}
	victim.roundTrip(1) // registers the victim's guest RAM with the device
	// The victim's first small D2H registers its session's bounce buffer
	// (engine.ReadBounce), which then stays until the session ends: take it
	// before the baseline, as the checks after each attack read that way.
	if !bytes.Equal(victim.dtoh(vp, 4096), victimData) {
		t.Fatal("victim dtoh")
	}
	baseMem, baseAllocs := b.devMem()

	for i, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			port := a.port
			if port == 0 {
				port = 1000
			}
			ram := q35RAM(t)
			defer ram.Release()
			if a.noRAM {
				ram = nil
			}
			g := b.connect("attacker", port, ram)
			g.t = t
			defer g.close()
			e := &attackEnv{p: g.alloc(4096), freed: g.alloc(4096), stream: g.stream(), freedStream: g.stream(), event: g.event(), freedEvent: g.event(),
				victimPtr: vp, victimStream: vs, victimEvent: ve}
			mustOK(t, "free", g.call(protocol.OpMemFree, protocol.Bytes(&protocol.PtrReq{Ptr: e.freed}), nil))
			mustOK(t, "stream destroy", g.call(protocol.OpStreamDestroy, protocol.Bytes(&protocol.HandleReq{Handle: e.freedStream}), nil))
			mustOK(t, "event destroy", g.call(protocol.OpEventDestroy, protocol.Bytes(&protocol.HandleReq{Handle: e.freedEvent}), nil))

			st, closed := a.do(g, e)
			if closed != a.closes {
				t.Fatalf("connection closed = %v, want %v", closed, a.closes)
			}
			if !a.closes || a.want != okStatus {
				if device.Result(st) != a.want {
					t.Fatalf("status %v (%d), want %v (%d)", device.Result(st), st, a.want, a.want)
				}
			}
			if !a.closes {
				mustOK(t, "ping after the attack", g.call(protocol.OpPing, nil, nil))
				g.roundTrip(uint64(i)) // the attacker can still use its own session
			}
			// The victim's bytes and handles are untouched and it still works.
			victim.t = t
			if !bytes.Equal(victim.dtoh(vp, 4096), victimData) {
				t.Fatal("the victim's device memory changed")
			}
			mustOK(t, "victim stream", victim.call(protocol.OpStreamSynchronize, protocol.Bytes(&protocol.HandleReq{Handle: vs}), nil))
			mustOK(t, "victim event", victim.call(protocol.OpEventQuery, protocol.Bytes(&protocol.HandleReq{Handle: ve}), nil))
			victim.roundTrip(uint64(1000 + i))

			g.close()
			testwait.For(t, 10*time.Second, "device memory back to the victim's baseline", func() bool {
				m, n := b.devMem()
				return m == baseMem && n == baseAllocs
			})
		})
	}

	// A new, well-behaved VM works after all that.
	ram := q35RAM(t)
	good := b.connect("newcomer", 1002, ram)
	good.roundTrip(7)
	good.close()
	ram.Release()
	victim.t = t
	victim.close()
	testwait.For(t, 10*time.Second, "device memory back to zero", func() bool { m, n := b.devMem(); return m == 0 && n == 0 })
	victimRAM.Release()
	noLeaks(t, before, 32)
	st := b.srv.Status()
	t.Logf("%d attacks; backend: %d sessions served, %d bad frames, %d VMs left", len(attacks), st.Stats.TotalSessions, st.Stats.BadFrames, len(st.VMs))
}
