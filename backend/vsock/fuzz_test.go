package vsock_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/vgpu-project/vgpu/backend/virtq"
	"github.com/vgpu-project/vgpu/backend/vsock"
)

// packetSeeds are named packets that the table tests also use; they seed
// FuzzVsockPacket.
func packetSeeds() map[string][]byte {
	enc := func(h vsock.Header, payload []byte) []byte {
		b := make([]byte, vsock.HeaderSize)
		h.Encode(b)
		return append(b, payload...)
	}
	rw := hdr(vsock.OpRW, 1000)
	rw.Len = 5
	big := hdr(vsock.OpRW, 1000)
	big.Len = 1 << 31
	sd := hdr(vsock.OpShutdown, 1000)
	sd.Flags = 3
	seq := hdr(vsock.OpRequest, 1001)
	seq.Type = vsock.TypeSeqpacket
	return map[string][]byte{
		"request":        enc(hdr(vsock.OpRequest, 1001), nil),
		"rw":             enc(rw, []byte("hello")),
		"rw length lies": enc(big, []byte("x")),
		"shutdown":       enc(sd, nil),
		"rst":            enc(hdr(vsock.OpRST, 1000), nil),
		"credit request": enc(hdr(vsock.OpCreditRequest, 1000), nil),
		"credit update":  enc(hdr(vsock.OpCreditUpdate, 1000), nil),
		"response":       enc(hdr(vsock.OpResponse, 1000), nil),
		"seqpacket":      enc(seq, nil),
		"unknown op":     enc(hdr(42, 1000), nil),
		"short":          []byte{3, 0, 0, 0},
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	for name, b := range packetSeeds() {
		t.Run(name, func(t *testing.T) { roundTrip(t, b) })
	}
}

func roundTrip(t *testing.T, b []byte) {
	var h vsock.Header
	if err := h.Decode(b); err != nil {
		if len(b) >= vsock.HeaderSize {
			t.Fatalf("Decode(%d bytes) = %v", len(b), err)
		}
		return
	}
	enc := make([]byte, vsock.HeaderSize)
	h.Encode(enc)
	if !bytes.Equal(enc, b[:vsock.HeaderSize]) {
		t.Fatalf("encode(decode(b)) != b")
	}
	var h2 vsock.Header
	h2.Decode(enc)
	if h2 != h {
		t.Fatalf("decode(encode(h)) = %+v, want %+v", h2, h)
	}
}

// FuzzVsockPacket feeds raw bytes to a running device as one guest tx
// packet (through the real tx ring, with an open connection on guest port
// 1000 and a listener on hostPort), after checking the header codec round
// trip. The device must never panic, hang or stop serving.
func FuzzVsockPacket(f *testing.F) {
	for _, b := range packetSeeds() {
		f.Add(b)
	}
	d := newDevice(f, 64<<10)
	p := newPeer(f, d, 0)
	l, err := d.Listen(hostPort, vsock.ListenOptions{Backlog: 4})
	if err != nil {
		f.Fatal(err)
	}
	defer l.Close()
	p.send(hdr(vsock.OpRequest, 1000), nil)
	p.expect(vsock.OpResponse)
	go func() { // drain what the device sends and what the fuzzer opens
		for {
			select {
			case <-p.pkts:
			case <-p.done:
				return
			}
		}
	}()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						c.Close()
						return
					}
				}
			}()
		}
	}()
	slotGPA, slot := p.mem.Alloc(vsock.HeaderSize+vsock.MaxPayload, 16)
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b)
		if len(b) == 0 {
			return
		}
		if len(b) >= 8 {
			// Keep most packets addressed from the guest so they reach
			// the state machine.
			if b[0]&1 == 0 {
				binary.LittleEndian.PutUint64(b[0:], guestCID)
			}
		}
		n := copy(slot, b)
		p.txMu.Lock()
		p.tx.WriteDesc(0, slotGPA, uint32(n), 0, 0)
		p.tx.Publish(0)
		p.txMu.Unlock()
		p.txDone(t)
		if got := d.Stats().BrokenQueues; got != 0 {
			t.Fatalf("a well-formed chain broke the device: %s", d.DebugState())
		}
	})
}

var _ = virtq.ErrBroken
