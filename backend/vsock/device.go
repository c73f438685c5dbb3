package vsock

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/transport"
	"github.com/vgpu-project/vgpu/backend/virtq"
)

// Queue indices of the virtio-vsock device. The event queue (2) stays in
// QEMU for vhost-user-vsock; the device only serves rx and tx.
const (
	QueueRX = 0
	QueueTX = 1
)

// Virtio feature bits the device offers.
const (
	FeatureVersion1 = 32 // VIRTIO_F_VERSION_1
)

// DefaultBufAlloc is the receive buffer per connection advertised to the
// guest (its credit for sending to us).
const DefaultBufAlloc = 1 << 20

// closeTimeout is how long a locally closed connection waits for the
// guest's RST before the device resets it (Linux: VSOCK_CLOSE_TIMEOUT).
const closeTimeout = 8 * time.Second

// batch is how many chains the loops process between notifications.
const batch = 64

// maxPendingReplies bounds control packets waiting for rx buffers: past it
// the tx loop stops taking guest packets until the guest refills rx (as
// Linux's vhost-vsock does), so a guest cannot grow host memory by sending
// requests while starving rx.
const maxPendingReplies = 1024

// ErrDeviceStopped is the error of connections that the VM lost: QEMU
// disconnected, the guest reset the device, or the device broke.
var ErrDeviceStopped = errors.New("vsock: the VM's vsock device stopped")

// Config configures one device (one VM).
type Config struct {
	GuestCID uint64        // the guest's CID (virtio-vsock config space)
	VM       string        // name for logs and Conn.VM, e.g. the socket path
	Logger   hclog.Logger  // nil: discard
	BufAlloc uint32        // per-connection receive buffer; 0: DefaultBufAlloc
	LogEvery time.Duration // minimum interval between guest-triggered log lines of one kind; 0: 1s
	// MaxConns bounds the connections of this VM (each may buffer
	// BufAlloc bytes); requests beyond it get RST. 0: DefaultMaxConns.
	MaxConns int
}

// DefaultMaxConns is the default bound on connections per VM.
const DefaultMaxConns = 256

// Stats counts guest-triggered failures (read with Device.Stats).
type Stats struct {
	Refused      uint64 // connection requests refused (no listener, port policy, backlog)
	BadPackets   uint64 // malformed packets dropped or answered with RST
	CreditErrors uint64 // guest sent beyond its credit
	UnknownConn  uint64 // packets for connections that do not exist
	BrokenQueues uint64 // malformed descriptor chains
	Accepted     uint64
	RXBytes      uint64 // payload bytes guest -> host
	TXBytes      uint64 // payload bytes host -> guest
}

type connKey struct {
	guestPort uint32
	hostPort  uint32
}

type ctrlPkt struct {
	hdr  Header
	conn *Conn // credit fields are filled from it at send time; may be nil
}

// Device is the virtio-vsock device of one VM. It implements the backend
// side that vhostuser.Server drives (Features, ReadConfig, NumQueues,
// Start, Stop) and hands out guest connections through Listeners.
type Device struct {
	cfg Config
	log hclog.Logger
	rl  rateLimiter

	mu        sync.Mutex
	listeners map[uint32]*Listener
	conns     map[connKey]*Conn
	ctrl      []ctrlPkt
	ready     []*Conn
	sess      *session
	mem       guestmem.Source
	broken    error

	wake      chan struct{}
	replyRoom chan struct{} // signalled when control packets went out

	refused, badPackets, creditErrors, unknownConn, brokenQueues, accepted atomic.Uint64
	rxBytes, txBytes                                                       atomic.Uint64
}

type session struct {
	rx, tx   *virtq.Queue
	stop     chan struct{} // closed by halt: Stop, or a broken queue
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// halt makes both loops of the session return.
func (s *session) halt() { s.stopOnce.Do(func() { close(s.stop) }) }

// NewDevice returns a stopped device; vhostuser.Server starts it when QEMU
// has set up the rings.
func NewDevice(cfg Config) (*Device, error) {
	if cfg.GuestCID <= transport.HostCID || cfg.GuestCID >= 0xffffffff {
		return nil, fmt.Errorf("vsock: guest CID %d is reserved; use 3..0xfffffffe", cfg.GuestCID)
	}
	if cfg.BufAlloc == 0 {
		cfg.BufAlloc = DefaultBufAlloc
	}
	if cfg.BufAlloc < 4096 {
		return nil, fmt.Errorf("vsock: buffer size %d too small (want >= 4096)", cfg.BufAlloc)
	}
	if cfg.LogEvery == 0 {
		cfg.LogEvery = time.Second
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	d := &Device{
		cfg:       cfg,
		log:       log.With("vm", cfg.VM, "cid", cfg.GuestCID),
		listeners: make(map[uint32]*Listener),
		conns:     make(map[connKey]*Conn),
		wake:      make(chan struct{}, 1),
		replyRoom: make(chan struct{}, 1),
	}
	d.rl.every = cfg.LogEvery
	return d, nil
}

// GuestCID returns the guest's CID.
func (d *Device) GuestCID() uint64 { return d.cfg.GuestCID }

// Stats returns the failure and traffic counters.
func (d *Device) Stats() Stats {
	return Stats{
		Refused: d.refused.Load(), BadPackets: d.badPackets.Load(), CreditErrors: d.creditErrors.Load(),
		UnknownConn: d.unknownConn.Load(), BrokenQueues: d.brokenQueues.Load(), Accepted: d.accepted.Load(),
		RXBytes: d.rxBytes.Load(), TXBytes: d.txBytes.Load(),
	}
}

// Features returns the virtio feature bits the device offers.
func (d *Device) Features() uint64 {
	return 1<<FeatureVersion1 | 1<<virtq.FeatureIndirectDesc | 1<<virtq.FeatureEventIdx
}

// NumQueues is the number of queues the device serves (rx, tx).
func (d *Device) NumQueues() int { return 2 }

// ReadConfig returns bytes of the virtio-vsock config space
// (struct virtio_vsock_config { le64 guest_cid; }).
func (d *Device) ReadConfig(offset, size uint32) ([]byte, error) {
	var cfg [8]byte
	for i := range cfg {
		cfg[i] = byte(d.cfg.GuestCID >> (8 * i))
	}
	if uint64(offset)+uint64(size) > uint64(len(cfg)) {
		return nil, fmt.Errorf("vsock: config read %d+%d beyond the %d-byte config space", offset, size, len(cfg))
	}
	return append([]byte(nil), cfg[offset:offset+size]...), nil
}

// Start begins processing queues[QueueRX] and queues[QueueTX]. mem is the
// VM's memory for Conn.Memory. The device does not own the queues.
func (d *Device) Start(mem guestmem.Source, queues []*virtq.Queue) error {
	if len(queues) != 2 || queues[QueueRX] == nil || queues[QueueTX] == nil {
		return fmt.Errorf("vsock: start needs the rx and tx queues, got %d", len(queues))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sess != nil {
		return errors.New("vsock: start: device already running")
	}
	d.mem = mem
	d.broken = nil
	s := &session{rx: queues[QueueRX], tx: queues[QueueTX], stop: make(chan struct{})}
	d.sess = s
	s.wg.Add(2)
	go d.txLoop(s)
	go d.rxLoop(s)
	d.log.Debug("device started")
	return nil
}

// Stop stops processing and returns when no goroutine touches the queues.
// With reset, the guest driver is gone (QEMU disconnected or the device was
// reset): every connection fails with ErrDeviceStopped. Without it (a memory
// table change), connections survive until the next Start.
func (d *Device) Stop(reset bool) {
	d.mu.Lock()
	s := d.sess
	d.sess = nil
	d.mu.Unlock()
	if s != nil {
		s.halt()
		s.wg.Wait()
	}
	if reset {
		d.resetAll(ErrDeviceStopped)
		d.log.Debug("device stopped, connections reset")
	}
}

// resetAll fails every connection with err and forgets queued packets.
func (d *Device) resetAll(err error) {
	d.mu.Lock()
	conns := make([]*Conn, 0, len(d.conns))
	for _, c := range d.conns {
		conns = append(conns, c)
	}
	d.ctrl = nil
	d.ready = nil
	d.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		c.terminate(err)
		c.mu.Unlock()
	}
}

// breakDevice records a guest protocol violation on a queue: both loops
// stop and the device does nothing until the guest resets it (next Start).
func (d *Device) breakDevice(s *session, err error) {
	s.halt()
	d.brokenQueues.Add(1)
	d.mu.Lock()
	first := d.broken == nil
	if first {
		d.broken = err
	}
	d.mu.Unlock()
	if first {
		d.log.Error("guest broke a virtqueue; vsock device stopped until the guest resets it", "error", err)
		go d.resetAll(fmt.Errorf("%w: %v", ErrDeviceStopped, err))
	}
}

// signal wakes the rx loop.
func (d *Device) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// queueCtrl queues a control packet for the guest. Called with d.mu not held.
func (d *Device) queueCtrl(p ctrlPkt) {
	d.mu.Lock()
	d.ctrl = append(d.ctrl, p)
	d.mu.Unlock()
	d.signal()
}

// sendRST answers a packet with RST (no connection state needed), of the
// packet's own socket type, as Linux's virtio_transport_reset_no_sock
// does: the guest matches an RST to a socket by type too.
func (d *Device) sendRST(h *Header) {
	d.queueCtrl(ctrlPkt{hdr: Header{
		SrcCID: transport.HostCID, DstCID: d.cfg.GuestCID, SrcPort: h.DstPort, DstPort: h.SrcPort,
		Type: h.Type, Op: OpRST,
	}})
}

// markReady puts c on the list of connections with data to send. Called
// with c.mu held (lock order: Conn.mu, then Device.mu).
func (d *Device) markReady(c *Conn) {
	d.mu.Lock()
	if !c.inReady {
		c.inReady = true
		d.ready = append(d.ready, c)
	}
	d.mu.Unlock()
	d.signal()
}

// removeConn forgets c. Called with c.mu held.
func (d *Device) removeConn(c *Conn) {
	d.mu.Lock()
	if d.conns[c.key] == c {
		delete(d.conns, c.key)
	}
	d.mu.Unlock()
}

// Listen starts accepting guest connections to port.
func (d *Device) Listen(port uint32, opts ListenOptions) (*Listener, error) {
	if opts.Backlog <= 0 {
		opts.Backlog = 64
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.listeners[port]; ok {
		return nil, fmt.Errorf("vsock: listen on port %d: %w", port, syscall.EADDRINUSE)
	}
	l := &Listener{d: d, port: port, opts: opts, accept: make(chan *Conn, opts.Backlog), done: make(chan struct{})}
	d.listeners[port] = l
	return l, nil
}

// txLoop processes packets the guest sends (tx queue).
func (d *Device) txLoop(s *session) {
	defer s.wg.Done()
	q := s.tx
	var c virtq.Chain
	hdrBuf := make([]byte, HeaderSize)
	for {
		n := 0
		for {
			if !d.waitReplyRoom(s) {
				return
			}
			ok, err := q.Next(&c)
			if err != nil {
				d.breakDevice(s, err)
				return
			}
			if !ok {
				break
			}
			d.handleTx(&c, hdrBuf)
			q.Push(c.Head, 0)
			if n++; n%batch == 0 {
				q.Notify()
			}
		}
		q.Notify()
		if q.EnableNotify() {
			continue
		}
		select {
		case <-s.stop:
			return
		case <-kickC(q):
		}
		select {
		case <-s.stop:
			return
		default:
		}
	}
}

// waitReplyRoom blocks while too many control packets wait for rx
// buffers; it returns false when the session stops.
func (d *Device) waitReplyRoom(s *session) bool {
	for {
		d.mu.Lock()
		n := len(d.ctrl)
		d.mu.Unlock()
		if n < maxPendingReplies {
			return true
		}
		select {
		case <-s.stop:
			return false
		case <-d.replyRoom:
		}
	}
}

// kickC returns the queue's kick channel, or nil (never ready) without one.
func kickC(q *virtq.Queue) <-chan struct{} {
	if k := q.Kick(); k != nil {
		return k.C()
	}
	return nil
}

// handleTx validates one guest packet and dispatches it.
func (d *Device) handleTx(c *virtq.Chain, hdrBuf []byte) {
	var h Header
	if c.OutLen < HeaderSize || gather(hdrBuf, c.Out, 0) < HeaderSize {
		d.badPackets.Add(1)
		d.rl.log(d.log, "short", "dropped a guest packet shorter than the vsock header", "bytes", c.OutLen)
		return
	}
	_ = h.Decode(hdrBuf)
	switch {
	case h.SrcCID != d.cfg.GuestCID:
		d.badPackets.Add(1)
		d.rl.log(d.log, "srccid", "dropped a guest packet with a foreign source CID", "packet", h.String())
		return
	case h.DstCID != transport.HostCID:
		d.badPackets.Add(1)
		d.rl.log(d.log, "dstcid", "dropped a guest packet not addressed to the host", "packet", h.String())
		return
	case h.Type != TypeStream:
		d.badPackets.Add(1)
		d.rl.log(d.log, "type", "refused a guest packet of an unsupported socket type", "packet", h.String())
		if h.Op != OpRST {
			d.sendRST(&h)
		}
		return
	case h.Len > MaxPayload || uint64(h.Len) > c.OutLen-HeaderSize:
		d.badPackets.Add(1)
		d.rl.log(d.log, "len", "refused a guest packet whose length field exceeds its buffer", "packet", h.String(), "buffer", c.OutLen-HeaderSize)
		if h.Op != OpRST {
			d.sendRST(&h)
		}
		return
	}
	if d.log.IsTrace() {
		d.log.Trace("guest packet", "packet", h.String())
	}
	fn, ok := opHandlers[h.Op]
	if !ok {
		// To add an operation, add a line to opHandlers.
		d.badPackets.Add(1)
		d.rl.log(d.log, "op", "refused a guest packet with an unknown operation", "op", h.Op, "packet", h.String())
		d.sendRST(&h)
		return
	}
	fn(d, &h, c)
}

// opHandlers dispatches guest packets by operation. To add an operation,
// add one line here.
var opHandlers = map[uint16]func(d *Device, h *Header, c *virtq.Chain){
	OpRequest:       (*Device).onRequest,
	OpResponse:      (*Device).onUnexpected, // the host never connects to the guest
	OpRST:           (*Device).onRST,
	OpShutdown:      (*Device).onShutdown,
	OpRW:            (*Device).onRW,
	OpCreditUpdate:  (*Device).onCredit,
	OpCreditRequest: (*Device).onCredit,
}

func (d *Device) lookup(h *Header) *Conn {
	d.mu.Lock()
	c := d.conns[connKey{guestPort: h.SrcPort, hostPort: h.DstPort}]
	d.mu.Unlock()
	return c
}

func (d *Device) onUnexpected(h *Header, _ *virtq.Chain) {
	d.badPackets.Add(1)
	d.rl.log(d.log, "unexpected", "refused an unexpected guest packet", "packet", h.String())
	if c := d.lookup(h); c != nil {
		c.mu.Lock()
		c.reset(fmt.Errorf("vsock: guest sent %s on an open connection: %w", OpName(h.Op), syscall.ECONNRESET))
		c.mu.Unlock()
		return
	}
	d.sendRST(h)
}

func (d *Device) onRequest(h *Header, _ *virtq.Chain) {
	key := connKey{guestPort: h.SrcPort, hostPort: h.DstPort}
	d.mu.Lock()
	if old := d.conns[key]; old != nil {
		d.mu.Unlock()
		d.badPackets.Add(1)
		d.rl.log(d.log, "dupreq", "guest repeated a connection request on an open connection; resetting it", "packet", h.String())
		old.mu.Lock()
		old.reset(fmt.Errorf("vsock: guest re-requested the connection: %w", syscall.ECONNRESET))
		old.mu.Unlock()
		return
	}
	l := d.listeners[h.DstPort]
	if l == nil {
		d.mu.Unlock()
		d.refused.Add(1)
		d.rl.log(d.log, "noport", "refused a guest connection to a port nobody listens on", "port", h.DstPort, "guest_port", h.SrcPort)
		d.sendRST(h)
		return
	}
	if l.opts.RequirePrivileged && !transport.PrivilegedPort(h.SrcPort) {
		d.mu.Unlock()
		d.refused.Add(1)
		d.rl.log(d.log, "unpriv", "refused a guest connection from an unprivileged source port (only the guest kernel may connect)",
			"port", h.DstPort, "guest_port", h.SrcPort)
		d.sendRST(h)
		return
	}
	if len(d.conns) >= d.cfg.MaxConns {
		d.mu.Unlock()
		d.refused.Add(1)
		d.rl.log(d.log, "maxconns", "refused a guest connection: too many connections for this VM", "max", d.cfg.MaxConns, "guest_port", h.SrcPort)
		d.sendRST(h)
		return
	}
	c := newConn(d, key, h)
	// RESPONSE must be queued before Accept can hand the conn out (so no
	// data of an eager Write overtakes it); both happen under d.mu.
	resp := ctrlPkt{hdr: c.header(OpResponse, 0), conn: c}
	select {
	case l.accept <- c:
		d.conns[key] = c
		d.ctrl = append(d.ctrl, resp)
		d.mu.Unlock()
		d.signal()
		d.accepted.Add(1)
	default:
		d.mu.Unlock()
		d.refused.Add(1)
		d.rl.log(d.log, "backlog", "refused a guest connection: accept backlog full", "port", h.DstPort, "guest_port", h.SrcPort)
		d.sendRST(h)
	}
}

func (d *Device) onRST(h *Header, _ *virtq.Chain) {
	c := d.lookup(h)
	if c == nil {
		return // never answer RST with RST
	}
	c.mu.Lock()
	c.updateCredit(h)
	c.terminate(fmt.Errorf("vsock: guest reset the connection: %w", syscall.ECONNRESET))
	c.mu.Unlock()
}

// lookupOrReset returns h's connection, or answers a packet for an unknown
// connection with RST (counted) and returns nil.
func (d *Device) lookupOrReset(h *Header) *Conn {
	c := d.lookup(h)
	if c == nil {
		d.unknownConn.Add(1)
		d.sendRST(h)
	}
	return c
}

func (d *Device) onShutdown(h *Header, _ *virtq.Chain) {
	c := d.lookupOrReset(h)
	if c == nil {
		return
	}
	c.mu.Lock()
	c.updateCredit(h)
	if h.Flags&ShutdownRcv != 0 {
		c.peerShutRecv = true
	}
	if h.Flags&ShutdownSend != 0 {
		c.peerShutSend = true
	}
	c.maybeFinish()
	c.broadcast()
	c.mu.Unlock()
}

func (d *Device) onCredit(h *Header, _ *virtq.Chain) {
	c := d.lookupOrReset(h)
	if c == nil {
		return
	}
	c.mu.Lock()
	c.updateCredit(h)
	if h.Op == OpCreditRequest {
		d.queueCtrl(ctrlPkt{hdr: c.header(OpCreditUpdate, 0), conn: c})
	}
	c.mu.Unlock()
}

func (d *Device) onRW(h *Header, ch *virtq.Chain) {
	c := d.lookupOrReset(h)
	if c == nil {
		d.rl.log(d.log, "unknown", "guest sent data on an unknown connection; answered RST", "packet", h.String())
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.updateCredit(h)
	if h.Len == 0 {
		return
	}
	if c.peerShutSend {
		d.badPackets.Add(1)
		c.reset(fmt.Errorf("vsock: guest sent data after shutting down its side: %w", syscall.ECONNRESET))
		return
	}
	if c.localClosed {
		// The application closed: drop the data, as Linux does after
		// SHUTDOWN_RCV, but keep the credit honest.
		c.rxCnt += h.Len
		c.fwdCnt += h.Len
		return
	}
	if uint64(c.rlen)+uint64(h.Len) > uint64(d.cfg.BufAlloc) {
		d.creditErrors.Add(1)
		d.rl.log(d.log, "credit", "guest sent beyond its credit; resetting the connection", "packet", h.String(), "buffered", c.rlen, "buf_alloc", d.cfg.BufAlloc)
		c.reset(fmt.Errorf("vsock: guest exceeded its send credit: %w", syscall.ECONNRESET))
		return
	}
	c.appendFrom(ch.Out, HeaderSize, int(h.Len))
	d.rxBytes.Add(uint64(h.Len))
	c.broadcast()
}

// rxLoop fills the guest's rx buffers with control packets and data.
func (d *Device) rxLoop(s *session) {
	defer s.wg.Done()
	q := s.rx
	var c virtq.Chain
	hdrBuf := make([]byte, HeaderSize)
	for {
		if !d.hasRxWork() {
			q.Notify()
			select {
			case <-s.stop:
				return
			case <-d.wake:
			}
			continue
		}
		n := 0
		for n < batch {
			ok, err := q.Next(&c)
			if err != nil {
				d.breakDevice(s, err)
				return
			}
			if !ok {
				break
			}
			written, used := d.fillRx(&c, hdrBuf)
			if !used {
				q.Undo()
				break
			}
			q.Push(c.Head, written)
			n++
		}
		q.Notify()
		if n > 0 {
			continue
		}
		if !d.hasRxWork() {
			continue
		}
		// Work is waiting but the guest has no rx buffers: wait for a kick.
		if q.EnableNotify() {
			continue
		}
		select {
		case <-s.stop:
			return
		case <-kickC(q):
		case <-d.wake:
		}
	}
}

func (d *Device) hasRxWork() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.ctrl) > 0 || len(d.ready) > 0
}

// fillRx writes one packet into the rx chain. It returns false when there
// was nothing to send after all (the chain must be given back).
func (d *Device) fillRx(ch *virtq.Chain, hdrBuf []byte) (uint32, bool) {
	if ch.InLen < HeaderSize {
		// A too-small rx buffer: hand it back empty, as the guest offered
		// an unusable buffer (counted, not fatal).
		d.badPackets.Add(1)
		d.rl.log(d.log, "rxsmall", "guest offered an rx buffer smaller than the vsock header", "bytes", ch.InLen)
		return 0, true
	}
	for {
		d.mu.Lock()
		if len(d.ctrl) > 0 {
			p := d.ctrl[0]
			d.ctrl[0] = ctrlPkt{}
			d.ctrl = d.ctrl[1:]
			d.mu.Unlock()
			if p.conn != nil {
				p.conn.mu.Lock()
				p.conn.fillCredit(&p.hdr)
				p.conn.mu.Unlock()
			}
			p.hdr.Encode(hdrBuf)
			scatter(ch.In, 0, hdrBuf)
			select {
			case d.replyRoom <- struct{}{}:
			default:
			}
			if d.log.IsTrace() {
				d.log.Trace("host packet", "packet", p.hdr.String())
			}
			return HeaderSize, true
		}
		if len(d.ready) == 0 {
			d.mu.Unlock()
			return 0, false
		}
		c := d.ready[0]
		d.ready[0] = nil
		d.ready = d.ready[1:]
		c.inReady = false
		d.mu.Unlock()

		c.mu.Lock()
		n := c.fillData(ch, hdrBuf)
		if len(c.wreq) > 0 && !c.done {
			if c.credit() > 0 {
				d.markReady(c)
			} else if !c.creditRequested {
				// Out of credit: ask the guest; its CREDIT_UPDATE (or any
				// packet) puts the connection back on the ready list.
				c.creditRequested = true
				d.queueCtrl(ctrlPkt{hdr: c.header(OpCreditRequest, 0), conn: c})
			}
		}
		c.mu.Unlock()
		if n > 0 {
			d.txBytes.Add(uint64(n))
			return HeaderSize + uint32(n), true
		}
		// The connection had nothing to send after all (withdrawn or out
		// of credit): try the next source.
	}
}

// rateLimiter lets through one guest-triggered log line per kind and
// interval and counts the rest.
type rateLimiter struct {
	every time.Duration
	mu    sync.Mutex
	last  map[string]time.Time
	quiet map[string]int
}

func (r *rateLimiter) log(l hclog.Logger, kind, msg string, args ...interface{}) {
	r.mu.Lock()
	if r.last == nil {
		r.last = make(map[string]time.Time)
		r.quiet = make(map[string]int)
	}
	now := time.Now()
	if now.Sub(r.last[kind]) < r.every {
		r.quiet[kind]++
		r.mu.Unlock()
		return
	}
	r.last[kind] = now
	if q := r.quiet[kind]; q > 0 {
		args = append(args, "suppressed", q)
		r.quiet[kind] = 0
	}
	r.mu.Unlock()
	l.Warn(msg, args...)
}

// Conns returns how many connections the device tracks.
func (d *Device) Conns() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.conns)
}

// DebugState describes the rings and connections (for diagnostics; racy by
// design: it reads ring indices the data path is updating).
//
// Lock order is Conn.mu, then Device.mu (markReady): the device's state is
// copied under d.mu, which is released before each connection is locked.
func (d *Device) DebugState() string {
	d.mu.Lock()
	s := fmt.Sprintf("conns=%d ctrl=%d ready=%d broken=%v", len(d.conns), len(d.ctrl), len(d.ready), d.broken)
	if d.sess != nil {
		s += "\n  " + d.sess.rx.String() + "\n  " + d.sess.tx.String()
	}
	conns := make(map[connKey]*Conn, len(d.conns))
	for k, c := range d.conns {
		conns[k] = c
	}
	d.mu.Unlock()
	for k, c := range conns {
		c.mu.Lock()
		s += fmt.Sprintf("\n  conn %d->%d: rlen=%d rx=%d fwd=%d sentfwd=%d tx=%d peer_buf=%d peer_fwd=%d wreq=%d", k.guestPort, k.hostPort,
			c.rlen, c.rxCnt, c.fwdCnt, c.lastSentFwd, c.txCnt, c.peerBufAlloc, c.peerFwdCnt, len(c.wreq))
		c.mu.Unlock()
	}
	return s
}
