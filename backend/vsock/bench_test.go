package vsock_test

import (
	"io"
	"testing"

	"github.com/vgpu-project/vgpu/backend/vsock"
)

// The benchmarks measure the device alone: the guest is an in-process Go
// peer on real rings in a memfd, so the figures are the backend's ceiling
// (the QEMU test measures the whole path under TCG).
//
//	go test -run XXX -bench Stream -benchtime 512MiB... ./backend/vsock/

// BenchmarkStreamGuestToHost: the guest sends 64 KiB RW packets within
// its credit; the host reads with 256 KiB buffers.
func BenchmarkStreamGuestToHost(b *testing.B) {
	d := newDevice(b, 0)
	p := newPeer(b, d, 0)
	l, _ := d.Listen(hostPort, vsock.ListenOptions{})
	defer l.Close()
	p.send(hdr(vsock.OpRequest, 1000), nil)
	p.expect(vsock.OpResponse)
	c, err := l.Accept()
	if err != nil {
		b.Fatal(err)
	}
	const pkt = vsock.MaxPayload
	const slots = 32
	var bufs [slots][]byte
	gpas := make([]uint64, slots)
	for i := range bufs {
		g, buf := p.mem.Alloc(vsock.HeaderSize+pkt, 16)
		gpas[i] = uint64(g)
		bufs[i] = buf
		h := hdr(vsock.OpRW, 1000)
		h.Len = pkt
		h.Encode(buf)
	}
	total := int64(b.N) * pkt
	b.SetBytes(pkt)
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 256<<10)
		_, err := io.CopyBuffer(io.Discard, io.LimitReader(c, total), buf)
		done <- err
	}()
	b.ResetTimer()
	var sent, fwd int64
	free := make([]uint16, 0, slots)
	for i := slots - 1; i >= 0; i-- {
		free = append(free, uint16(i))
	}
	for n := 0; n < b.N; {
		// Reclaim used slots and read credit updates.
		p.txMu.Lock()
		for _, u := range p.tx.Collect() {
			free = append(free, u.Head)
		}
		p.txMu.Unlock()
		for drained := false; !drained; {
			select {
			case pk := <-p.pkts:
				fwd += int64(pk.hdr.FwdCnt - uint32(fwd))
			default:
				drained = true
			}
		}
		if len(free) == 0 || sent-fwd+pkt > vsock.DefaultBufAlloc {
			select {
			case pk := <-p.pkts:
				fwd += int64(pk.hdr.FwdCnt - uint32(fwd))
			case <-p.tx.Call.C():
			}
			continue
		}
		s := free[len(free)-1]
		free = free[:len(free)-1]
		p.txMu.Lock()
		p.tx.WriteDesc(s, guestGPA(gpas[s]), vsock.HeaderSize+pkt, 0, 0)
		p.tx.Publish(s)
		p.txMu.Unlock()
		sent += pkt
		n++
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkStreamHostToGuest: the host writes 1 MiB at a time; the guest
// offers rx buffers of 4 KiB (Linux 6.1) or 64 KiB and returns credit every
// 128 KiB.
func BenchmarkStreamHostToGuest(b *testing.B) {
	for _, size := range []int{4096, 64 << 10} {
		b.Run(sizeName(size), func(b *testing.B) { benchHostToGuest(b, size) })
	}
}

func sizeName(n int) string {
	if n >= 1<<10 {
		return itoa(n>>10) + "KiB"
	}
	return itoa(n)
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var s []byte
	for ; n > 0; n /= 10 {
		s = append([]byte{byte('0' + n%10)}, s...)
	}
	return string(s)
}

func benchHostToGuest(b *testing.B, rxSize int) {
	d := newDevice(b, 0)
	p := newPeerSized(b, d, 60, rxSize)
	l, _ := d.Listen(hostPort, vsock.ListenOptions{})
	defer l.Close()
	p.send(hdr(vsock.OpRequest, 1000), nil)
	p.expect(vsock.OpResponse)
	c, err := l.Accept()
	if err != nil {
		b.Fatal(err)
	}
	const chunk = 1 << 20
	total := int64(b.N) * chunk
	b.SetBytes(chunk)
	data := make([]byte, chunk)
	done := make(chan error, 1)
	b.ResetTimer()
	go func() {
		for i := 0; i < b.N; i++ {
			if _, err := c.Write(data); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var got, reported int64
	for got < total {
		pk := <-p.pkts
		if pk.hdr.Op != vsock.OpRW {
			continue
		}
		got += int64(len(pk.payload))
		if got-reported >= 128<<10 {
			up := hdr(vsock.OpCreditUpdate, 1000)
			up.FwdCnt = uint32(got)
			p.send(up, nil)
			reported = got
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
