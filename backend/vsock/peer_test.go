package vsock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/virtq"
	"github.com/vgpu-project/vgpu/backend/virtq/virtqtest"
	"github.com/vgpu-project/vgpu/backend/vsock"
)

const (
	guestCID  = 3
	hostPort  = 5000
	rxBufSize = 4096 // Linux 6.1's rx buffer payload
)

// packet is one packet the device sent to the guest.
type packet struct {
	hdr     vsock.Header
	payload []byte
}

// guestPeer plays the guest's virtio-vsock driver against a Device: it
// owns the rx and tx rings in a memfd, keeps the rx ring full of Linux-
// shaped buffers (44-byte header + 4 KiB payload descriptors) and sends
// packets on tx.
type guestPeer struct {
	t    testing.TB
	mem  *virtqtest.Memory
	dev  *vsock.Device
	rx   *virtqtest.Driver
	tx   *virtqtest.Driver
	rxq  *virtq.Queue
	txq  *virtq.Queue
	bufs map[uint16][][]byte
	pkts chan packet
	done chan struct{}
	wg   sync.WaitGroup
	txMu sync.Mutex
}

func newDevice(t testing.TB, bufAlloc uint32) *vsock.Device {
	t.Helper()
	d, err := vsock.NewDevice(vsock.Config{GuestCID: guestCID, VM: t.Name(), BufAlloc: bufAlloc,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Error, Output: testOutput{t}})})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

type testOutput struct{ t testing.TB }

func (o testOutput) Write(p []byte) (int, error) { return len(p), nil }

// newPeer starts dev against a fresh guest. rxBuffers is how many rx
// buffers the guest offers (0: a full ring).
func newPeer(t testing.TB, dev *vsock.Device, rxBuffers int) *guestPeer {
	return newPeerSized(t, dev, rxBuffers, rxBufSize)
}

// newPeerSized is newPeer with rx buffers of rxSize payload bytes.
func newPeerSized(t testing.TB, dev *vsock.Device, rxBuffers, rxSize int) *guestPeer {
	t.Helper()
	mem, err := virtqtest.NewMemory(0x40000000, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	p := &guestPeer{t: t, mem: mem, dev: dev, bufs: map[uint16][][]byte{}, pkts: make(chan packet, 4096), done: make(chan struct{})}
	if p.rx, err = virtqtest.NewDriver(mem, 128, true); err != nil {
		t.Fatal(err)
	}
	if p.tx, err = virtqtest.NewDriver(mem, 128, true); err != nil {
		t.Fatal(err)
	}
	if rxBuffers == 0 {
		rxBuffers = 64
	}
	for i := 0; i < rxBuffers; i++ {
		head, b, ok := p.rx.Add(nil, []int{vsock.HeaderSize, rxSize})
		if !ok {
			t.Fatal("rx ring full")
		}
		p.bufs[head] = b
	}
	if p.rxq, err = p.rx.Queue("rx"); err != nil {
		t.Fatal(err)
	}
	if p.txq, err = p.tx.Queue("tx"); err != nil {
		t.Fatal(err)
	}
	if err := dev.Start(mem.Table, []*virtq.Queue{p.rxq, p.txq}); err != nil {
		t.Fatal(err)
	}
	p.wg.Add(1)
	go p.rxPump()
	t.Cleanup(p.stop)
	return p
}

func (p *guestPeer) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.dev.Stop(true)
	close(p.done)
	p.wg.Wait()
	p.rxq.Close()
	p.txq.Close()
	p.rx.Close()
	p.tx.Close()
	p.mem.Close()
}

// rxPump collects packets the device wrote and gives the buffers back.
func (p *guestPeer) rxPump() {
	defer p.wg.Done()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, u := range p.rx.Collect() {
			b := p.bufs[u.Head]
			var pk packet
			if err := pk.hdr.Decode(b[0]); err != nil {
				p.t.Errorf("device wrote %d bytes, not a header", u.Len)
				continue
			}
			if want := vsock.HeaderSize + pk.hdr.Len; u.Len != want {
				p.t.Errorf("used length %d, header says %d", u.Len, want)
			}
			pk.payload = append([]byte(nil), b[1][:pk.hdr.Len]...)
			p.rx.Reuse(u.Head)
			select {
			case p.pkts <- pk:
			case <-p.done:
				return
			}
		}
		select {
		case <-p.done:
			return
		case <-p.rx.Call.C():
		case <-tick.C:
		}
	}
}

// send puts one packet on the tx ring (header and payload in separate
// descriptors, as Linux does).
func (p *guestPeer) send(h vsock.Header, payload []byte) {
	p.txMu.Lock()
	defer p.txMu.Unlock()
	for _, u := range p.tx.Collect() {
		p.tx.Free(u.Head)
	}
	hb := make([]byte, vsock.HeaderSize)
	h.Encode(hb)
	out := [][]byte{hb}
	if len(payload) > 0 {
		out = append(out, payload)
	}
	if _, _, ok := p.tx.Add(out, nil); !ok {
		p.t.Fatal("tx ring full")
	}
}

// sendRaw puts arbitrary bytes on the tx ring as one descriptor.
func (p *guestPeer) sendRaw(b []byte) {
	p.txMu.Lock()
	defer p.txMu.Unlock()
	for _, u := range p.tx.Collect() {
		p.tx.Free(u.Head)
	}
	if len(b) == 0 {
		b = []byte{0}
	}
	if _, _, ok := p.tx.Add([][]byte{b}, nil); !ok {
		p.t.Fatal("tx ring full")
	}
}

// txDone waits until the device consumed everything on the tx ring.
func (p *guestPeer) txDone(t testing.TB) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		p.txMu.Lock()
		p.tx.SetUsedEvent(p.tx.UsedIdx())
		done := p.tx.UsedIdx() == p.tx.AvailIdx()
		p.txMu.Unlock()
		if done {
			return
		}
		select {
		case <-deadline.C:
			t.Fatalf("timed out waiting for the device to drain tx: %s", p.dev.DebugState())
		case <-p.tx.Call.C():
		case <-tick.C:
		}
	}
}

// hdr returns a guest->host header for a connection from guest port gp.
func hdr(op uint16, gp uint32) vsock.Header {
	return vsock.Header{SrcCID: guestCID, DstCID: 2, SrcPort: gp, DstPort: hostPort, Type: vsock.TypeStream, Op: op, BufAlloc: 1 << 20}
}

// expect returns the next packet from the device, which must have op.
func (p *guestPeer) expect(op uint16) packet {
	p.t.Helper()
	select {
	case pk := <-p.pkts:
		if pk.hdr.Op != op {
			p.t.Fatalf("device sent %s, want %s", pk.hdr.String(), vsock.OpName(op))
		}
		if pk.hdr.SrcCID != 2 || pk.hdr.DstCID != guestCID || (pk.hdr.Type != vsock.TypeStream && op != vsock.OpRST) {
			p.t.Fatalf("device sent a misaddressed packet %s", pk.hdr.String())
		}
		return pk
	case <-time.After(10 * time.Second):
		p.t.Fatalf("no %s from the device within 10s; state: %s", vsock.OpName(op), p.dev.DebugState())
	}
	return packet{}
}

// quiet checks that the device sends nothing for a moment.
func (p *guestPeer) quiet(d time.Duration) {
	p.t.Helper()
	select {
	case pk := <-p.pkts:
		p.t.Fatalf("device sent an unexpected %s", pk.hdr.String())
	case <-time.After(d):
	}
}

var _ guestmem.Source = (*guestmem.Table)(nil)

func guestGPA(v uint64) guestmem.GPA { return guestmem.GPA(v) }
