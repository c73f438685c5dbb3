package pattern

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/protocol"
)

// Word(0x1234, 5) as guest-driver/tests/vgpu_guest_test.c computes it.
const goldenWord = 0xb951bab8a8fc0754

func TestWordGolden(t *testing.T) {
	if got := Word(0x1234, 5); got != goldenWord {
		t.Fatalf("Word(0x1234, 5) = %#x, want %#x (the C twin disagrees)", got, uint64(goldenWord))
	}
}

func TestFillCheck(t *testing.T) {
	for _, tc := range []struct {
		name      string
		n, off    int
		corruptAt int
	}{
		{"one byte", 1, 0, -1},
		{"unaligned", 37, 3, -1},
		{"pages", 3*4096 + 5, 4093, -1},
		{"corrupt first", 64, 0, 0},
		{"corrupt last", 65, 7, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			whole := make([]byte, tc.off+tc.n)
			Fill(whole, 99, 0)
			part := make([]byte, tc.n)
			Fill(part, 99, uint64(tc.off))
			if string(part) != string(whole[tc.off:]) {
				t.Fatal("Fill at an offset differs from the whole buffer")
			}
			if tc.corruptAt >= 0 {
				part[tc.corruptAt] ^= 1
			}
			if got := Check(part, 99, uint64(tc.off)); got != tc.corruptAt {
				t.Fatalf("Check = %d, want %d", got, tc.corruptAt)
			}
		})
	}
}

// fakeConn is one end of a pipe posing as a guest connection over fake RAM.
type fakeConn struct {
	net.Conn
	port uint32
	mem  guestmem.Source
}

func (c *fakeConn) PeerCID() uint32         { return 3 }
func (c *fakeConn) PeerPort() uint32        { return c.port }
func (c *fakeConn) Memory() guestmem.Source { return c.mem }
func (c *fakeConn) VM() string              { return "fake" }

const ramBase = 0x100000

type guest struct {
	t   *testing.T
	c   net.Conn
	ram []byte
	id  uint64
}

func start(t *testing.T, port uint32, opts Options) (*guest, *Server, chan error) {
	t.Helper()
	ram := make([]byte, 1<<20)
	tab, err := guestmem.FromMemory([]guestmem.Region{{GuestPhys: ramBase, Size: uint64(len(ram)), Host: ram}})
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	s := NewServer(opts)
	done := make(chan error, 1)
	go func() { done <- s.Serve(&fakeConn{Conn: b, port: port, mem: tab}) }()
	t.Cleanup(func() { a.Close() })
	_ = a.SetDeadline(time.Now().Add(10 * time.Second))
	return &guest{t: t, c: a, ram: ram}, s, done
}

func (g *guest) send(op protocol.Opcode, flags protocol.Flags, payload []byte, segs []protocol.Segment) uint64 {
	g.id++
	h := protocol.NewHeader(op, g.id)
	h.Flags = flags
	if _, err := g.c.Write(protocol.AppendFrame(nil, h, payload, segs)); err != nil {
		g.t.Fatal(err)
	}
	return g.id
}

func (g *guest) recv() protocol.Frame {
	f, err := protocol.ReadFrame(g.c, protocol.DefaultLimits)
	if err != nil {
		g.t.Fatal(err)
	}
	return f
}

func (g *guest) call(op protocol.Opcode, payload []byte, segs []protocol.Segment) protocol.Frame {
	id := g.send(op, 0, payload, segs)
	f := g.recv()
	if f.RequestID != id || f.Flags&protocol.FlagReply == 0 {
		g.t.Fatalf("reply id %d flags %#x, want %d", f.RequestID, f.Flags, id)
	}
	return f
}

func htod(dst, n uint64) []byte {
	r := protocol.MemcpyHtoDReq{Dst: dst, Src: protocol.BufRef{Kind: protocol.BufSegments, Len: n}}
	return protocol.Bytes(&r)
}

func dtoh(src, n uint64, stream uint64) []byte {
	r := protocol.MemcpyDtoHReq{Src: src, Stream: stream, Dst: protocol.BufRef{Kind: protocol.BufSegments, Len: n}}
	return protocol.Bytes(&r)
}

// scattered returns segments for n bytes spread over RAM in reverse page
// order, starting 5 bytes into a page, and fills them with the pattern.
func (g *guest) scattered(n, seed uint64) []protocol.Segment {
	var segs []protocol.Segment
	page := uint64(len(g.ram)/4096) - 1
	var off uint64
	first := uint64(5)
	for off < n {
		l := min(4096-first, n-off)
		gpa := ramBase + page*4096 + first
		Fill(g.ram[gpa-ramBase:gpa-ramBase+l], seed, off)
		segs = append(segs, protocol.Segment{GPA: gpa, Len: l})
		off += l
		first = 0
		page--
	}
	return segs
}

func TestServer(t *testing.T) {
	g, s, done := start(t, 1023, Options{Limits: protocol.Limits{MaxPayload: 1 << 16, MaxSegments: 4}, Delay: time.Millisecond})

	hr := protocol.HelloReq{Major: 1, Role: protocol.RoleDriver, Features: protocol.FeatureSegments}
	f := g.call(protocol.OpHello, protocol.Bytes(&hr), nil)
	rep, _, err := protocol.Decode[protocol.HelloReply](f.Payload)
	if err != nil || f.Status != 0 || rep.MaxSegments != 4 || rep.Features&protocol.FeatureSegments == 0 {
		t.Fatalf("hello: %v status %d %+v", err, f.Status, rep)
	}

	t.Run("htod", func(t *testing.T) {
		segs := g.scattered(3*4096, 7)
		if f := g.call(protocol.OpMemcpyHtoD, htod(7, 3*4096), segs); f.Status != 0 {
			t.Fatalf("status %d", f.Status)
		}
		if f := g.call(protocol.OpMemcpyHtoD, htod(8, 3*4096), segs); f.Status != cudaErrorInvalidValue {
			t.Fatalf("wrong seed: status %d", f.Status)
		}
		if f := g.call(protocol.OpMemcpyHtoD, htod(7, 3*4096+1), segs); f.Status != cudaErrorInvalidValue {
			t.Fatalf("short segments: status %d", f.Status)
		}
		bad := []protocol.Segment{{GPA: 0x10, Len: 8}}
		if f := g.call(protocol.OpMemcpyHtoD, htod(7, 8), bad); f.Status != cudaErrorIllegalAddress {
			t.Fatalf("outside RAM: status %d", f.Status)
		}
	})

	t.Run("continuation", func(t *testing.T) {
		segs := g.scattered(10*4096, 9) // 11 segments, 4 per frame
		g.id++
		id := g.id
		for i := 0; i < len(segs); i += 4 {
			chunk := segs[i:min(i+4, len(segs))]
			h := protocol.NewHeader(protocol.OpSegments, id)
			payload := []byte(nil)
			if i == 0 {
				h = protocol.NewHeader(protocol.OpMemcpyHtoD, id)
				payload = htod(9, 10*4096)
			}
			b := protocol.AppendFrame(nil, h, payload, chunk)
			if i+4 < len(segs) {
				fl := binary.LittleEndian.Uint32(b[8:]) | uint32(protocol.FlagMoreSegments)
				binary.LittleEndian.PutUint32(b[8:], fl)
			}
			if _, err := g.c.Write(b); err != nil {
				t.Fatal(err)
			}
		}
		if f := g.recv(); f.RequestID != id || f.Status != 0 {
			t.Fatalf("reply %d status %d", f.RequestID, f.Status)
		}
		if s.Stats.ContFrames.Load() != 2 {
			t.Fatalf("%d continuation frames, want 2", s.Stats.ContFrames.Load())
		}
	})

	t.Run("dtoh delayed", func(t *testing.T) {
		segs := []protocol.Segment{{GPA: ramBase + 100, Len: 50}, {GPA: ramBase + 9000, Len: 30}}
		if f := g.call(protocol.OpMemcpyDtoH, dtoh(5, 80, StreamDelay), segs); f.Status != 0 {
			t.Fatalf("status %d", f.Status)
		}
		if Check(g.ram[100:150], 5, 0) >= 0 || Check(g.ram[9000:9030], 5, 50) >= 0 {
			t.Fatal("pattern not written")
		}
	})

	t.Run("register", func(t *testing.T) {
		rr := protocol.GuestRegisterReq{Flags: protocol.RegisterMapped, Size: 8192}
		segs := []protocol.Segment{{GPA: ramBase, Len: 4096}, {GPA: ramBase + 8192, Len: 4096}}
		f := g.call(protocol.OpGuestRegister, protocol.Bytes(&rr), segs)
		rep, _, _ := protocol.Decode[protocol.GuestRegisterReply](f.Payload)
		if f.Status != 0 || rep.Region == 0 || rep.DevPtr != DevPtrBase+2 {
			t.Fatalf("status %d %+v", f.Status, rep)
		}
		hr := protocol.HandleReq{Handle: rep.Region}
		if f := g.call(protocol.OpGuestUnregister, protocol.Bytes(&hr), nil); f.Status != 0 {
			t.Fatalf("unregister: %d", f.Status)
		}
		if f := g.call(protocol.OpGuestUnregister, protocol.Bytes(&hr), nil); f.Status != cudaErrorInvalidHandle {
			t.Fatalf("second unregister: %d", f.Status)
		}
	})

	t.Run("no reply notifies errors", func(t *testing.T) {
		g.send(protocol.OpPing, protocol.FlagNoReply, nil, nil)
		id := g.send(protocol.OpDeviceReset, protocol.FlagNoReply, nil, nil)
		f := g.recv()
		n, _, _ := protocol.Decode[protocol.ErrorNotify](f.Payload)
		if f.Flags&protocol.FlagNotify == 0 || f.Opcode != protocol.OpNotifyError || n.RequestID != id || n.Error != cudaErrorNotSupported {
			t.Fatalf("got op %#x flags %#x %+v", f.Opcode, f.Flags, n)
		}
	})

	g.c.Close()
	if err := <-done; err != nil && !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("Serve: %v", err)
	}
}

func TestServerRefusesUnprivilegedSegments(t *testing.T) {
	g, s, _ := start(t, 40000, Options{})
	segs := g.scattered(100, 1)
	if f := g.call(protocol.OpMemcpyHtoD, htod(1, 100), segs); f.Status != cudaErrorNotPermitted {
		t.Fatalf("status %d, want %d", f.Status, cudaErrorNotPermitted)
	}
	if s.Stats.Refused.Load() != 1 {
		t.Fatal("refusal not counted")
	}
}

func TestServerClosesOnGarbage(t *testing.T) {
	g, _, done := start(t, 1023, Options{})
	if _, err := g.c.Write(make([]byte, protocol.HeaderSize)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, protocol.ErrMagic) {
		t.Fatalf("Serve: %v, want ErrMagic", err)
	}
}
