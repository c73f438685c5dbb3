package fieldfuzz

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"reflect"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/protocol"
)

// Config says what to fuzz and how long.
type Config struct {
	// Dial opens a new connection to the backend under test (a host-mode
	// unix socket: shared memory travels as memfds beside frames).
	Dial func() (net.Conn, error)
	// Duration: 0 runs every case of Cases once; more also sends random
	// mutations (several fields at once, any opcode) until it has passed.
	Duration time.Duration
	Seed     uint64
	// Timeout bounds each reply (default 30 s: a real GPU may be busy).
	Timeout time.Duration
	// Panics, if set, returns the backend's count of panics caught at its
	// sessions' recover boundary (each is a bug, even if the process lived).
	Panics func() (uint64, error)
	// Only, if set, limits the cases to these opcodes.
	Only map[protocol.Opcode]bool
	// Limits are the backend's (for sizes near them; default
	// protocol.DefaultLimits).
	Limits protocol.Limits
	// Logf reports progress (nil: quiet).
	Logf func(format string, args ...any)
	// GoodEvery is how many cases pass between two round trips of the good
	// client (default 50).
	GoodEvery int
}

// Report is what a run did.
type Report struct {
	Cases      int
	Random     int
	Reconnects int
	GoodRounds int
	Statuses   map[int32]int // reply statuses seen
	Ops        map[protocol.Opcode]int
}

// Fuzzer is a fuzzed connection (with the world it built) and the good
// client beside it.
type Fuzzer struct {
	r   *runner
	rep Report
}

// Start connects the good client (and checks it works) and the fuzzed
// connection, and builds the world.
func Start(cfg Config) (*Fuzzer, error) {
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Limits == (protocol.Limits{}) {
		cfg.Limits = protocol.DefaultLimits
	}
	if cfg.GoodEvery == 0 {
		cfg.GoodEvery = 50
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	fz := &Fuzzer{rep: Report{Statuses: map[int32]int{}, Ops: map[protocol.Opcode]int{}}}
	r := &runner{cfg: cfg, rep: &fz.rep, logf: logf}
	fz.r = r
	good, err := r.connect()
	if err != nil {
		return nil, fmt.Errorf("the good client: %w", err)
	}
	r.good = good
	if err := r.goodRound(); err != nil {
		good.close()
		return nil, err
	}
	if err := r.reconnect(); err != nil {
		good.close()
		return nil, err
	}
	return fz, nil
}

// World is what the fuzzed connection holds now.
func (fz *Fuzzer) World() *World { return fz.r.w }

// Send sends one case (and checks the good client every GoodEvery cases).
func (fz *Fuzzer) Send(c Case) error {
	if err := fz.r.one(c); err != nil {
		return err
	}
	fz.rep.Cases++
	if fz.rep.Cases%fz.r.cfg.GoodEvery == 0 {
		return fz.r.check()
	}
	return nil
}

// Check runs the good client's round trip and reads the panic count.
func (fz *Fuzzer) Check() error { return fz.r.check() }

// Close ends both connections.
func (fz *Fuzzer) Close() {
	fz.r.att.close()
	fz.r.good.close()
}

// Report is what was sent so far.
func (fz *Fuzzer) Report() Report { return fz.rep }

// Run fuzzes until every case has been sent (and Duration has passed). It
// returns the first failure: a case without a reply, a connection the
// backend ended, a caught panic, or the good client's bytes differing.
func Run(ctx context.Context, cfg Config) (Report, error) {
	fz, err := Start(cfg)
	if err != nil {
		return Report{}, err
	}
	defer fz.Close()
	r, rep, logf := fz.r, &fz.rep, fz.r.logf
	cfg = r.cfg

	cases := Cases(r.w, cfg.Limits)
	for i := 0; i < len(cases); i++ {
		if ctx.Err() != nil {
			return *rep, ctx.Err()
		}
		c := cases[i]
		if cfg.Only != nil && !cfg.Only[c.Op] {
			continue
		}
		// Cases name the world they were made for: remake them when the
		// world changed.
		if err := r.one(c); err != nil {
			return *rep, err
		}
		if r.rebuilt {
			cases = append(cases[:i+1], remake(r.w, cfg.Limits, cases, i)...)
			r.rebuilt = false
		}
		rep.Cases++
		if rep.Cases%cfg.GoodEvery == 0 {
			if err := r.check(); err != nil {
				return *rep, err
			}
		}
		if rep.Cases%1000 == 0 {
			logf("fieldfuzz: %d cases, %d reconnects", rep.Cases, rep.Reconnects)
		}
	}
	if err := r.check(); err != nil {
		return *rep, err
	}
	if err := r.goodbye(); err != nil {
		return *rep, err
	}
	// Random mutations: several fields of one request at once.
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	end := time.Now().Add(cfg.Duration)
	for cfg.Duration > 0 && time.Now().Before(end) {
		if ctx.Err() != nil {
			return *rep, ctx.Err()
		}
		c := r.randomCase(rng)
		if cfg.Only != nil && !cfg.Only[c.Op] {
			continue
		}
		if err := r.one(c); err != nil {
			return *rep, err
		}
		rep.Random++
		if rep.Random%cfg.GoodEvery == 0 {
			if err := r.check(); err != nil {
				return *rep, err
			}
		}
		if rep.Random%5000 == 0 {
			logf("fieldfuzz: %d random cases, %d reconnects", rep.Random, rep.Reconnects)
		}
	}
	return *rep, r.check()
}

type runner struct {
	cfg       Config
	rep       *Report
	logf      func(string, ...any)
	good, att *client
	w         *World
	rebuilt   bool
	sinceNew  int
	recent    [recentCases]string // the cases sent last (ring), for a failure's report
	nRecent   int
}

// recentCases is how many of the cases before a failure it reports: a
// hang may be caused by an earlier case (a kernel still running).
const recentCases = 24

func (r *runner) remember(c Case) {
	r.recent[r.nRecent%recentCases] = fmt.Sprintf("%v flags=%#x payload=%x segs=%v", c, uint32(c.Flags), c.Payload, c.Segs)
	r.nRecent++
}

// history lists the cases sent last, oldest first.
func (r *runner) history() string {
	var b strings.Builder
	for i := max(r.nRecent-recentCases, 0); i < r.nRecent; i++ {
		b.WriteString("\n  ")
		b.WriteString(r.recent[i%recentCases])
	}
	return b.String()
}

// Also sets a second field of an unbatched case to v.
func (fz *Fuzzer) Also(c *Case, field int, v uint64) {
	info, ok := protocol.Lookup(c.Op)
	if !ok || c.Batched {
		return
	}
	if fields := FieldsOf(reflect.TypeOf(info.Req)); len(fields) > 0 {
		put(c.Payload, fields[field%len(fields)], v)
	}
}

// Case builds a case for opcode index op, field index field set to v (a
// raw value, or with pick an index into Values), batched if it can be: the
// form a native fuzz target drives.
func (fz *Fuzzer) Case(op, field int, v uint64, pick bool, batched bool) Case {
	info := &protocol.Ops[op%len(protocol.Ops)]
	seed, segs := fz.r.w.Seed(info)
	c := Case{Op: info.Op, Payload: append([]byte(nil), seed...), Segs: segs}
	fields := FieldsOf(reflect.TypeOf(info.Req))
	if len(fields) > 0 {
		f := fields[field%len(fields)]
		if pick {
			vs := Values(f.Size, fz.r.w, fz.r.cfg.Limits)
			v = vs[v%uint64(len(vs))]
		}
		put(c.Payload, f, v)
		c.Field, c.Value = f.Name, v
	}
	if batched && info.Batchable() && segs == nil {
		sub := protocol.AppendBatchCall(nil, protocol.NewHeader(info.Op, 1), c.Payload)
		c.Payload = append(protocol.Bytes(&protocol.BatchReq{Count: 1}), sub...)
		c.Batched = true
	}
	return c
}

// connect opens a connection and says HELLO.
func (r *runner) connect() (*client, error) {
	nc, err := r.cfg.Dial()
	if err != nil {
		return nil, err
	}
	c := newClient(nc, r.cfg.Timeout)
	f, err := c.call(protocol.OpHello, 0, protocol.Bytes(&protocol.HelloReq{Major: uint16(protocol.Major), Minor: uint16(protocol.Minor), Role: protocol.RoleLibrary, Features: ^uint64(0)}), nil, nil)
	if err != nil {
		c.close()
		return nil, fmt.Errorf("HELLO: %w", err)
	}
	if f.Status != 0 {
		c.close()
		return nil, fmt.Errorf("HELLO refused: status %d", f.Status)
	}
	hr, _, _ := protocol.Decode[protocol.HelloReply](f.Payload)
	c.features = hr.Features
	return c, nil
}

// remake returns the cases after cases[i] for world w, opcode by opcode:
// the rest of cases[i]'s opcode (from its position within that opcode) and
// every later opcode whole. A new world may give an opcode a different
// number of cases (its handles can coincide with boundary values), so a
// position in the whole list does not carry over: splicing by it skipped
// whole opcodes now and then.
func remake(w *World, lim protocol.Limits, cases []Case, i int) []Case {
	op := cases[i].Op
	k := 0
	for j := i - 1; j >= 0 && cases[j].Op == op; j-- {
		k++
	}
	var out []Case
	after := false
	for n := range protocol.Ops {
		info := &protocol.Ops[n]
		switch {
		case after:
			out = append(out, OpCases(w, lim, info)...)
		case info.Op == op:
			if oc := OpCases(w, lim, info); k+1 < len(oc) {
				out = append(out, oc[k+1:]...)
			}
			after = true
		}
	}
	return out
}

// reconnect drops the fuzzed connection and builds a new world on a new one.
func (r *runner) reconnect() error {
	if r.att != nil {
		r.att.close()
		r.rep.Reconnects++
	}
	c, err := r.connect()
	if err != nil {
		return fmt.Errorf("reconnecting: %w", err)
	}
	r.att = c
	w, err := buildWorld(c)
	if err != nil {
		return fmt.Errorf("building a world: %w", err)
	}
	r.w = w
	r.rebuilt = true
	r.sinceNew = 0
	return nil
}

// one sends one case, and a PING behind it: both must be answered. A
// failure's error lists the cases sent last on this connection.
func (r *runner) one(c Case) error {
	r.remember(c)
	if err := r.send(c); err != nil {
		return fmt.Errorf("%w\nthe last cases sent on that connection, oldest first (Go %%v, header flags, payload and segments in hex):%s", err, r.history())
	}
	return nil
}

func (r *runner) send(c Case) error {
	r.rep.Ops[c.Op]++
	if c.Op == protocol.OpGoodbye && c.Flags&^protocol.FlagNoReply == 0 {
		return nil // an accepted GOODBYE ends the connection: see goodbye
	}
	var fds []int
	if c.Op == protocol.OpHostShare {
		fd, err := sealedMemfd(4096)
		if err == nil {
			fds = []int{fd}
			defer unix.Close(fd)
		}
	}
	f, err := r.att.call(c.FrameOp(), c.Flags, c.Payload, c.Segs, fds)
	if c.Flags&protocol.FlagNoReply != 0 && errors.Is(err, errNoReplyWanted) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("case %v: %w", c, err)
	}
	if c.Flags&protocol.FlagNoReply == 0 {
		r.rep.Statuses[f.Status]++
		if f.Status == 999 {
			return fmt.Errorf("case %v: CUDA_ERROR_UNKNOWN (an internal error of the backend)", c)
		}
	}
	if pf, err := r.att.call(protocol.OpPing, 0, nil, nil, nil); err != nil || pf.Status != 0 {
		return fmt.Errorf("case %v: the session stopped serving (ping: %v, status %d)", c, err, pf.Status)
	}
	r.sinceNew++
	if (Destroys(c.Op) && f.Status == 0) || r.sinceNew >= 500 {
		r.nRecent = 0
		return r.reconnect()
	}
	return nil
}

// check: the good client round-trips, and no panic was caught.
func (r *runner) check() error {
	if err := r.goodRound(); err != nil {
		return err
	}
	if r.cfg.Panics != nil {
		n, err := r.cfg.Panics()
		if err != nil {
			return fmt.Errorf("reading the backend's panic count: %w", err)
		}
		if n != 0 {
			return fmt.Errorf("the backend caught %d panics at its sessions' recover boundary", n)
		}
	}
	return nil
}

// goodRound is the well-behaved client's checked round trip.
func (r *runner) goodRound() error {
	g := r.good
	r.rep.GoodRounds++
	const n = 4096
	f, err := g.call(protocol.OpMemAlloc, 0, protocol.Bytes(&protocol.MemAllocReq{Size: n}), nil, nil)
	if err != nil || f.Status != 0 {
		return fmt.Errorf("good client: alloc: %v status %d", err, f.Status)
	}
	p := binary.LittleEndian.Uint64(f.Payload)
	want := make([]byte, n)
	for i := range want {
		want[i] = byte(i*31 + r.rep.GoodRounds)
	}
	h := protocol.MemcpyHtoDReq{Dst: p, Src: protocol.BufRef{Kind: protocol.BufInline, Len: n}}
	if f, err := g.call(protocol.OpMemcpyHtoD, 0, append(protocol.Bytes(&h), want...), nil, nil); err != nil || f.Status != 0 {
		return fmt.Errorf("good client: htod: %v status %d", err, f.Status)
	}
	d := protocol.MemcpyDtoHReq{Src: p, Dst: protocol.BufRef{Kind: protocol.BufInline, Len: n}}
	f, err = g.call(protocol.OpMemcpyDtoH, 0, protocol.Bytes(&d), nil, nil)
	if err != nil || f.Status != 0 {
		return fmt.Errorf("good client: dtoh: %v status %d", err, f.Status)
	}
	if !bytes.Equal(f.Payload, want) {
		return errors.New("good client: the bytes read back differ from those written")
	}
	if f, err := g.call(protocol.OpMemFree, 0, protocol.Bytes(&protocol.PtrReq{Ptr: p}), nil, nil); err != nil || f.Status != 0 {
		return fmt.Errorf("good client: free: %v status %d", err, f.Status)
	}
	return nil
}

// goodbye: GOODBYE is answered, then the connection ends.
func (r *runner) goodbye() error {
	c, err := r.connect()
	if err != nil {
		return err
	}
	defer c.close()
	f, err := c.call(protocol.OpGoodbye, 0, nil, nil, nil)
	if err != nil || f.Status != 0 {
		return fmt.Errorf("GOODBYE: %v status %d", err, f.Status)
	}
	select {
	case <-c.dead:
	case <-time.After(r.cfg.Timeout):
		return errors.New("the backend kept the connection after GOODBYE")
	}
	return nil
}

// randomCase mutates 1-4 fields of a random opcode's seed.
func (r *runner) randomCase(rng *rand.Rand) Case {
	info := &protocol.Ops[rng.IntN(len(protocol.Ops))]
	if info.Op == protocol.OpGoodbye {
		info = &protocol.Ops[0]
	}
	seed, segs := r.w.Seed(info)
	fields := FieldsOf(reflect.TypeOf(info.Req))
	c := Case{Op: info.Op, Payload: append([]byte(nil), seed...), Segs: segs}
	if len(fields) == 0 {
		return c
	}
	for k := 1 + rng.IntN(4); k > 0; k-- {
		f := fields[rng.IntN(len(fields))]
		vs := Values(f.Size, r.w, r.cfg.Limits)
		v := vs[rng.IntN(len(vs))]
		if rng.IntN(4) == 0 {
			v = rng.Uint64()
		}
		put(c.Payload, f, v)
		c.Field, c.Value = f.Name, v
	}
	tame(info, c.Payload)
	if info.Batchable() && segs == nil && rng.IntN(2) == 0 {
		sub := protocol.AppendBatchCall(nil, protocol.NewHeader(info.Op, 1), c.Payload)
		c.Payload = append(protocol.Bytes(&protocol.BatchReq{Count: 1}), sub...)
		c.Batched = true
	}
	return c
}

// MaxRandomBlocks bounds the blocks of a launch whose grid the random
// phase mutated in several dimensions. Such a grid is valid: on a real GPU
// 2^31-1 x 65535 blocks run for hours, and every later synchronous call of
// the session waits for them as it would natively (on the H100 that was
// the "hang" of bench/results/2026-11-25-h100-fuzz; the backend's
// --call-timeout now ends such a wait). Each dimension alone still gets
// every boundary value (Cases), and the random phase still sends the
// largest grid of each dimension.
const MaxRandomBlocks = 1 << 31

// tame sets the other grid dimensions of a launch (LAUNCH_KERNEL,
// LAUNCH_KERNEL_EX) past MaxRandomBlocks to 1, keeping its largest.
func tame(info *protocol.OpInfo, p []byte) {
	if !strings.HasPrefix(info.Name, "LAUNCH_KERNEL") {
		return
	}
	var dims []Field
	for _, f := range FieldsOf(reflect.TypeOf(info.Req)) {
		if strings.HasSuffix(f.Name, "GridX") || strings.HasSuffix(f.Name, "GridY") || strings.HasSuffix(f.Name, "GridZ") {
			dims = append(dims, f)
		}
	}
	get := func(f Field) uint64 {
		var v uint64
		for i := 0; i < f.Size; i++ {
			v |= uint64(p[f.Offset+i]) << (8 * i)
		}
		return v
	}
	blocks, big := uint64(1), 0
	for i, f := range dims {
		v := max(get(f), 1)
		if v > get(dims[big]) {
			big = i
		}
		if blocks > MaxRandomBlocks/v {
			blocks = MaxRandomBlocks + 1
			continue
		}
		blocks *= v
	}
	if blocks <= MaxRandomBlocks {
		return
	}
	for i, f := range dims {
		if i != big {
			put(p, f, 1)
		}
	}
}

// buildWorld makes the objects seeds refer to.
func buildWorld(c *client) (*World, error) {
	w := &World{CallbackID: 1}
	mustCall := func(op protocol.Opcode, payload []byte, segs []protocol.Segment, fds []int) ([]byte, error) {
		f, err := c.call(op, 0, payload, segs, fds)
		if err != nil {
			return nil, fmt.Errorf("%v: %w", op, err)
		}
		if f.Status != 0 {
			return nil, fmt.Errorf("%v: status %d", op, f.Status)
		}
		return f.Payload, nil
	}
	u64 := func(b []byte) uint64 {
		if len(b) < 8 {
			return 0
		}
		return binary.LittleEndian.Uint64(b)
	}
	for _, p := range []*uint64{&w.Ptr, &w.Ptr2} {
		b, err := mustCall(protocol.OpMemAlloc, protocol.Bytes(&protocol.MemAllocReq{Size: WorldBytes}), nil, nil)
		if err != nil {
			return nil, err
		}
		*p = u64(b)
	}
	b, err := mustCall(protocol.OpStreamCreate, protocol.Bytes(&protocol.StreamCreateReq{}), nil, nil)
	if err != nil {
		return nil, err
	}
	w.Stream = u64(b)
	for _, e := range []*uint64{&w.Event, &w.Event2} {
		b, err := mustCall(protocol.OpEventCreate, protocol.Bytes(&protocol.EventCreateReq{}), nil, nil)
		if err != nil {
			return nil, err
		}
		*e = u64(b)
	}
	img := []byte(PTX)
	b, err = mustCall(protocol.OpModuleLoad, append(protocol.Bytes(&protocol.ModuleLoadReq{Kind: protocol.ImagePTX,
		Image: protocol.BufRef{Kind: protocol.BufInline, Len: uint64(len(img))}}), img...), nil, nil)
	if err != nil {
		return nil, err
	}
	w.Module = u64(b)
	b, err = mustCall(protocol.OpModuleGetFunction, append(protocol.Bytes(&protocol.NameReq{Module: w.Module, NameLen: 5}), "saxpy"...), nil, nil)
	if err != nil {
		return nil, err
	}
	fr, _, _ := protocol.Decode[protocol.FunctionReply](b)
	w.Func, w.ParamBytes = fr.Func, fr.ParamBytes
	if c.features&protocol.FeatureHostShare != 0 && c.uc != nil {
		fd, err := sealedMemfd(WorldBytes * 8)
		if err != nil {
			return nil, err
		}
		const base = 1 << 40
		_, err = mustCall(protocol.OpHostShare, protocol.Bytes(&protocol.HostShareReq{Base: base, Size: WorldBytes * 4}), nil, []int{fd})
		unix.Close(fd)
		if err != nil {
			return nil, err
		}
		w.SegBase, w.ShareBase = base, base
		b, err := mustCall(protocol.OpGuestRegister, protocol.Bytes(&protocol.GuestRegisterReq{Size: WorldBytes}), []protocol.Segment{{GPA: base, Len: WorldBytes}}, nil)
		if err != nil {
			return nil, err
		}
		w.Region = u64(b)
	}
	return w, nil
}

func sealedMemfd(size int64) (int, error) {
	fd, err := unix.MemfdCreate("vgpu-fieldfuzz", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, err
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

var errNoReplyWanted = errors.New("fieldfuzz: no reply wanted")

// client is a protocol client that answers host functions at once.
type client struct {
	nc       net.Conn
	uc       *net.UnixConn
	timeout  time.Duration
	features uint64
	wmu      sync.Mutex
	mu       sync.Mutex
	next     uint64
	waiting  map[uint64]chan protocol.Frame
	dead     chan struct{}
	err      error
}

func newClient(nc net.Conn, timeout time.Duration) *client {
	c := &client{nc: nc, timeout: timeout, waiting: map[uint64]chan protocol.Frame{}, dead: make(chan struct{}), next: 1 << 32}
	c.uc, _ = nc.(*net.UnixConn)
	go c.read()
	return c
}

func (c *client) read() {
	defer close(c.dead)
	lim := protocol.Limits{MaxPayload: 1 << 30, MaxSegments: 1 << 20}
	for {
		f, err := protocol.ReadFrame(c.nc, lim)
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			return
		}
		if f.Flags&protocol.FlagNotify != 0 {
			if f.Opcode == protocol.OpNotifyHostFunc {
				n, _, _ := protocol.Decode[protocol.HostFuncNotify](f.Payload)
				go c.send(protocol.OpHostFuncDone, protocol.FlagNoReply, protocol.Bytes(&protocol.HostFuncDoneReq{CallbackID: n.CallbackID}), nil, nil, c.id())
			}
			continue
		}
		c.mu.Lock()
		ch := c.waiting[f.RequestID]
		delete(c.waiting, f.RequestID)
		c.mu.Unlock()
		if ch != nil {
			ch <- f
		}
	}
}

func (c *client) id() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	return c.next
}

func (c *client) send(op protocol.Opcode, flags protocol.Flags, payload []byte, segs []protocol.Segment, fds []int, id uint64) error {
	h := protocol.NewHeader(op, id)
	h.Flags = flags
	if len(segs) > 0 {
		h.Flags |= protocol.FlagSegments
	}
	b := protocol.AppendFrame(nil, h, payload, segs)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.timeout))
	if len(fds) > 0 && c.uc != nil {
		_, _, err := c.uc.WriteMsgUnix(b, unix.UnixRights(fds...), nil)
		return err
	}
	_, err := c.nc.Write(b)
	return err
}

// call sends a request and waits for its reply (errNoReplyWanted with
// FlagNoReply).
func (c *client) call(op protocol.Opcode, flags protocol.Flags, payload []byte, segs []protocol.Segment, fds []int) (protocol.Frame, error) {
	id := c.id()
	ch := make(chan protocol.Frame, 1)
	if flags&protocol.FlagNoReply == 0 {
		c.mu.Lock()
		c.waiting[id] = ch
		c.mu.Unlock()
	}
	if err := c.send(op, flags, payload, segs, fds, id); err != nil {
		return protocol.Frame{}, fmt.Errorf("sending: %w", err)
	}
	if flags&protocol.FlagNoReply != 0 {
		return protocol.Frame{}, errNoReplyWanted
	}
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	select {
	case f := <-ch:
		return f, nil
	case <-c.dead:
		// The reader delivers a reply before it marks the connection
		// dead (GOODBYE's reply, then the close): select picks either
		// ready case, so a delivered reply is taken first.
		select {
		case f := <-ch:
			return f, nil
		default:
		}
		c.mu.Lock()
		err := c.err
		c.mu.Unlock()
		if errors.Is(err, io.EOF) {
			err = errors.New("the backend closed the connection")
		}
		return protocol.Frame{}, err
	case <-t.C:
		return protocol.Frame{}, fmt.Errorf("no reply within %v", c.timeout)
	}
}

func (c *client) close() {
	_ = c.nc.Close()
	<-c.dead
}
