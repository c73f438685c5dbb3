package vsock

import (
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/transport"
	"github.com/vgpu-project/vgpu/backend/virtq"
)

// Addr is a vsock address (CID, port).
type Addr struct {
	CID  uint32
	Port uint32
}

// Network returns "vsock".
func (a Addr) Network() string { return "vsock" }

func (a Addr) String() string { return fmt.Sprintf("vsock:%d:%d", a.CID, a.Port) }

// Conn is one guest-initiated stream connection. It implements
// transport.Conn. Read and Write are safe to call concurrently with each
// other; concurrent Writes are serialized.
//
// Flow control: the guest may have at most BufAlloc unread bytes in flight
// (we advertise buf_alloc and fwd_cnt in every packet and send
// CREDIT_UPDATE after every 64 KiB that Read consumed);
// Write sends no more than the guest's advertised credit.
type Conn struct {
	d   *Device
	key connKey
	wmu sync.Mutex // serializes Write

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every state change

	// guest -> host
	rbuf        []byte
	rstart      int
	rlen        int
	rxCnt       uint32 // bytes received
	fwdCnt      uint32 // bytes consumed by Read
	lastSentFwd uint32 // fwd_cnt the guest last heard of

	// host -> guest
	wreq            []byte // the rest of the current Write, sent by the rx loop
	txCnt           uint32
	peerBufAlloc    uint32
	peerFwdCnt      uint32
	creditRequested bool

	peerShutRecv bool // guest will receive no more: Write fails
	peerShutSend bool // guest will send no more: Read hits EOF after the buffer
	localShutWr  bool
	localClosed  bool
	done         bool  // RST sent or received: the connection is gone
	err          error // why the connection ended abnormally
	inReady      bool  // on Device.ready (guarded by Device.mu)
	closeTimer   *time.Timer

	readDeadline, writeDeadline time.Time
}

var _ transport.Conn = (*Conn)(nil)

func newConn(d *Device, key connKey, h *Header) *Conn {
	return &Conn{
		d: d, key: key, changed: make(chan struct{}),
		peerBufAlloc: h.BufAlloc, peerFwdCnt: h.FwdCnt,
	}
}

// header returns a packet header from the host side of c.
func (c *Conn) header(op uint16, flags uint32) Header {
	return Header{
		SrcCID: transport.HostCID, DstCID: c.d.cfg.GuestCID, SrcPort: c.key.hostPort, DstPort: c.key.guestPort,
		Type: TypeStream, Op: op, Flags: flags,
	}
}

// broadcast wakes every waiter. Called with c.mu held.
func (c *Conn) broadcast() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// wait releases c.mu until the state changes or the deadline passes; it
// reports false on timeout. Called with c.mu held.
func (c *Conn) wait(deadline time.Time) bool {
	ch := c.changed
	if deadline.IsZero() {
		c.mu.Unlock()
		<-ch
		c.mu.Lock()
		return true
	}
	d := time.Until(deadline)
	if d <= 0 {
		return false
	}
	t := time.NewTimer(d)
	c.mu.Unlock()
	select {
	case <-ch:
	case <-t.C:
	}
	t.Stop()
	c.mu.Lock()
	return true
}

func expired(deadline time.Time) bool { return !deadline.IsZero() && !time.Now().Before(deadline) }

// fillCredit stamps our receive credit on h. Called with c.mu held.
func (c *Conn) fillCredit(h *Header) {
	h.BufAlloc = c.d.cfg.BufAlloc
	h.FwdCnt = c.fwdCnt
	c.lastSentFwd = c.fwdCnt
}

// updateCredit records the guest's credit from any of its packets. Called
// with c.mu held.
func (c *Conn) updateCredit(h *Header) {
	c.peerBufAlloc = h.BufAlloc
	c.peerFwdCnt = h.FwdCnt
	if c.credit() > 0 {
		c.creditRequested = false
		if len(c.wreq) > 0 && !c.done {
			c.d.markReady(c)
		}
	}
}

// credit is how many bytes the guest can take now.
func (c *Conn) credit() uint32 {
	inFlight := c.txCnt - c.peerFwdCnt
	if inFlight >= c.peerBufAlloc {
		return 0
	}
	return c.peerBufAlloc - inFlight
}

// fillData writes one RW packet with the next bytes of the pending Write
// into ch and returns the payload length (0: nothing could be sent).
// Called with c.mu held.
func (c *Conn) fillData(ch *virtq.Chain, hdrBuf []byte) int {
	if len(c.wreq) == 0 || c.done || c.localClosed || c.peerShutRecv || c.localShutWr {
		return 0
	}
	cr := c.credit()
	if cr == 0 {
		return 0 // the caller asks the guest for credit
	}
	n := uint64(len(c.wreq))
	n = min(n, uint64(cr), ch.InLen-HeaderSize, MaxPayload)
	if n == 0 {
		return 0
	}
	h := c.header(OpRW, 0)
	h.Len = uint32(n)
	c.fillCredit(&h)
	h.Encode(hdrBuf)
	scatter(ch.In, 0, hdrBuf)
	scatter(ch.In, HeaderSize, c.wreq[:n])
	c.wreq = c.wreq[n:]
	c.txCnt += uint32(n)
	if len(c.wreq) == 0 {
		c.broadcast()
	}
	return int(n)
}

// initialRecvBuf is the first size of a connection's receive ring; it
// doubles up to BufAlloc as data piles up, so quiet connections stay small.
const initialRecvBuf = 64 << 10

// appendFrom copies n payload bytes from the guest's buffers (after skip
// bytes) into the receive ring. The caller checked the credit, so the ring
// never needs more than BufAlloc bytes.
func (c *Conn) appendFrom(segs [][]byte, skip uint64, n int) {
	if need := c.rlen + n; need > len(c.rbuf) {
		c.grow(need)
	}
	size := len(c.rbuf)
	end := (c.rstart + c.rlen) % size
	first := min(n, size-end)
	got := gather(c.rbuf[end:end+first], segs, skip)
	if first < n {
		got += gather(c.rbuf[:n-first], segs, skip+uint64(first))
	}
	c.rlen += got
	c.rxCnt += uint32(got)
}

// grow replaces the receive ring with one of at least need bytes (doubling,
// at most BufAlloc), keeping the buffered bytes in order.
func (c *Conn) grow(need int) {
	size := max(len(c.rbuf), min(initialRecvBuf, int(c.d.cfg.BufAlloc)))
	for size < need {
		size *= 2
	}
	size = min(size, int(c.d.cfg.BufAlloc))
	nb := make([]byte, size)
	if c.rlen > 0 {
		n := copy(nb, c.rbuf[c.rstart:min(c.rstart+c.rlen, len(c.rbuf))])
		copy(nb[n:], c.rbuf[:c.rlen-n])
	}
	c.rbuf = nb
	c.rstart = 0
}

// terminate ends the connection without sending anything. Called with
// c.mu held.
func (c *Conn) terminate(err error) {
	if c.done {
		return
	}
	c.done = true
	if err != nil && c.err == nil {
		c.err = err
	}
	if c.closeTimer != nil {
		c.closeTimer.Stop()
	}
	c.d.removeConn(c)
	c.broadcast()
}

// reset sends RST to the guest and ends the connection. Called with c.mu
// held.
func (c *Conn) reset(err error) {
	if c.done {
		return
	}
	c.d.queueCtrl(ctrlPkt{hdr: c.header(OpRST, 0)})
	c.terminate(err)
}

// maybeFinish answers a full guest shutdown with RST once nothing is left
// to read (as Linux does). Called with c.mu held.
func (c *Conn) maybeFinish() {
	if c.done || !c.peerShutSend || !c.peerShutRecv {
		return
	}
	if c.rlen == 0 || c.localClosed {
		c.reset(nil)
	}
}

// Read reads guest data. It returns io.EOF after the guest shut down its
// sending side and everything was read.
func (c *Conn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if c.localClosed {
			return 0, net.ErrClosed
		}
		if c.rlen > 0 {
			if len(p) == 0 {
				return 0, nil
			}
			n := c.take(p)
			c.afterRead()
			return n, nil
		}
		if c.peerShutSend || c.done {
			if c.err != nil && !c.peerShutSend {
				return 0, c.err
			}
			return 0, io.EOF
		}
		if len(p) == 0 {
			return 0, nil
		}
		if expired(c.readDeadline) || !c.wait(c.readDeadline) {
			return 0, os.ErrDeadlineExceeded
		}
	}
}

// take copies buffered bytes into p.
func (c *Conn) take(p []byte) int {
	size := len(c.rbuf)
	n := 0
	for n < len(p) && c.rlen > 0 {
		chunk := min(c.rlen, size-c.rstart, len(p)-n)
		copy(p[n:], c.rbuf[c.rstart:c.rstart+chunk])
		n += chunk
		c.rstart = (c.rstart + chunk) % size
		c.rlen -= chunk
	}
	if c.rlen == 0 {
		c.rstart = 0
	}
	c.fwdCnt += uint32(n)
	return n
}

// creditUpdateEvery is how many consumed bytes the guest may not yet know
// about before Read sends CREDIT_UPDATE. Linux 6.1 guests keep at most
// 256 KiB in flight whatever buffer we advertise, so the update cannot
// wait for half of BufAlloc.
const creditUpdateEvery = 64 << 10

// creditUpdateDrained is the smaller threshold that applies once Read
// emptied the buffer: a guest that stops earlier than creditUpdateEvery
// (a small socket buffer) still hears about the space, while small RPC
// frames do not cost an extra packet each.
const creditUpdateDrained = 4 << 10

// afterRead tells the guest about freed space and finishes a shut-down
// connection.
func (c *Conn) afterRead() {
	if c.done {
		return
	}
	unreported := c.fwdCnt - c.lastSentFwd
	if unreported >= min(creditUpdateEvery, c.d.cfg.BufAlloc/4) || (c.rlen == 0 && unreported >= creditUpdateDrained) {
		c.d.queueCtrl(ctrlPkt{hdr: c.header(OpCreditUpdate, 0), conn: c})
		c.lastSentFwd = c.fwdCnt // fillCredit sets it again at send time
	}
	c.maybeFinish()
}

func (c *Conn) writeErr() error {
	switch {
	case c.localClosed:
		return net.ErrClosed
	case c.done && c.err != nil:
		return c.err
	case c.done, c.peerShutRecv, c.localShutWr:
		return syscall.EPIPE
	}
	return nil
}

// Write sends p to the guest. The rx loop copies straight from p into the
// guest's rx buffers; Write returns when all of p is in the rx ring, or on
// error or deadline with the count sent so far.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.writeErr(); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	c.wreq = p
	c.d.markReady(c)
	for {
		if len(c.wreq) == 0 {
			return len(p), nil
		}
		err := c.writeErr()
		if err == nil && (expired(c.writeDeadline) || !c.wait(c.writeDeadline)) {
			err = os.ErrDeadlineExceeded
		}
		if err != nil {
			n := len(p) - len(c.wreq)
			c.wreq = nil
			return n, err
		}
	}
}

// CloseWrite shuts down the host's sending side (SHUTDOWN with SEND): the
// guest reads EOF.
func (c *Conn) CloseWrite() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.writeErr(); err != nil {
		return err
	}
	c.localShutWr = true
	c.d.queueCtrl(ctrlPkt{hdr: c.header(OpShutdown, ShutdownSend), conn: c})
	c.broadcast()
	return nil
}

// Close closes the connection: SHUTDOWN (both directions) to the guest,
// which answers RST; if it does not within 8 s, the device resets the
// connection. If the guest already shut down both directions, Close sends
// RST at once.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.localClosed {
		return net.ErrClosed
	}
	c.localClosed = true
	c.rbuf = nil
	c.rlen = 0
	defer c.broadcast()
	if c.done {
		return nil
	}
	if c.peerShutSend && c.peerShutRecv {
		c.reset(nil)
		return nil
	}
	c.d.queueCtrl(ctrlPkt{hdr: c.header(OpShutdown, ShutdownRcv|ShutdownSend), conn: c})
	c.closeTimer = time.AfterFunc(closeTimeout, func() {
		c.mu.Lock()
		c.reset(nil)
		c.mu.Unlock()
	})
	return nil
}

// LocalAddr is the host side (CID 2, the listening port).
func (c *Conn) LocalAddr() net.Addr { return Addr{CID: transport.HostCID, Port: c.key.hostPort} }

// RemoteAddr is the guest side.
func (c *Conn) RemoteAddr() net.Addr {
	return Addr{CID: uint32(c.d.cfg.GuestCID), Port: c.key.guestPort}
}

// SetDeadline sets both deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDeadline, c.writeDeadline = t, t
	c.broadcast()
	c.mu.Unlock()
	return nil
}

// SetReadDeadline sets the deadline for Read.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.readDeadline = t
	c.broadcast()
	c.mu.Unlock()
	return nil
}

// SetWriteDeadline sets the deadline for Write.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.writeDeadline = t
	c.broadcast()
	c.mu.Unlock()
	return nil
}

// PeerCID is the guest's CID.
func (c *Conn) PeerCID() uint32 { return uint32(c.d.cfg.GuestCID) }

// PeerPort is the guest's source port.
func (c *Conn) PeerPort() uint32 { return c.key.guestPort }

// Memory returns the VM's guest memory, or nil.
func (c *Conn) Memory() guestmem.Source {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	if c.d.mem == nil {
		return nil
	}
	return c.d.mem
}

// VM names the VM.
func (c *Conn) VM() string { return c.d.cfg.VM }
