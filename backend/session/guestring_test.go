package session_test

import (
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/shmring"
	"github.com/vgpu-project/vgpu/protocol"
)

// guestRings is the library's side of rings in the test guest's RAM.
type guestRings struct {
	e    *env
	ep   *shmring.Endpoint
	hdr  []byte
	segs []protocol.Segment
}

// ringSegs names 1 header page and 2*k ring pages scattered over the
// second RAM region (every other page, the request ring's backwards).
func ringSegs(base uint64, k int) []protocol.Segment {
	segs := []protocol.Segment{{GPA: base, Len: protocol.RingPageSize}}
	for i := 0; i < k; i++ {
		segs = append(segs, protocol.Segment{GPA: base + uint64(2+2*(k-1-i))*protocol.RingPageSize, Len: protocol.RingPageSize})
	}
	// The completion ring: one run of contiguous pages.
	segs = append(segs, protocol.Segment{GPA: base + uint64(2+2*k)*protocol.RingPageSize, Len: uint64(k) * protocol.RingPageSize})
	return segs
}

// setupRings sends OpRingSetupGuest for rings at base and makes the
// client's endpoint; NOTIFY_RING_BELL frames are handed to it.
func setupRings(t *testing.T, e *env, base uint64) *guestRings {
	t.Helper()
	k := protocol.RingMinBytes / protocol.RingPageSize
	segs := ringSegs(base, k)
	var pages [][]byte
	for _, sg := range segs {
		for off := uint64(0); off < sg.Len; off += protocol.RingPageSize {
			b, err := e.table.Slice(guestGPA(sg.GPA+off), protocol.RingPageSize)
			if err != nil {
				t.Fatal(err)
			}
			clear(b)
			pages = append(pages, b)
		}
	}
	shmring.InitMemfd(pages[0], protocol.RingMinBytes) // vgpu.ko's part
	g := &guestRings{e: e, hdr: pages[0], segs: segs}
	st, _, _, err := sessiontestDoSegs[protocol.RingSetupReq, protocol.Empty](e, protocol.OpRingSetupGuest, protocol.RingSetupReq{RingBytes: protocol.RingMinBytes}, segs)
	if err != nil || st != 0 {
		t.Fatalf("RING_SETUP_GUEST: %v status %v", err, device.Result(st))
	}
	ep, err := shmring.NewGuestClient(shmring.GuestPages{Header: pages[0], Req: pages[1 : 1+k], Comp: pages[1+k:]}, protocol.RingMinBytes,
		func(b shmring.Bell) {
			bell := protocol.RingBellReq{Bell: uint32(b)}
			h := protocol.NewHeader(protocol.OpRingBell, e.c.ID())
			h.Flags = protocol.FlagNoReply
			_ = e.c.Send(protocol.AppendFrame(nil, h, protocol.Bytes(&bell), nil))
		}, shmring.Options{Spin: -1})
	if err != nil {
		t.Fatal(err)
	}
	g.ep = ep
	t.Cleanup(func() { _ = ep.Close() })
	return g
}

// forwardBells hands the stream's NOTIFY_RING_BELL frames to the rings
// that are current, and every other notification to others.
func forwardBells(e *env, cur *atomic.Pointer[guestRings]) (others chan protocol.Frame) {
	others = make(chan protocol.Frame, 64)
	go func() {
		for {
			select {
			case f := <-e.c.Notes:
				if f.Opcode == protocol.OpNotifyRingBell {
					n, _, err := protocol.Decode[protocol.RingBellNotify](f.Payload)
					if err == nil && n.Bell != protocol.RingBellBroken {
						if g := cur.Load(); g != nil {
							g.ep.Kick(shmring.Bell(n.Bell))
						}
						continue
					}
				}
				others <- f
			case <-e.c.Done():
				return
			}
		}
	}()
	return others
}

// call sends one frame on the request ring and reads its reply from the
// completion ring.
func (g *guestRings) call(t *testing.T, op protocol.Opcode, flags protocol.Flags, payload []byte, segs []protocol.Segment) protocol.Frame {
	t.Helper()
	id := g.e.c.ID()
	h := protocol.NewHeader(op, id)
	h.Flags = flags
	if _, err := g.ep.Write(protocol.AppendFrame(nil, h, payload, segs)); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var f protocol.Frame
	var err error
	go func() {
		defer close(done)
		f, err = protocol.ReadFrame(g.ep, protocol.DefaultLimits)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%v: no reply on the completion ring", op)
	}
	if err != nil {
		t.Fatalf("%v: reading the completion ring: %v", op, err)
	}
	if f.RequestID != id || f.Opcode != op {
		t.Fatalf("%v: reply %v to request %d, want %d", op, f.Opcode, f.RequestID, id)
	}
	return f
}

func (g *guestRings) taken() uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&g.hdr[protocol.RingOffReqTaken])))
}

// TestGuestRings: a guest's rings in its RAM, named by page segments,
// carry calls and replies beside the stream; the session publishes what it
// took; frames on the ring may not carry segments; teardown and a broken
// ring end the rings only, and the stream goes on serving.
func TestGuestRings(t *testing.T) {
	e := start(t, opts{mem: true, allowAll: true})
	var cur atomic.Pointer[guestRings]
	others := forwardBells(e, &cur)
	g := setupRings(t, e, 1<<32+1<<20)
	cur.Store(g)

	if f := g.call(t, protocol.OpPing, 0, nil, nil); f.Status != 0 {
		t.Fatalf("PING on the ring: status %d", f.Status)
	}
	f := g.call(t, protocol.OpMemAlloc, 0, protocol.Bytes(&protocol.MemAllocReq{Size: 4096}), nil)
	rep, _, err := protocol.Decode[protocol.PtrReply](f.Payload)
	if err != nil || f.Status != 0 || rep.Ptr == 0 {
		t.Fatalf("MEM_ALLOC on the ring: status %d %v %+v", f.Status, err, rep)
	}
	// The stream and the ring share the session: what one allocated the
	// other frees.
	must[protocol.PtrReq, protocol.Empty](e, protocol.OpMemFree, protocol.PtrReq{Ptr: rep.Ptr}, nil)
	if got, want := g.taken(), g.ep.WritePos(); got != want {
		t.Fatalf("RingOffReqTaken %d, want the request tail %d", got, want)
	}
	// Segments on the ring (written by a process) are refused.
	seg := []protocol.Segment{{GPA: 0, Len: 4096}}
	f = g.call(t, protocol.OpMemcpyHtoD, protocol.FlagSegments, protocol.Bytes(&protocol.MemcpyHtoDReq{Dst: rep.Ptr, Src: protocol.BufRef{Kind: protocol.BufSegments, Len: 4096}}), seg)
	wantStatus(t, "segments on the ring", f.Status, device.ErrInvalidValue)
	// A second setup while the rings run.
	st, _, _, _ := sessiontestDoSegs[protocol.RingSetupReq, protocol.Empty](e, protocol.OpRingSetupGuest, protocol.RingSetupReq{RingBytes: protocol.RingMinBytes}, g.segs)
	wantStatus(t, "second setup", st, device.ErrIllegalState)
	// A doorbell with an unknown bell is refused, on the stream.
	st, _, _ = do[protocol.RingBellReq, protocol.Empty](e, protocol.OpRingBell, protocol.RingBellReq{Bell: 7}, nil)
	wantStatus(t, "bell 7", st, device.ErrInvalidValue)

	// Teardown, then new rings elsewhere.
	must[protocol.Empty, protocol.Empty](e, protocol.OpRingTeardown, protocol.Empty{}, nil)
	st, _, _ = do[protocol.RingBellReq, protocol.Empty](e, protocol.OpRingBell, protocol.RingBellReq{}, nil)
	wantStatus(t, "bell without rings", st, device.ErrIllegalState)
	g2 := setupRings(t, e, 1<<32+2<<20)
	cur.Store(g2)
	if f := g2.call(t, protocol.OpPing, 0, nil, nil); f.Status != 0 {
		t.Fatalf("PING on the second rings: status %d", f.Status)
	}
	e.ping() // the stream serves beside the rings
	select {
	case f := <-others:
		t.Fatalf("unexpected notification %v", f.Opcode)
	default:
	}
}

// TestGuestRingsHostile: a request tail out of range, or a frame header
// that is not valid, ends the rings and the guest is told
// (RingBellBroken); the stream serves on, nothing outside the pages is
// read, and new rings may follow.
func TestGuestRingsHostile(t *testing.T) {
	for _, tc := range []string{"tail out of range", "bad magic", "payload over the limit"} {
		t.Run(tc, func(t *testing.T) {
			e := start(t, opts{mem: true, allowAll: true})
			var cur atomic.Pointer[guestRings]
			others := forwardBells(e, &cur)
			g := setupRings(t, e, 1<<32+1<<20)
			cur.Store(g)
			if f := g.call(t, protocol.OpPing, 0, nil, nil); f.Status != 0 {
				t.Fatalf("PING: status %d", f.Status)
			}
			switch tc {
			case "tail out of range":
				atomic.StoreUint64((*uint64)(unsafe.Pointer(&g.hdr[protocol.RingOffReqTail])), 1<<40)
				bell := protocol.RingBellReq{}
				h := protocol.NewHeader(protocol.OpRingBell, e.c.ID())
				h.Flags = protocol.FlagNoReply
				_ = e.c.Send(protocol.AppendFrame(nil, h, protocol.Bytes(&bell), nil))
			case "bad magic":
				h := protocol.NewHeader(protocol.OpPing, 77)
				b := protocol.AppendFrame(nil, h, nil, nil)
				b[0] ^= 0xff
				if _, err := g.ep.Write(b); err != nil {
					t.Fatal(err)
				}
			case "payload over the limit":
				h := protocol.NewHeader(protocol.OpPing, 78)
				h.PayloadLen = 1 << 31
				b := protocol.AppendFrame(nil, protocol.NewHeader(protocol.OpPing, 78), nil, nil)
				protocol.PutHeader(b, &h)
				if _, err := g.ep.Write(b); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case f := <-others:
				n, _, err := protocol.Decode[protocol.RingBellNotify](f.Payload)
				if f.Opcode != protocol.OpNotifyRingBell || err != nil || n.Bell != protocol.RingBellBroken {
					t.Fatalf("got %v %+v, want NOTIFY_RING_BELL RingBellBroken", f.Opcode, n)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("a broken request ring was not reported")
			}
			st, _, _ := do[protocol.RingBellReq, protocol.Empty](e, protocol.OpRingBell, protocol.RingBellReq{}, nil)
			wantStatus(t, "bell after the rings broke", st, device.ErrIllegalState)
			e.ping()
			must[protocol.Empty, protocol.Empty](e, protocol.OpRingTeardown, protocol.Empty{}, nil)
			g2 := setupRings(t, e, 1<<32+2<<20)
			cur.Store(g2)
			if f := g2.call(t, protocol.OpPing, 0, nil, nil); f.Status != 0 {
				t.Fatalf("PING on new rings: status %d", f.Status)
			}
		})
	}
}

// TestGuestRingSetupRefused: pages that are not whole, not in guest RAM,
// or do not add up to the rings; rings without HELLO's feature or
// without guest memory.
func TestGuestRingSetupRefused(t *testing.T) {
	e := start(t, opts{mem: true, allowAll: true})
	k := protocol.RingMinBytes / protocol.RingPageSize
	good := ringSegs(1<<32+1<<20, k)
	for name, segs := range map[string][]protocol.Segment{
		"unaligned page":    append([]protocol.Segment{{GPA: 1<<32 + 100, Len: protocol.RingPageSize}}, good[1:]...),
		"outside guest RAM": append([]protocol.Segment{{GPA: 1 << 40, Len: protocol.RingPageSize}}, good[1:]...),
		"a page short":      good[:len(good)-1],
		"no pages":          nil,
	} {
		st, _, _, err := sessiontestDoSegs[protocol.RingSetupReq, protocol.Empty](e, protocol.OpRingSetupGuest, protocol.RingSetupReq{RingBytes: protocol.RingMinBytes}, segs)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, name, st, device.ErrInvalidValue)
	}
	st, _, _, _ := sessiontestDoSegs[protocol.RingSetupReq, protocol.Empty](e, protocol.OpRingSetupGuest, protocol.RingSetupReq{RingBytes: protocol.RingMinBytes + 1}, good)
	wantStatus(t, "ring size", st, device.ErrInvalidValue)
	e.ping()

	// No guest memory: no segments, no rings.
	e2 := start(t, opts{})
	st, _, _, _ = sessiontestDoSegs[protocol.RingSetupReq, protocol.Empty](e2, protocol.OpRingSetupGuest, protocol.RingSetupReq{RingBytes: protocol.RingMinBytes}, good)
	if st == 0 {
		t.Fatal("rings set up on a connection without guest memory")
	}
	// HELLO without FeatureShmRing.
	e3 := start(t, opts{mem: true, allowAll: true})
	must[protocol.HelloReq, protocol.HelloReply](e3, protocol.OpHello, protocol.HelloReq{Major: uint16(protocol.Major), Role: protocol.RoleLibrary, Features: protocol.FeatureSegments}, nil)
	st, _, _, _ = sessiontestDoSegs[protocol.RingSetupReq, protocol.Empty](e3, protocol.OpRingSetupGuest, protocol.RingSetupReq{RingBytes: protocol.RingMinBytes}, good)
	wantStatus(t, "without the feature", st, device.ErrNotSupported)
}
