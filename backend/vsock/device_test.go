package vsock_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/backend/transport"
	"github.com/vgpu-project/vgpu/backend/vsock"
)

// open connects guest port gp to the listener and returns the host side.
func open(t *testing.T, p *guestPeer, l *vsock.Listener, gp uint32) transport.Conn {
	t.Helper()
	return openWithBuffer(t, p, l, gp, hdr(vsock.OpRequest, gp).BufAlloc)
}

// openWithBuffer is open with the guest announcing a receive buffer of
// bufAlloc bytes (the host may have that much in flight).
func openWithBuffer(t *testing.T, p *guestPeer, l *vsock.Listener, gp, bufAlloc uint32) transport.Conn {
	t.Helper()
	req := hdr(vsock.OpRequest, gp)
	req.BufAlloc = bufAlloc
	p.send(req, nil)
	resp := p.expect(vsock.OpResponse)
	if resp.hdr.DstPort != gp || resp.hdr.SrcPort != hostPort || resp.hdr.BufAlloc == 0 {
		t.Fatalf("bad RESPONSE %s", resp.hdr.String())
	}
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if c.PeerPort() != gp || c.PeerCID() != guestCID || c.Memory() == nil || c.VM() != t.Name() {
		t.Fatalf("conn identity: port %d cid %d has memory %v vm %q", c.PeerPort(), c.PeerCID(), c.Memory() != nil, c.VM())
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func listen(t *testing.T, d *vsock.Device, priv bool) *vsock.Listener {
	t.Helper()
	l, err := d.Listen(hostPort, vsock.ListenOptions{RequirePrivileged: priv})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestStreamBothWays(t *testing.T) {
	d := newDevice(t, 0)
	p := newPeer(t, d, 0)
	l := listen(t, d, true)
	c := open(t, p, l, 1000)

	// guest -> host
	rw := hdr(vsock.OpRW, 1000)
	msg := []byte("hello from the guest")
	rw.Len = uint32(len(msg))
	p.send(rw, msg)
	buf := make([]byte, 100)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != string(msg) {
		t.Fatalf("Read = %q, %v", buf[:n], err)
	}

	// host -> guest: split into rx-buffer-sized packets, in order.
	data := make([]byte, 3*rxBufSize+123)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if n, err := c.Write(data); n != len(data) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	var got []byte
	for len(got) < len(data) {
		pk := p.expect(vsock.OpRW)
		if len(pk.payload) > rxBufSize {
			t.Fatalf("packet of %d bytes exceeds the rx buffer", len(pk.payload))
		}
		if pk.hdr.FwdCnt != uint32(len(msg)) || pk.hdr.BufAlloc != vsock.DefaultBufAlloc {
			t.Errorf("credit in RW: %s", pk.hdr.String())
		}
		got = append(got, pk.payload...)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("host->guest data corrupted")
	}

	// Host closes: SHUTDOWN both ways, guest answers RST, conn forgotten.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	sd := p.expect(vsock.OpShutdown)
	if sd.hdr.Flags != vsock.ShutdownRcv|vsock.ShutdownSend {
		t.Fatalf("SHUTDOWN flags %#x", sd.hdr.Flags)
	}
	p.send(hdr(vsock.OpRST, 1000), nil)
	testwait.For(t, 10*time.Second, "connection forgotten", func() bool { return d.Conns() == 0 })
	if _, err := c.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close = %v", err)
	}
}

func TestGuestCloses(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pending string // data sent before SHUTDOWN
	}{
		{"empty", ""},
		{"with data pending", "last words"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDevice(t, 0)
			p := newPeer(t, d, 0)
			l := listen(t, d, false)
			c := open(t, p, l, 2000)
			if tc.pending != "" {
				rw := hdr(vsock.OpRW, 2000)
				rw.Len = uint32(len(tc.pending))
				p.send(rw, []byte(tc.pending))
			}
			sd := hdr(vsock.OpShutdown, 2000)
			sd.Flags = vsock.ShutdownRcv | vsock.ShutdownSend
			p.send(sd, nil)
			if tc.pending == "" {
				// Nothing left to read: the device answers RST at once.
				p.expect(vsock.OpRST)
			} else {
				p.quiet(20 * time.Millisecond)
			}
			b, err := io.ReadAll(c)
			if err != nil || string(b) != tc.pending {
				t.Fatalf("ReadAll = %q, %v", b, err)
			}
			if tc.pending != "" {
				p.expect(vsock.OpRST)
			}
			if _, err := c.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
				t.Fatalf("Write after the guest's shutdown = %v, want EPIPE", err)
			}
		})
	}
}

func TestGuestReset(t *testing.T) {
	d := newDevice(t, 0)
	p := newPeer(t, d, 0)
	l := listen(t, d, false)
	c := open(t, p, l, 2001)
	p.send(hdr(vsock.OpRST, 2001), nil)
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Read after RST = %v, want ECONNRESET", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close after RST = %v", err)
	}
	p.quiet(20 * time.Millisecond) // never RST an RST
}

func TestHostCloseWrite(t *testing.T) {
	d := newDevice(t, 0)
	p := newPeer(t, d, 0)
	l := listen(t, d, false)
	c := open(t, p, l, 2002)
	if err := c.(*vsock.Conn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if sd := p.expect(vsock.OpShutdown); sd.hdr.Flags != vsock.ShutdownSend {
		t.Fatalf("flags %#x", sd.hdr.Flags)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("Write after CloseWrite = %v", err)
	}
	// Reading still works.
	rw := hdr(vsock.OpRW, 2002)
	rw.Len = 3
	p.send(rw, []byte("abc"))
	b := make([]byte, 3)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "abc" {
		t.Fatalf("Read = %q, %v", b, err)
	}
}

func TestCreditHostToGuest(t *testing.T) {
	d := newDevice(t, 0)
	p := newPeer(t, d, 0)
	l := listen(t, d, false)
	c := openWithBuffer(t, p, l, 3000, 8192)
	data := bytes.Repeat([]byte("0123456789abcdef"), 1500) // 24000 bytes
	done := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		done <- err
	}()
	var got []byte
	for len(got) < 8192 {
		got = append(got, p.expect(vsock.OpRW).payload...)
	}
	if len(got) != 8192 {
		t.Fatalf("device sent %d bytes with 8192 of credit", len(got))
	}
	p.expect(vsock.OpCreditRequest) // out of credit: the device asks
	select {
	case err := <-done:
		t.Fatalf("Write returned (%v) without credit", err)
	default:
	}
	for len(got) < len(data) {
		up := hdr(vsock.OpCreditUpdate, 3000)
		up.BufAlloc = 8192
		up.FwdCnt = uint32(len(got))
		p.send(up, nil)
		for target := min(len(got)+8192, len(data)); len(got) < target; {
			got = append(got, p.expect(vsock.OpRW).payload...)
		}
		if len(got) < len(data) {
			p.expect(vsock.OpCreditRequest)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("data corrupted")
	}
}

func TestCreditGuestToHost(t *testing.T) {
	const bufAlloc = 16384
	d := newDevice(t, bufAlloc)
	p := newPeer(t, d, 0)
	l := listen(t, d, false)
	c := open(t, p, l, 3001)
	chunk := bytes.Repeat([]byte{'z'}, 4096)
	rw := hdr(vsock.OpRW, 3001)
	rw.Len = 4096
	for i := 0; i < bufAlloc/4096; i++ {
		p.send(rw, chunk)
	}
	p.txDone(t)
	// Reading 4096 (= BufAlloc/4) bytes earns the guest a CREDIT_UPDATE.
	if _, err := io.ReadFull(c, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	up := p.expect(vsock.OpCreditUpdate)
	if up.hdr.FwdCnt != 4096 || up.hdr.BufAlloc != bufAlloc {
		t.Fatalf("CREDIT_UPDATE %s", up.hdr.String())
	}
	// The guest sends 4096 more (within credit), then one byte too many.
	p.send(rw, chunk)
	one := hdr(vsock.OpRW, 3001)
	one.Len = 1
	p.send(one, []byte{1})
	p.expect(vsock.OpRST)
	if got := d.Stats().CreditErrors; got != 1 {
		t.Fatalf("CreditErrors = %d", got)
	}
	// What was received within credit is still readable, then the reset.
	b, err := io.ReadAll(c)
	if len(b) != bufAlloc || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("ReadAll = %d bytes, %v", len(b), err)
	}
}

func TestCreditRequestAnswered(t *testing.T) {
	d := newDevice(t, 0)
	p := newPeer(t, d, 0)
	l := listen(t, d, false)
	open(t, p, l, 3002)
	p.send(hdr(vsock.OpCreditRequest, 3002), nil)
	if up := p.expect(vsock.OpCreditUpdate); up.hdr.BufAlloc != vsock.DefaultBufAlloc {
		t.Fatalf("CREDIT_UPDATE %s", up.hdr.String())
	}
}

func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		priv  bool
		pkt   func() vsock.Header
		reply bool // RST expected
		stat  func(vsock.Stats) uint64
	}{
		{"no listener", true, func() vsock.Header { h := hdr(vsock.OpRequest, 100); h.DstPort = 9; return h }, true, func(s vsock.Stats) uint64 { return s.Refused }},
		{"unprivileged source port", true, func() vsock.Header { return hdr(vsock.OpRequest, 40000) }, true, func(s vsock.Stats) uint64 { return s.Refused }},
		{"port 1024 is unprivileged", true, func() vsock.Header { return hdr(vsock.OpRequest, 1024) }, true, func(s vsock.Stats) uint64 { return s.Refused }},
		{"RW on unknown connection", true, func() vsock.Header { h := hdr(vsock.OpRW, 77); h.Len = 0; return h }, true, func(s vsock.Stats) uint64 { return s.UnknownConn }},
		{"SHUTDOWN on unknown connection", true, func() vsock.Header { return hdr(vsock.OpShutdown, 77) }, true, func(s vsock.Stats) uint64 { return s.UnknownConn }},
		{"CREDIT_UPDATE on unknown connection", true, func() vsock.Header { return hdr(vsock.OpCreditUpdate, 77) }, true, func(s vsock.Stats) uint64 { return s.UnknownConn }},
		{"RESPONSE from the guest", true, func() vsock.Header { return hdr(vsock.OpResponse, 77) }, true, func(s vsock.Stats) uint64 { return s.BadPackets }},
		{"unknown op", true, func() vsock.Header { return hdr(99, 77) }, true, func(s vsock.Stats) uint64 { return s.BadPackets }},
		{"seqpacket", true, func() vsock.Header { h := hdr(vsock.OpRequest, 100); h.Type = vsock.TypeSeqpacket; return h }, true, func(s vsock.Stats) uint64 { return s.BadPackets }},
		{"length beyond buffer", true, func() vsock.Header { h := hdr(vsock.OpRW, 100); h.Len = 50; return h }, true, func(s vsock.Stats) uint64 { return s.BadPackets }},
		{"foreign source CID", true, func() vsock.Header { h := hdr(vsock.OpRequest, 100); h.SrcCID = 9; return h }, false, func(s vsock.Stats) uint64 { return s.BadPackets }},
		{"not for the host", true, func() vsock.Header { h := hdr(vsock.OpRequest, 100); h.DstCID = 5; return h }, false, func(s vsock.Stats) uint64 { return s.BadPackets }},
		{"RST on unknown connection", true, func() vsock.Header { return hdr(vsock.OpRST, 77) }, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDevice(t, 0)
			p := newPeer(t, d, 0)
			l := listen(t, d, tc.priv)
			h := tc.pkt()
			p.send(h, nil)
			if tc.reply {
				rst := p.expect(vsock.OpRST)
				if rst.hdr.DstPort != h.SrcPort || rst.hdr.SrcPort != h.DstPort {
					t.Fatalf("RST %s does not answer %s", rst.hdr.String(), h.String())
				}
				// The RST is of the packet's socket type (a SEQPACKET
				// request gets a SEQPACKET RST, or the guest's socket of
				// that type never hears of it; issue 17).
				if rst.hdr.Type != h.Type {
					t.Fatalf("RST of type %d answers a packet of type %d", rst.hdr.Type, h.Type)
				}
			} else {
				p.txDone(t)
				p.quiet(20 * time.Millisecond)
			}
			if tc.stat != nil && tc.stat(d.Stats()) != 1 {
				t.Fatalf("counter not incremented: %+v", d.Stats())
			}
			// Nothing reached Accept.
			l.Close()
			if c, err := l.Accept(); err == nil {
				t.Fatalf("accepted %v", c.RemoteAddr())
			}
		})
	}
}

func TestShortPacketDropped(t *testing.T) {
	d := newDevice(t, 0)
	p := newPeer(t, d, 0)
	p.sendRaw(make([]byte, 20))
	p.txDone(t)
	p.quiet(20 * time.Millisecond)
	if d.Stats().BadPackets != 1 {
		t.Fatalf("stats %+v", d.Stats())
	}
}

func TestDeadlines(t *testing.T) {
	d := newDevice(t, 0)
	p := newPeer(t, d, 0)
	l := listen(t, d, false)
	c := openWithBuffer(t, p, l, 4000, 100)

	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := c.Read(make([]byte, 10))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past deadline = %v", err)
	}
	// A deadline in the past fails at once; clearing it lets Read work.
	c.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := c.Read(make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read with past deadline = %v", err)
	}
	c.SetReadDeadline(time.Time{})

	// Write: 100 bytes of credit, then the deadline.
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	n, err := c.Write(make([]byte, 1000))
	if n != 100 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write = %d, %v; want 100 and a timeout", n, err)
	}
	// Extending a deadline wakes a blocked Read.
	done := make(chan error, 1)
	c.SetReadDeadline(time.Now().Add(time.Hour))
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	c.SetReadDeadline(time.Now())
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Read = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SetReadDeadline did not wake Read")
	}
}

func TestStopResetsConnections(t *testing.T) {
	d := newDevice(t, 0)
	p := newPeer(t, d, 0)
	l := listen(t, d, false)
	c := open(t, p, l, 5000)
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	d.Stop(true)
	select {
	case err := <-done:
		if !errors.Is(err, vsock.ErrDeviceStopped) {
			t.Fatalf("Read = %v, want ErrDeviceStopped", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Read hung after Stop")
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, vsock.ErrDeviceStopped) {
		t.Fatalf("Write = %v", err)
	}
}

func TestMalformedChainBreaksDevice(t *testing.T) {
	d := newDevice(t, 0)
	p := newPeer(t, d, 0)
	l := listen(t, d, false)
	c := open(t, p, l, 5001)
	// A descriptor pointing outside guest RAM.
	p.txMu.Lock()
	p.tx.WriteDesc(7, 0x10, 64, 0, 0)
	p.tx.Publish(7)
	p.txMu.Unlock()
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, vsock.ErrDeviceStopped) {
		t.Fatalf("Read = %v, want ErrDeviceStopped", err)
	}
	if d.Stats().BrokenQueues != 1 {
		t.Fatalf("stats %+v", d.Stats())
	}
	// The rejected head went back to the used ring.
	testwait.For(t, 10*time.Second, "rejected head returned", func() bool {
		p.txMu.Lock()
		defer p.txMu.Unlock()
		return p.tx.UsedIdx() == p.tx.AvailIdx()
	})
}

func TestConcurrentConnections(t *testing.T) {
	d := newDevice(t, 0)
	p := newPeer(t, d, 0)
	l := listen(t, d, false)
	const conns = 4
	cs := make([]transport.Conn, conns)
	for i := range cs {
		cs[i] = open(t, p, l, uint32(600+i))
	}
	// Each host conn writes its own pattern concurrently; the guest sorts
	// the packets by port.
	const each = 50000
	errs := make(chan error, conns)
	for i, c := range cs {
		go func() {
			_, err := c.Write(bytes.Repeat([]byte{byte(i + 1)}, each))
			errs <- err
		}()
	}
	got := map[uint32]int{}
	for total := 0; total < conns*each; {
		pk := p.expect(vsock.OpRW)
		for _, b := range pk.payload {
			if b != byte(pk.hdr.DstPort-600+1) {
				t.Fatalf("byte %d on port %d", b, pk.hdr.DstPort)
			}
		}
		got[pk.hdr.DstPort] += len(pk.payload)
		total += len(pk.payload)
	}
	for i := 0; i < conns; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		if got[uint32(600+i)] != each {
			t.Fatalf("port %d got %d bytes", 600+i, got[uint32(600+i)])
		}
	}
}

func TestConfigSpace(t *testing.T) {
	d := newDevice(t, 0)
	b, err := d.ReadConfig(0, 8)
	if err != nil || !bytes.Equal(b, []byte{guestCID, 0, 0, 0, 0, 0, 0, 0}) {
		t.Fatalf("ReadConfig = %x, %v", b, err)
	}
	if _, err := d.ReadConfig(4, 8); err == nil {
		t.Fatal("ReadConfig beyond the config space succeeded")
	}
	if _, err := vsock.NewDevice(vsock.Config{GuestCID: 2}); err == nil {
		t.Fatal("CID 2 accepted")
	}
}

func TestListenTwice(t *testing.T) {
	d := newDevice(t, 0)
	listen(t, d, false)
	if _, err := d.Listen(hostPort, vsock.ListenOptions{}); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second Listen = %v", err)
	}
}

func TestBacklogFull(t *testing.T) {
	d := newDevice(t, 0)
	p := newPeer(t, d, 0)
	l, err := d.Listen(hostPort, vsock.ListenOptions{Backlog: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p.send(hdr(vsock.OpRequest, 800), nil)
	p.expect(vsock.OpResponse)
	p.send(hdr(vsock.OpRequest, 801), nil)
	if rst := p.expect(vsock.OpRST); rst.hdr.DstPort != 801 {
		t.Fatalf("RST for port %d", rst.hdr.DstPort)
	}
	if d.Stats().Refused != 1 || d.Conns() != 1 {
		t.Fatalf("stats %+v conns %d", d.Stats(), d.Conns())
	}
	// Closing the listener resets the connection nobody accepted.
	l.Close()
	if rst := p.expect(vsock.OpRST); rst.hdr.DstPort != 800 {
		t.Fatalf("RST for port %d", rst.hdr.DstPort)
	}
}

func TestEagerWriteAfterAccept(t *testing.T) {
	d := newDevice(t, 0)
	p := newPeer(t, d, 0)
	l := listen(t, d, false)
	accepted := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			_, err = c.Write([]byte("first"))
		}
		accepted <- err
	}()
	p.send(hdr(vsock.OpRequest, 900), nil)
	p.expect(vsock.OpResponse)
	if pk := p.expect(vsock.OpRW); string(pk.payload) != "first" {
		t.Fatalf("payload %q", pk.payload)
	}
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
}

func TestMaxConns(t *testing.T) {
	d, err := vsock.NewDevice(vsock.Config{GuestCID: guestCID, VM: t.Name(), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	p := newPeer(t, d, 0)
	l := listen(t, d, false)
	open(t, p, l, 810)
	open(t, p, l, 811)
	p.send(hdr(vsock.OpRequest, 812), nil)
	if rst := p.expect(vsock.OpRST); rst.hdr.DstPort != 812 {
		t.Fatalf("RST for port %d", rst.hdr.DstPort)
	}
}

// TestReceiveRingGrowth wraps the receive ring and then makes it grow: the
// bytes must come out in order.
func TestReceiveRingGrowth(t *testing.T) {
	d := newDevice(t, 0)
	p := newPeer(t, d, 0)
	l := listen(t, d, false)
	c := open(t, p, l, 820)
	var sent, read []byte
	send := func(n int) {
		for n > 0 {
			k := min(n, 16<<10)
			b := make([]byte, k)
			for i := range b {
				b[i] = byte(len(sent) + i*7)
			}
			sent = append(sent, b...)
			rw := hdr(vsock.OpRW, 820)
			rw.Len = uint32(k)
			p.send(rw, b)
			n -= k
		}
		p.txDone(t)
	}
	recv := func(n int) {
		b := make([]byte, n)
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		read = append(read, b...)
	}
	send(40 << 10)
	recv(30 << 10)
	send(50 << 10) // wraps the 64 KiB ring
	send(100 << 10)
	recv(160 << 10)
	if !bytes.Equal(read, sent) {
		t.Fatal("bytes reordered or corrupted across the ring's growth")
	}
}

// TestCreditUpdateOnDrain: a guest that stops after a few KiB (a small
// socket buffer) hears about the space once the host drained it; a small
// RPC frame does not cost an update.
func TestCreditUpdateOnDrain(t *testing.T) {
	d := newDevice(t, 0)
	p := newPeer(t, d, 0)
	l := listen(t, d, false)
	c := open(t, p, l, 830)
	rw := hdr(vsock.OpRW, 830)
	rw.Len = 100
	p.send(rw, make([]byte, 100))
	if _, err := io.ReadFull(c, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	p.quiet(20 * time.Millisecond)
	rw.Len = 5000
	p.send(rw, make([]byte, 5000))
	if _, err := io.ReadFull(c, make([]byte, 5000)); err != nil {
		t.Fatal(err)
	}
	if up := p.expect(vsock.OpCreditUpdate); up.hdr.FwdCnt != 5100 {
		t.Fatalf("CREDIT_UPDATE %s", up.hdr.String())
	}
}

// DebugState takes the device's lock, then each connection's: the reverse
// of the data path's order (Conn.mu, then Device.mu in markReady), so a
// diagnostic dump during writes could deadlock the device (issue 17). It
// now copies the connection list and drops the device lock first.
func TestDebugStateDuringWrites(t *testing.T) {
	d := newDevice(t, 0)
	p := newPeer(t, d, 0)
	l := listen(t, d, true)
	var conns []transport.Conn
	for gp := uint32(1000); gp < 1004; gp++ {
		conns = append(conns, open(t, p, l, gp))
	}
	go func() {
		for range p.pkts { // a guest that reads everything
		}
	}()
	dumped := make(chan struct{})
	go func() {
		defer close(dumped)
		for i := 0; i < 20000; i++ {
			_ = d.DebugState()
		}
	}()
	wrote := make(chan error, 1)
	go func() {
		data := make([]byte, 512)
		for i := 0; ; i++ {
			select {
			case <-dumped:
				wrote <- nil
				return
			default:
			}
			// The fake guest gives no credit back: once a connection's
			// credit is spent its Write waits (and times out); that is
			// flow control, not the deadlock this test looks for.
			c := conns[i%len(conns)]
			_ = c.SetWriteDeadline(time.Now().Add(5 * time.Millisecond))
			if _, err := c.Write(data); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				wrote <- err
				return
			}
		}
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatalf("write: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("DebugState and Write deadlocked")
	}
}
