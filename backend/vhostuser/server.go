package vhostuser

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/virtq"
)

// Backend is the virtio device behind a Server (package vsock's Device).
type Backend interface {
	// Features returns the virtio feature bits the device offers (the
	// server adds VHOST_USER_F_PROTOCOL_FEATURES).
	Features() uint64
	// NumQueues is how many vrings the backend serves.
	NumQueues() int
	// ReadConfig returns size bytes of config space at offset.
	ReadConfig(offset, size uint32) ([]byte, error)
	// Start begins processing; the queues stay owned by the server.
	Start(mem guestmem.Source, queues []*virtq.Queue) error
	// Stop ends processing and returns when the queues are no longer
	// touched. reset means the guest driver is gone (connections die);
	// otherwise the server restarts the device at once (new memory table).
	Stop(reset bool)
}

// ErrNoMemory is returned by Server.Acquire before QEMU sent a memory table.
var ErrNoMemory = errors.New("vhost-user: QEMU has not sent a memory table")

// Server serves one VM's vhost-user socket: QEMU connects to it (one
// front-end at a time; a reconnect after QEMU restarts is served afresh).
type Server struct {
	path    string
	ln      *net.UnixListener
	backend Backend
	log     hclog.Logger

	mem guestmem.Latest // QEMU's memory table, for the backend

	connMu sync.Mutex
	conn   *net.UnixConn
	closed bool
}

// Listen creates the unix socket at path (replacing a stale socket file)
// for backend. Serve must be called to accept QEMU.
func Listen(path string, backend Backend, log hclog.Logger) (*Server, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("vhost-user: listen on %s: file exists and is not a socket; remove it or choose another path", path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("vhost-user: listen on %s: another backend is serving it", path)
		}
		_ = os.Remove(path)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("vhost-user: listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	return &Server{path: path, ln: ln, backend: backend, log: log.With("socket", path), mem: guestmem.Latest{Missing: ErrNoMemory}}, nil
}

// Path returns the socket path.
func (s *Server) Path() string { return s.path }

// Acquire returns the VM's current memory table with a reference held
// (guestmem.Source).
func (s *Server) Acquire() (*guestmem.Table, error) { return s.mem.Acquire() }

// Close stops accepting and disconnects the current front-end.
func (s *Server) Close() error {
	s.connMu.Lock()
	s.closed = true
	c := s.conn
	s.connMu.Unlock()
	if c != nil {
		c.Close()
	}
	return s.ln.Close()
}

// Serve accepts QEMU connections until ctx ends or Close is called, one at
// a time: a QEMU that connects while another is served waits until that one
// is gone (so a quick reconnect after a kill is served, but a second VM
// misconfigured onto the same socket hangs at startup; give each VM its own
// socket). A front-end that disconnects (QEMU exited or was killed) stops
// the device and resets its connections; the next connection starts fresh.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("vhost-user: accept on %s: %w", s.path, err)
		}
		s.connMu.Lock()
		if s.closed {
			s.connMu.Unlock()
			c.Close()
			return nil
		}
		s.conn = c
		s.connMu.Unlock()
		s.log.Info("QEMU connected")
		err = s.serveConn(c)
		s.connMu.Lock()
		s.conn = nil
		s.connMu.Unlock()
		c.Close()
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			s.log.Error("vhost-user connection ended", "error", err)
		} else {
			s.log.Info("QEMU disconnected")
		}
	}
}

// serveConn runs one front-end session.
func (s *Server) serveConn(c *net.UnixConn) error {
	f := newFrontEnd(s, c)
	defer f.teardown()
	for {
		m, err := readMessage(c)
		if err != nil {
			return err
		}
		if err := f.handle(m); err != nil {
			return err
		}
	}
}

// vring is the front-end's configuration of one queue.
type vring struct {
	num     uint32
	addr    *vringAddr
	base    uint16
	kick    *virtq.Notifier
	call    *virtq.Notifier
	enabled bool
}

// frontEnd is the state of one QEMU connection.
type frontEnd struct {
	s         *Server
	c         *net.UnixConn
	log       hclog.Logger
	acked     uint64
	protocol  uint64
	owner     bool
	sawEnable bool
	table     *guestmem.Table // our reference; also published via s.mem
	vrings    []vring
	queues    []*virtq.Queue // non-nil while the device runs
}

func newFrontEnd(s *Server, c *net.UnixConn) *frontEnd {
	return &frontEnd{s: s, c: c, log: s.log, vrings: make([]vring, s.backend.NumQueues())}
}

// teardown stops the device and frees everything QEMU gave us.
func (f *frontEnd) teardown() {
	f.stopDevice(true)
	for i := range f.vrings {
		f.vrings[i].closeFDs()
	}
	if f.table != nil {
		f.s.mem.Set(nil)
		f.table.Release()
		f.table = nil
	}
}

func (v *vring) closeFDs() {
	for _, n := range []**virtq.Notifier{&v.kick, &v.call} {
		if *n != nil {
			(*n).Close()
			*n = nil
		}
	}
}

// message is one request with its fds; handlers take the fds they keep
// (setting the slot to -1) and the dispatcher closes the rest.
type message struct {
	hdr  header
	body []byte
	fds  []int
}

func (m *message) takeFD(i int) int {
	fd := m.fds[i]
	m.fds[i] = -1
	return fd
}

// fdRule is how many fds a request carries.
type fdRule int

const (
	fdsNone   fdRule = iota
	fdsVring         // one, unless the payload's no-fd bit is set
	fdsRegion        // one per memory region
)

// handler describes one request type. size is the exact body size, or -1
// when the handler checks a variable-size body. reply means the request has
// its own reply (then REPLY_ACK does not apply).
type handler struct {
	name  string
	size  int
	fds   fdRule
	reply bool
	fn    func(f *frontEnd, m *message) ([]byte, error)
}

// handlers dispatches front-end requests. To support a new request, add
// one line here (and its number in protocol.go); an unknown request is
// logged with its number and refused.
var handlers = map[uint32]handler{
	reqGetFeatures:         {"GET_FEATURES", 0, fdsNone, true, (*frontEnd).getFeatures},
	reqSetFeatures:         {"SET_FEATURES", 8, fdsNone, false, (*frontEnd).setFeatures},
	reqSetOwner:            {"SET_OWNER", 0, fdsNone, false, (*frontEnd).setOwner},
	reqResetOwner:          {"RESET_OWNER", 0, fdsNone, false, (*frontEnd).resetOwner},
	reqSetMemTable:         {"SET_MEM_TABLE", -1, fdsRegion, false, (*frontEnd).setMemTable},
	reqSetVringNum:         {"SET_VRING_NUM", 8, fdsNone, false, (*frontEnd).setVringNum},
	reqSetVringAddr:        {"SET_VRING_ADDR", 40, fdsNone, false, (*frontEnd).setVringAddr},
	reqSetVringBase:        {"SET_VRING_BASE", 8, fdsNone, false, (*frontEnd).setVringBase},
	reqGetVringBase:        {"GET_VRING_BASE", 8, fdsNone, true, (*frontEnd).getVringBase},
	reqSetVringKick:        {"SET_VRING_KICK", 8, fdsVring, false, (*frontEnd).setVringKick},
	reqSetVringCall:        {"SET_VRING_CALL", 8, fdsVring, false, (*frontEnd).setVringCall},
	reqSetVringErr:         {"SET_VRING_ERR", 8, fdsVring, false, (*frontEnd).setVringErr},
	reqGetProtocolFeatures: {"GET_PROTOCOL_FEATURES", 0, fdsNone, true, (*frontEnd).getProtocolFeatures},
	reqSetProtocolFeatures: {"SET_PROTOCOL_FEATURES", 8, fdsNone, false, (*frontEnd).setProtocolFeatures},
	reqGetQueueNum:         {"GET_QUEUE_NUM", 0, fdsNone, true, (*frontEnd).getQueueNum},
	reqSetVringEnable:      {"SET_VRING_ENABLE", 8, fdsNone, false, (*frontEnd).setVringEnable},
	reqGetConfig:           {"GET_CONFIG", -1, fdsNone, true, (*frontEnd).getConfig},
}

// beforeOwner are the requests a front-end may send before SET_OWNER: the
// feature negotiation QEMU does first (vhost_user_backend_init), and
// SET_OWNER itself.
var beforeOwner = map[uint32]bool{
	reqGetFeatures: true, reqGetProtocolFeatures: true, reqSetProtocolFeatures: true, reqGetQueueNum: true, reqSetOwner: true,
}

// handle validates one message in layers (header, size, fds, body, state)
// and answers it. A returned error ends the connection: the front-end broke
// the protocol in a way a reply cannot express.
func (f *frontEnd) handle(m *message) error {
	defer func() {
		for _, fd := range m.fds {
			if fd >= 0 {
				closeFD(fd)
			}
		}
	}()
	if err := m.hdr.valid(); err != nil {
		return err
	}
	h, ok := handlers[m.hdr.Request]
	if !ok {
		err := fmt.Errorf("vhost-user: unsupported request %d (add it to handlers in server.go)", m.hdr.Request)
		f.log.Warn("refusing request", "error", err)
		return f.ack(m, err)
	}
	log := f.log.With("request", h.name)
	err := checkShape(h, m)
	if err == nil && !f.owner && !beforeOwner[m.hdr.Request] {
		// A front-end owns the device before it may set it up (QEMU sends
		// SET_OWNER right after the feature negotiation; issue 17).
		err = errors.New("the front-end has not sent SET_OWNER")
	}
	var resp []byte
	if err == nil {
		resp, err = h.fn(f, m)
	}
	if err != nil {
		err = fmt.Errorf("vhost-user %s: %w", h.name, err)
	}
	if h.reply {
		if err != nil {
			return err
		}
		log.Trace("reply", "bytes", len(resp))
		return f.reply(m.hdr.Request, resp)
	}
	if err != nil {
		log.Warn("request failed", "error", err)
	} else {
		log.Trace("done")
	}
	return f.ack(m, err)
}

// checkShape is the size and fd layer.
func checkShape(h handler, m *message) error {
	if h.size >= 0 && len(m.body) != h.size {
		return fmt.Errorf("body is %d bytes, want %d", len(m.body), h.size)
	}
	want := 0
	switch h.fds {
	case fdsVring:
		if len(m.body) >= 8 && binary.LittleEndian.Uint64(m.body)&vringNoFD == 0 {
			want = 1
		}
	case fdsRegion:
		if len(m.body) < 8 {
			return fmt.Errorf("body is %d bytes, want at least 8", len(m.body))
		}
		want = int(binary.LittleEndian.Uint32(m.body))
	}
	if len(m.fds) != want {
		return fmt.Errorf("carries %d fds, want %d", len(m.fds), want)
	}
	return nil
}

// ack answers a request without its own reply when the front-end asked
// (REPLY_ACK): 0 for success, 1 for failure.
func (f *frontEnd) ack(m *message, err error) error {
	if m.hdr.Flags&flagNeedReply == 0 || f.protocol&(1<<protoReplyAck) == 0 {
		return nil
	}
	var b [8]byte
	if err != nil {
		b[0] = 1
	}
	return f.reply(m.hdr.Request, b[:])
}

func (f *frontEnd) reply(req uint32, body []byte) error {
	buf := make([]byte, headerSize+len(body))
	h := header{Request: req, Flags: flagVersion | flagReply, Size: uint32(len(body))}
	h.encode(buf)
	copy(buf[headerSize:], body)
	if _, err := f.c.Write(buf); err != nil {
		return fmt.Errorf("vhost-user: reply to request %d: %w", req, err)
	}
	return nil
}

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.LittleEndian.PutUint64(b, v)
	return b
}

func (f *frontEnd) offered() uint64 { return f.s.backend.Features() | 1<<FeatureProtocolFeatures }

func (f *frontEnd) getFeatures(*message) ([]byte, error) { return u64(f.offered()), nil }

func (f *frontEnd) setFeatures(m *message) ([]byte, error) {
	v := binary.LittleEndian.Uint64(m.body)
	if extra := v &^ f.offered(); extra != 0 {
		return nil, fmt.Errorf("front-end acked features %#x that were not offered", extra)
	}
	f.acked = v
	return nil, nil
}

func (f *frontEnd) setOwner(*message) ([]byte, error) {
	f.owner = true
	return nil, nil
}

func (f *frontEnd) resetOwner(*message) ([]byte, error) {
	f.stopDevice(true)
	for i := range f.vrings {
		f.vrings[i].closeFDs()
		f.vrings[i] = vring{}
	}
	f.owner = false
	f.acked = 0
	return nil, nil
}

func (f *frontEnd) getProtocolFeatures(*message) ([]byte, error) { return u64(protoFeatures), nil }

func (f *frontEnd) setProtocolFeatures(m *message) ([]byte, error) {
	v := binary.LittleEndian.Uint64(m.body)
	if extra := v &^ protoFeatures; extra != 0 {
		return nil, fmt.Errorf("front-end acked protocol features %#x that were not offered", extra)
	}
	f.protocol = v
	return nil, nil
}

func (f *frontEnd) getQueueNum(*message) ([]byte, error) {
	return u64(uint64(f.s.backend.NumQueues())), nil
}

func (f *frontEnd) setMemTable(m *message) ([]byte, error) {
	regions, err := decodeMemTable(m.body)
	if err != nil {
		return nil, err
	}
	specs := make([]guestmem.RegionSpec, len(regions))
	for i, r := range regions {
		specs[i] = guestmem.RegionSpec{GuestPhys: guestmem.GPA(r.GuestPhys), Size: r.Size, UserAddr: r.UserAddr, MmapOffset: r.MmapOffset, FD: m.takeFD(i)}
	}
	t, err := guestmem.NewTable(specs)
	if err != nil {
		return nil, fmt.Errorf("map guest memory: %w", err)
	}
	running := f.queues != nil
	if running {
		f.stopDevice(false)
	}
	old := f.table
	f.table = t
	if err := t.Retain(); err == nil {
		f.s.mem.Set(t)
	}
	if old != nil {
		old.Release()
	}
	if f.log.IsDebug() {
		var layout []string
		for _, r := range regions {
			layout = append(layout, fmt.Sprintf("[%#x, +%#x)", r.GuestPhys, r.Size))
		}
		f.log.Debug("memory table", "regions", len(regions), "guest_phys", strings.Join(layout, " "))
	}
	if running {
		if err := f.maybeStart(); err != nil {
			// The rings do not fit the new table: the guest's connections
			// cannot go on.
			f.s.backend.Stop(true)
			return nil, err
		}
	}
	return nil, nil
}

// ring returns the vring named by a payload's index field.
func (f *frontEnd) ring(idx uint32) (*vring, error) {
	if idx >= uint32(len(f.vrings)) {
		return nil, fmt.Errorf("vring index %d out of range (device has %d)", idx, len(f.vrings))
	}
	return &f.vrings[idx], nil
}

func (f *frontEnd) setVringNum(m *message) ([]byte, error) {
	st := decodeState(m.body)
	v, err := f.ring(st.Index)
	if err != nil {
		return nil, err
	}
	if st.Num == 0 || st.Num > virtq.MaxSize || st.Num&(st.Num-1) != 0 {
		return nil, fmt.Errorf("vring %d size %d is not a power of two in 1..%d", st.Index, st.Num, virtq.MaxSize)
	}
	if f.queues != nil {
		return nil, fmt.Errorf("vring %d: size change while the device runs", st.Index)
	}
	v.num = st.Num
	return nil, nil
}

func (f *frontEnd) setVringAddr(m *message) ([]byte, error) {
	a := decodeAddr(m.body)
	v, err := f.ring(a.Index)
	if err != nil {
		return nil, err
	}
	if f.queues != nil {
		return nil, fmt.Errorf("vring %d: address change while the device runs", a.Index)
	}
	v.addr = &a
	return nil, nil
}

func (f *frontEnd) setVringBase(m *message) ([]byte, error) {
	st := decodeState(m.body)
	v, err := f.ring(st.Index)
	if err != nil {
		return nil, err
	}
	if st.Num > 0xffff {
		return nil, fmt.Errorf("vring %d base %d exceeds 16 bits", st.Index, st.Num)
	}
	if f.queues != nil {
		return nil, fmt.Errorf("vring %d: base change while the device runs", st.Index)
	}
	v.base = uint16(st.Num)
	return nil, nil
}

// getVringBase stops the ring (the device stops as a whole: vsock has no
// use for half of its queues) and reports where it stopped.
func (f *frontEnd) getVringBase(m *message) ([]byte, error) {
	st := decodeState(m.body)
	v, err := f.ring(st.Index)
	if err != nil {
		return nil, err
	}
	f.stopDevice(true)
	if v.kick != nil {
		v.kick.Close()
		v.kick = nil
	}
	b := make([]byte, 8)
	binary.LittleEndian.PutUint32(b[0:], st.Index)
	binary.LittleEndian.PutUint32(b[4:], uint32(v.base))
	return b, nil
}

func (f *frontEnd) vringFD(m *message, name string) (*vring, *virtq.Notifier, error) {
	p := binary.LittleEndian.Uint64(m.body)
	v, err := f.ring(uint32(p & vringIdxMask))
	if err != nil {
		return nil, nil, err
	}
	if p&^(vringIdxMask|vringNoFD) != 0 {
		return nil, nil, fmt.Errorf("payload %#x has unknown bits", p)
	}
	if p&vringNoFD != 0 {
		return v, nil, nil
	}
	n, err := virtq.NewNotifier(m.takeFD(0), fmt.Sprintf("%s-%d", name, p&vringIdxMask))
	return v, n, err
}

func (f *frontEnd) setVringKick(m *message) ([]byte, error) {
	v, n, err := f.vringFD(m, "kick")
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, errors.New("polling mode (no kick fd) is not supported")
	}
	if f.queues != nil {
		// A new kick fd for a running ring: restart over the new one.
		f.stopDevice(false)
	}
	if v.kick != nil {
		v.kick.Close()
	}
	v.kick = n
	// Without VHOST_USER_F_PROTOCOL_FEATURES rings start enabled. Front-ends
	// that negotiate it but never send SET_VRING_ENABLE (older QEMU for
	// non-net devices) get the same, as libvhost-user does.
	if f.acked&(1<<FeatureProtocolFeatures) == 0 || !f.sawEnable {
		v.enabled = true
	}
	return nil, f.maybeStart()
}

func (f *frontEnd) setVringCall(m *message) ([]byte, error) {
	v, n, err := f.vringFD(m, "call")
	if err != nil {
		return nil, err
	}
	old := v.call
	v.call = n
	idx := binary.LittleEndian.Uint64(m.body) & vringIdxMask
	if f.queues != nil {
		f.queues[idx].SetCall(n)
	}
	if old != nil {
		old.Close()
	}
	return nil, nil
}

func (f *frontEnd) setVringErr(m *message) ([]byte, error) {
	_, n, err := f.vringFD(m, "err")
	if err != nil {
		return nil, err
	}
	// The device never reports ring errors through the err fd; it logs
	// them and marks itself broken instead.
	if n != nil {
		n.Close()
	}
	return nil, nil
}

func (f *frontEnd) setVringEnable(m *message) ([]byte, error) {
	st := decodeState(m.body)
	v, err := f.ring(st.Index)
	if err != nil {
		return nil, err
	}
	if st.Num > 1 {
		return nil, fmt.Errorf("vring %d enable value %d (want 0 or 1)", st.Index, st.Num)
	}
	f.sawEnable = true
	v.enabled = st.Num == 1
	if !v.enabled {
		f.stopDevice(false)
		return nil, nil
	}
	return nil, f.maybeStart()
}

func (f *frontEnd) getConfig(m *message) ([]byte, error) {
	if f.protocol&(1<<protoConfig) == 0 {
		return nil, errors.New("VHOST_USER_PROTOCOL_F_CONFIG was not negotiated")
	}
	if len(m.body) < 12 {
		return nil, fmt.Errorf("body is %d bytes, want at least 12", len(m.body))
	}
	off := binary.LittleEndian.Uint32(m.body[0:])
	size := binary.LittleEndian.Uint32(m.body[4:])
	if size > maxConfig || len(m.body) != 12+int(size) {
		return nil, fmt.Errorf("config request of %d bytes in a %d-byte body", size, len(m.body))
	}
	cfg, err := f.s.backend.ReadConfig(off, size)
	if err != nil {
		return nil, err
	}
	resp := make([]byte, 12+len(cfg))
	copy(resp, m.body[:12])
	binary.LittleEndian.PutUint32(resp[4:], uint32(len(cfg)))
	copy(resp[12:], cfg)
	return resp, nil
}

// maybeStart starts the device once every ring is fully set up.
func (f *frontEnd) maybeStart() error {
	if f.queues != nil || f.table == nil {
		return nil
	}
	for i := range f.vrings {
		v := &f.vrings[i]
		if v.num == 0 || v.addr == nil || v.kick == nil || !v.enabled {
			return nil
		}
	}
	queues := make([]*virtq.Queue, len(f.vrings))
	release := func() {
		for _, q := range queues {
			if q != nil {
				q.Close()
			}
		}
	}
	for i := range f.vrings {
		v := &f.vrings[i]
		var gpas [3]guestmem.GPA
		for j, ua := range []uint64{v.addr.Desc, v.addr.Avail, v.addr.Used} {
			g, err := f.table.UserToGPA(ua)
			if err != nil {
				release()
				return fmt.Errorf("start vring %d: translate ring address: %w", i, err)
			}
			gpas[j] = g
		}
		q, err := virtq.New(f.table, virtq.Config{
			Name: fmt.Sprintf("vring%d", i), Size: uint16(v.num),
			Desc: gpas[0], Avail: gpas[1], Used: gpas[2],
			LastAvail: v.base, ReadUsedIdx: true,
			EventIdx: f.acked&(1<<virtq.FeatureEventIdx) != 0,
			Indirect: f.acked&(1<<virtq.FeatureIndirectDesc) != 0,
		}, v.kick, v.call)
		if err != nil {
			release()
			return fmt.Errorf("start vring %d: %w", i, err)
		}
		queues[i] = q
	}
	if err := f.s.backend.Start(f.s, queues); err != nil {
		release()
		return fmt.Errorf("start device: %w", err)
	}
	f.queues = queues
	f.log.Info("device started", "queues", len(queues), "event_idx", f.acked&(1<<virtq.FeatureEventIdx) != 0)
	return nil
}

// stopDevice stops a running device and records where each ring stopped.
// With reset the backend also drops its connections (even when it was not
// running, so a broken device is cleared).
func (f *frontEnd) stopDevice(reset bool) {
	if f.queues == nil {
		if reset {
			f.s.backend.Stop(true)
		}
		return
	}
	f.s.backend.Stop(reset)
	for i, q := range f.queues {
		f.vrings[i].base = q.LastAvail()
		q.Close()
	}
	f.queues = nil
	f.log.Debug("device stopped", "reset", reset)
}
