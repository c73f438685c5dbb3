package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/budget"
	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/handoff"
	"github.com/vgpu-project/vgpu/backend/hostmode"
	"github.com/vgpu-project/vgpu/backend/server"
	"github.com/vgpu-project/vgpu/backend/session"
	"github.com/vgpu-project/vgpu/backend/transport"
	"github.com/vgpu-project/vgpu/protocol"
)

// Manager starts worker processes and hands them guest connections: one
// per guest process (PerProcess, from a pool of started workers) or one per
// VM (PerVM).
type Manager struct {
	// Command returns the command that runs a worker ("vgpu worker ...";
	// vm is "" for a PerProcess worker, which learns its VM with its
	// session); the manager adds the control socket as fd 3.
	Command func(vm string) *exec.Cmd
	Log     hclog.Logger
	Mode    Mode
	// Pool is how many started workers a PerProcess manager keeps ready
	// (cuInit done, contexts created) for the next guest processes; 0:
	// none, each starts its worker when it connects.
	Pool int
	// StartTimeout bounds a worker's start (0: DefaultStartTimeout).
	StartTimeout time.Duration
	// IdleTimeout stops a PerVM worker once it has had no session for this
	// long, releasing its CUDA context and its mappings of guest RAM (a
	// VM that is gone never comes back for them). 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MemLimit is each VM's device memory cap, shared by its PerProcess
	// workers (0: none). A PerVM worker enforces it itself.
	MemLimit uint64
	// ModuleCacheBytes bounds each VM's module image cache kept for its
	// PerProcess workers (0: session.DefaultModuleCacheBytes).
	ModuleCacheBytes uint64
	// MaxPerVM bounds a VM's PerProcess workers (its guest processes using
	// the GPU at once; each holds a CUDA context, ~0.5 GiB of device memory
	// on the H100). The connections of one guest process share its worker
	// (identity.go): the slots count processes, not connections. A new
	// process beyond it waits up to SlotWait for one of the VM's processes
	// to end, then is refused (its HELLO is answered with
	// CUDA_ERROR_DEVICE_UNAVAILABLE). 0: DefaultMaxPerVM.
	MaxPerVM int
	// MaxPerUser bounds the slots one guest user of a VM may hold, and
	// RootReserve is how many of MaxPerVM users other than root leave free
	// (identity.go says who is a user). 0: DefaultMaxPerUser(MaxPerVM) and
	// DefaultRootReserve(MaxPerVM).
	MaxPerUser, RootReserve int
	// SlotWait is how long a new guest process waits for a slot of its VM
	// (0: it is refused at once; "vgpu serve" uses DefaultSlotWait).
	SlotWait time.Duration
	// HelloTimeout bounds how long a PerProcess manager waits for a new
	// guest connection's HELLO, which says whose it is (0:
	// DefaultHelloTimeout).
	HelloTimeout time.Duration
	// Bounds are the budgets (backend/budget) each worker enforces; their
	// VM level is kept here for a VM's PerProcess workers together (each
	// worker leases from its VM's ledger). nil: budget.DefaultBounds of
	// this process, which has the workers' fd and mapping limits.
	Bounds *budget.Bounds

	mu       sync.Mutex
	byVM     map[string]*proc // PerVM: the VM's current worker
	live     map[*proc]bool   // every worker not known to have exited
	idle     []*proc          // PerProcess: ready, not yet given a session
	starting int              // PerProcess: pool workers not ready yet
	closed   bool
	vms      map[string]*vmShared // PerProcess: what a VM's workers share
	exits    []Exit
	retired  server.Report // counters of workers that have ended
	gen      uint64
	gathers  map[uint64]*procGather // process lists being gathered (processes.go)
	budgets  *budget.Pool           // PerProcess: the root of the VMs' ledgers (no bound of its own)
	vmBounds budget.Limits          // PerProcess: each VM's bounds, across its workers
}

// DefaultIdleTimeout is Manager.IdleTimeout's default.
const DefaultIdleTimeout = 30 * time.Second

// DefaultStartTimeout is Manager.StartTimeout's default: a worker's start
// is cuInit and a context per device (0.2-0.3 s on the H100).
const DefaultStartTimeout = time.Minute

// DefaultMaxPerVM is Manager.MaxPerVM's default: at ~0.5 GiB of device
// memory per context on the H100, 16 GiB for a VM at most.
const DefaultMaxPerVM = 32

// MaxStartsPerVM bounds the workers being started at once for one VM's
// sessions when the pool is empty (each start is cuInit and a context:
// ~0.3 s of a CPU on the H100): a VM that opens connections in a loop costs
// the host at most this many CPUs; its further sessions wait.
const MaxStartsPerVM = 4

// DefaultMaxPerUser is Manager.MaxPerUser's default: half the VM's slots.
func DefaultMaxPerUser(maxPerVM int) int { return max(maxPerVM/2, 1) }

// DefaultRootReserve is Manager.RootReserve's default: 1/16 of the VM's
// slots (2 of 32).
func DefaultRootReserve(maxPerVM int) int { return maxPerVM / 16 }

// ErrTooManyProcesses refuses a session of a VM that has MaxPerVM workers.
var ErrTooManyProcesses = errors.New("worker: the VM has as many guest processes on the GPU as it may (--max-processes)")

// DefaultPool is the pool size "vgpu serve" uses unless told otherwise:
// each started worker holds a CUDA context (about 0.5 GiB of device memory
// on the H100) while it waits.
const DefaultPool = 2

// Exit records a worker that ended.
type Exit struct {
	VM     string    `json:"vm"`
	PID    int       `json:"pid"`
	Status string    `json:"status"`
	At     time.Time `json:"at"`
}

type proc struct {
	cmd      *exec.Cmd
	ctrl     *os.File
	sendMu   sync.Mutex
	mem      handoff.SentMemory       // guarded by sendMu
	ready    chan struct{}            // closed by the worker's "ready"
	dead     chan struct{}            // closed when the process has exited
	heard    chan struct{}            // closed when its last message has been read
	vm       string                   // guarded by Manager.mu; "" until a PerProcess worker gets a session
	owner    string                   // guarded by Manager.mu: the guest process a PerProcess worker serves ("": one connection's)
	user     string                   // guarded by Manager.mu: the guest user its slot counts against ("": none)
	stopping bool                     // guarded by Manager.mu: a PerProcess worker told to stop (its sessions ended)
	sessions map[uint64]chan struct{} // guarded by Manager.mu; closed by the worker's "session-end"
	served   int                      // guarded by Manager.mu: sessions handed over
	poisoned bool                     // guarded by Manager.mu
	report   *server.Report           // guarded by Manager.mu: the latest
	askedID  uint64                   // guarded by Manager.mu: the report-now it owes
	asked    chan struct{}            // guarded by Manager.mu: closed when that report comes
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// vmShared is what a VM's PerProcess workers share, kept by the manager.
type vmShared struct {
	acct      *session.Account
	budget    *budget.Ledger // the VM level of its workers' budgets
	modules   *imageCache
	workers   int
	idleSince time.Time
	starts    chan struct{} // MaxStartsPerVM slots
	// routes: the worker of each of the VM's guest processes (by
	// identity.go's name), or the one its first connection is getting.
	routes  map[string]*route
	freed   chan struct{}  // closed (and replaced) when a worker's slot frees
	waiting int            // new guest processes waiting for a slot
	users   map[string]int // slots held per guest user (identity.go)
	byUsers int            // slots held by guest users (the sum of users)
}

// route is a guest process's worker: p is set and ready closed once its
// first connection has one (p stays nil if it got none).
type route struct {
	p     *proc
	ready chan struct{}
}

// NewManager returns a PerVM manager (set Mode, Pool and the rest before
// the first connection for another).
func NewManager(command func(vm string) *exec.Cmd, log hclog.Logger) *Manager {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Manager{Command: command, Log: log.Named("workers"), Mode: PerVM}
}

func (m *Manager) init() {
	if m.live == nil {
		m.live = map[*proc]bool{}
		m.byVM = map[string]*proc{}
		m.vms = map[string]*vmShared{}
		m.gathers = map[uint64]*procGather{}
		b := m.Bounds
		if b == nil {
			d := budget.DefaultBounds(budget.ReadFacts(session.MaxFrameBytes(protocol.DefaultLimits)))
			b = &d
		}
		m.vmBounds = b.VM
		m.vmBounds[budget.Sessions] = 0 // counted by the manager's server
		m.budgets = budget.NewRoot("workers", budget.Limits{})
	}
}

// Start fills a PerProcess manager's pool; ServeConn starts it too.
func (m *Manager) Start() {
	if m.Mode == PerProcess {
		m.refill()
	}
}

// ServeConn hands conn to a worker and returns when the session ends. It
// has server.Config.Dispatch's signature. A connection that is a unix
// socket (host mode, streams from "vgpu front") goes to the worker itself;
// a guest's vsock stream served in this process is copied to the worker
// over a socketpair.
func (m *Manager) ServeConn(ctx context.Context, conn transport.Conn, id uint64) error {
	defer conn.Close()
	var ff firstFrame
	if m.Mode == PerProcess {
		d := m.HelloTimeout
		if d <= 0 {
			d = DefaultHelloTimeout
		}
		var err error
		if ff, err = identify(ctx, conn, d); err != nil {
			return fmt.Errorf("worker: a connection of %s ended before it said whose it is: %w", conn.VM(), err)
		}
	}
	ended := make(chan struct{})
	p, err := m.workerFor(ctx, conn.VM(), ff.who, ff.user, id, ended)
	if err != nil {
		if errors.Is(err, ErrTooManyProcesses) {
			refuse(conn, ff)
		}
		return err
	}
	defer m.sessionDone(p, id)

	msg := &handoff.Message{Op: handoff.OpSession, Session: id, CID: conn.PeerCID(), Port: conn.PeerPort(), VM: conn.VM(), Prefix: ff.read}
	if hc, ok := conn.(*hostmode.Conn); ok {
		// Host mode with shared memory: the worker maps the client's
		// memfds itself; they come on the stream beside their frames.
		o := hc.ShareOptions()
		msg.ShareMax, msg.ShareMaxBytes = o.MaxShares, o.MaxShareBytes
		msg.NoRing, msg.RingSpinNs = o.NoRing, int64(o.RingSpin)
	} else if src := conn.Memory(); src != nil {
		gen, err := m.sendMemory(p, src)
		if err != nil {
			m.Log.Warn("guest memory not handed to the worker; its sessions will refuse segments", "vm", conn.VM(), "err", err)
		}
		msg.Memory = gen
	}
	if f := unixFile(conn); f != nil {
		return m.handOver(ctx, p, conn, f, msg, ended)
	}
	return m.proxy(ctx, p, conn, msg, ended)
}

// handOver gives the worker the connection's own socket: no copy in
// between. The manager only waits for the session's end.
func (m *Manager) handOver(ctx context.Context, p *proc, conn transport.Conn, f *os.File, msg *handoff.Message, ended chan struct{}) error {
	p.sendMu.Lock()
	err := handoff.Send(p.ctrl, msg, []int{int(f.Fd())})
	p.sendMu.Unlock()
	f.Close()
	if err != nil {
		return fmt.Errorf("worker %d: handing over session %d: %w", p.pid(), msg.Session, err)
	}
	// The worker has its own copy of the socket. Ours stays open, unread,
	// until the session ends (ServeConn closes it), so that whoever counts
	// the connection (a front's streams) counts it while it is served.
	select {
	case <-ended:
		return nil
	case <-p.dead:
		return fmt.Errorf("worker %d for %s died; session %d ended", p.pid(), msg.VM, msg.Session)
	case <-ctx.Done():
		return nil // the worker keeps the socket until it stops (Close)
	}
}

// proxy copies bytes between conn and one end of a socketpair whose other
// end the worker serves. This costs a copy and a wakeup per direction and
// frame in this process; it is the path of vsock streams that this process
// serves itself (vhost-user, --kernel-vsock), which are not sockets.
func (m *Manager) proxy(ctx context.Context, p *proc, conn transport.Conn, msg *handoff.Message, ended chan struct{}) error {
	mine, theirs, err := handoff.Socketpair(unix.SOCK_STREAM)
	if err != nil {
		return err
	}
	defer theirs.Close()
	local, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer local.Close()
	p.sendMu.Lock()
	err = handoff.Send(p.ctrl, msg, []int{int(theirs.Fd())})
	p.sendMu.Unlock()
	if err != nil {
		return fmt.Errorf("worker %d for %s: handing over session %d: %w", p.pid(), msg.VM, msg.Session, err)
	}
	theirs.Close()

	stop := context.AfterFunc(ctx, func() { local.Close(); conn.Close() })
	defer stop()
	errc := make(chan error, 2)
	fromWorker := make(chan struct{})
	go func() {
		_, err := io.CopyBuffer(local, conn, make([]byte, 256<<10))
		local.(*net.UnixConn).CloseWrite()
		errc <- err
	}()
	go func() {
		_, err := io.CopyBuffer(conn, local, make([]byte, 256<<10))
		close(fromWorker)
		conn.Close()
		errc <- err
	}()
	died := func() error {
		return fmt.Errorf("worker %d for %s died; session %d ended", p.pid(), msg.VM, msg.Session)
	}
	select {
	case <-p.dead:
		local.Close()
		conn.Close()
		<-errc
		<-errc
		return died()
	case err = <-errc:
	}
	<-errc
	select {
	case <-fromWorker:
		// The worker hung up: a normal end (its session-end comes with
		// it), or its death.
		select {
		case <-ended:
		case <-p.dead:
			return died()
		case <-time.After(2 * time.Second):
		}
	default:
	}
	if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) {
		err = nil
	}
	return err
}

// unixFile returns a copy of conn's socket if conn is a unix stream socket
// a worker can serve itself (host mode, a front's streams), else nil.
func unixFile(conn transport.Conn) *os.File {
	s, ok := conn.(interface{ Socket() *net.UnixConn })
	if !ok {
		return nil
	}
	uc := s.Socket()
	if uc == nil {
		return nil
	}
	f, err := uc.File()
	if err != nil {
		return nil
	}
	return f
}

// sessionDone forgets a session; an idle PerVM worker is retired later. A
// PerProcess worker whose last session this was is told to stop (no session
// reaches it after that: its guest process's next connection gets a fresh
// worker); the session is over when it has exited (its device memory is
// then free, and its lease back in the VM's account), and it is killed if
// it does not within ExitTimeout.
func (m *Manager) sessionDone(p *proc, id uint64) {
	m.mu.Lock()
	delete(p.sessions, id)
	idle := len(p.sessions) == 0 && !p.poisoned
	last := m.Mode == PerProcess && len(p.sessions) == 0 && !p.stopping
	if last {
		p.stopping = true
		m.dropRouteLocked(p)
	}
	m.mu.Unlock()
	switch {
	case m.Mode == PerProcess:
		if !last {
			return // its guest process still has other connections
		}
		p.sendMu.Lock()
		err := handoff.Send(p.ctrl, &handoff.Message{Op: handoff.OpStop}, nil)
		p.sendMu.Unlock()
		if err != nil {
			handoff.Hangup(p.ctrl) // its loop ends with the socket
		}
		select {
		case <-p.dead:
		case <-time.After(ExitTimeout):
			m.Log.Warn("worker did not exit after its sessions; killing it", "pid", p.pid())
			_ = p.cmd.Process.Kill()
			<-p.dead
		}
	case idle:
		m.retireWhenIdle(p)
	}
}

// dropRouteLocked forgets p as its guest process's worker (m.mu held), so
// that the process's next connection gets a fresh one.
func (m *Manager) dropRouteLocked(p *proc) {
	if v, ok := m.vms[p.vm]; ok && p.owner != "" {
		if r := v.routes[p.owner]; r != nil && r.p == p {
			delete(v.routes, p.owner)
		}
	}
}

// ExitTimeout is how long a PerProcess worker may take to exit after its
// session (releasing a CUDA context takes milliseconds).
const ExitTimeout = 10 * time.Second

// workerFor returns the worker for a new session id of vm, whose guest
// process is who ("": a process of its own) of guest user user ("": none),
// with the session counted as its (ended is closed by the worker's
// session-end).
func (m *Manager) workerFor(ctx context.Context, vm, who, user string, id uint64, ended chan struct{}) (*proc, error) {
	if m.Mode == PerProcess {
		return m.processWorker(ctx, vm, who, user, id, ended)
	}
	m.mu.Lock()
	m.init()
	if p, ok := m.byVM[vm]; ok && !p.poisoned {
		select {
		case <-p.dead:
		default:
			p.sessions[id] = ended
			p.served++
			m.mu.Unlock()
			return p, nil
		}
	}
	m.mu.Unlock()
	p, err := m.start(vm)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.byVM[vm] = p
	p.sessions[id] = ended
	p.served++
	m.mu.Unlock()
	return p, nil
}

// processWorker returns the worker of guest process who of vm: the one its
// earlier connections use, else a new one in a slot of the VM (waited for
// up to SlotWait). A worker that is poisoned or stopping takes no new
// session: the process's next connection gets a fresh one.
func (m *Manager) processWorker(ctx context.Context, vm, who, user string, id uint64, ended chan struct{}) (*proc, error) {
	var mine *route // the route this connection is getting a worker for
	for who != "" && mine == nil {
		m.mu.Lock()
		m.init()
		v := m.vmLocked(vm)
		r, ok := v.routes[who]
		switch {
		case !ok:
			mine = &route{ready: make(chan struct{})}
			v.routes[who] = mine
		case r.p == nil: // its first connection is getting one
			m.mu.Unlock()
			select {
			case <-r.ready:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			m.mu.Lock()
			if r.p == nil {
				m.mu.Unlock()
				return nil, fmt.Errorf("worker: guest process %s of %s got no worker", who, vm)
			}
			m.mu.Unlock()
			continue
		case m.usableLocked(r.p):
			r.p.sessions[id] = ended
			r.p.served++
			m.mu.Unlock()
			return r.p, nil
		default:
			mine = &route{ready: make(chan struct{})}
			v.routes[who] = mine
		}
		m.mu.Unlock()
	}
	p, err := m.newProcessWorker(ctx, vm, user)
	m.mu.Lock()
	defer m.mu.Unlock()
	if mine != nil {
		defer close(mine.ready)
		if v := m.vms[vm]; v != nil && v.routes[who] == mine && err != nil {
			delete(v.routes, who)
		}
	}
	if err != nil {
		return nil, err
	}
	select {
	case <-p.dead: // it died just now: watch did not count it as the VM's
		m.releaseVMLocked(vm, user)
		if v := m.vms[vm]; mine != nil && v != nil && v.routes[who] == mine {
			delete(v.routes, who)
		}
		return nil, fmt.Errorf("worker %d died before its session started", p.pid())
	default:
	}
	p.vm, p.owner, p.user = vm, who, user
	p.sessions[id] = ended
	p.served++
	if mine != nil {
		mine.p = p
	}
	return p, nil
}

// usableLocked reports whether p may take another session of its guest
// process (m.mu held).
func (m *Manager) usableLocked(p *proc) bool {
	if p.poisoned || p.stopping {
		return false
	}
	select {
	case <-p.dead:
		return false
	default:
		return true
	}
}

// newProcessWorker reserves a slot of vm for user and takes a worker for it.
func (m *Manager) newProcessWorker(ctx context.Context, vm, user string) (*proc, error) {
	if err := m.reserveVM(ctx, vm, user); err != nil {
		m.Log.Warn("guest process refused: its VM (or its user) has the most processes on the GPU it may have", "vm", vm, "user", user, "max", m.maxPerVM(), "max_per_user", m.maxPerUser(), "waited", m.SlotWait, "err", err)
		return nil, err
	}
	p, err := m.take(ctx, vm)
	if err != nil {
		m.unreserveVM(vm, user)
		return nil, err
	}
	return p, nil
}

// take returns a ready PerProcess worker for a session of vm: one from the
// pool, else a new one (waited for; at most MaxStartsPerVM at once for a
// VM); the pool refills beside.
func (m *Manager) take(ctx context.Context, vm string) (*proc, error) {
	defer m.refill()
	m.mu.Lock()
	m.init()
	for len(m.idle) > 0 {
		p := m.idle[0]
		m.idle = m.idle[1:]
		select {
		case <-p.dead:
			continue
		default:
		}
		m.mu.Unlock()
		return p, nil
	}
	starts := m.vms[vm].starts
	m.mu.Unlock()
	select {
	case starts <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-starts }()
	p, err := m.start("")
	if err != nil {
		return nil, err
	}
	if err := m.waitReady(ctx, p); err != nil {
		return nil, err
	}
	return p, nil
}

func (m *Manager) waitReady(ctx context.Context, p *proc) error {
	d := m.StartTimeout
	if d <= 0 {
		d = DefaultStartTimeout
	}
	select {
	case <-p.ready:
		return nil
	case <-p.dead:
		return fmt.Errorf("worker %d ended before it was ready (its log says why)", p.pid())
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		return ctx.Err()
	case <-time.After(d):
		_ = p.cmd.Process.Kill()
		return fmt.Errorf("worker %d not ready after %v", p.pid(), d)
	}
}

// refill starts workers until Pool are ready or starting.
func (m *Manager) refill() {
	m.mu.Lock()
	m.init()
	need := m.Pool - len(m.idle) - m.starting
	if m.closed || m.Mode != PerProcess || need <= 0 {
		m.mu.Unlock()
		return
	}
	m.starting += need
	m.mu.Unlock()
	for i := 0; i < need; i++ {
		go func() {
			p, err := m.start("")
			if err == nil {
				err = m.waitReady(context.Background(), p)
			}
			m.mu.Lock()
			m.starting--
			if err == nil && !m.closed {
				m.idle = append(m.idle, p)
				p = nil
			}
			m.mu.Unlock()
			if err != nil {
				m.Log.Error("a pool worker did not start; sessions will start their own", "err", err)
			} else if p != nil {
				handoff.Hangup(p.ctrl) // closed meanwhile
			}
		}()
	}
}

func (m *Manager) maxPerVM() int {
	if m.MaxPerVM > 0 {
		return m.MaxPerVM
	}
	return DefaultMaxPerVM
}

func (m *Manager) maxPerUser() int {
	if m.MaxPerUser > 0 {
		return m.MaxPerUser
	}
	return DefaultMaxPerUser(m.maxPerVM())
}

func (m *Manager) rootReserve() int {
	if m.RootReserve > 0 {
		return m.RootReserve
	}
	return DefaultRootReserve(m.maxPerVM())
}

// roomLocked reports whether v has a slot for a process of user (m.mu held).
func (m *Manager) roomLocked(v *vmShared, user string) bool {
	if user == "" {
		return v.workers < m.maxPerVM()
	}
	return v.workers < m.maxPerVM() && v.byUsers < m.maxPerVM()-m.rootReserve() && v.users[user] < m.maxPerUser()
}

// reserveVM counts a new worker of vm for user. While vm (or user) has
// all the slots it may have it waits up to SlotWait for one to end, then
// returns ErrTooManyProcesses.
func (m *Manager) reserveVM(ctx context.Context, vm, user string) error {
	var expired <-chan time.Time
	for {
		m.mu.Lock()
		m.init()
		v := m.vmLocked(vm)
		if m.roomLocked(v, user) {
			v.workers++
			if user != "" {
				v.users[user]++
				v.byUsers++
			}
			m.mu.Unlock()
			return nil
		}
		vmFull := v.workers >= m.maxPerVM()
		freed := v.freed
		if expired == nil && m.SlotWait > 0 {
			v.waiting++
			defer func() {
				m.mu.Lock()
				v.waiting--
				m.mu.Unlock()
			}()
		}
		m.mu.Unlock()
		refusal := func(waited time.Duration) error {
			if vmFull {
				return errSlotWait(vm, m.maxPerVM(), waited)
			}
			return errUserSlots(vm, user, m.maxPerUser(), m.rootReserve(), waited)
		}
		if expired == nil {
			if m.SlotWait <= 0 {
				return refusal(0)
			}
			t := time.NewTimer(m.SlotWait)
			defer t.Stop()
			expired = t.C
		}
		select {
		case <-freed:
		case <-expired:
			return refusal(m.SlotWait)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// vmLocked returns what vm's workers share, created with its first (m.mu
// held); VMs without workers for ModuleCacheIdle are forgotten.
func (m *Manager) vmLocked(vm string) *vmShared {
	now := time.Now()
	for n, v := range m.vms {
		if n != vm && v.workers == 0 && len(v.routes) == 0 && now.Sub(v.idleSince) > server.ModuleCacheIdle {
			v.modules.clear()
			delete(m.vms, n)
		}
	}
	v, ok := m.vms[vm]
	if !ok {
		v = &vmShared{acct: &session.Account{Limit: m.MemLimit},
			budget:  budget.NewLedger(m.budgets.Child("vm "+vm+" (all its worker processes)", m.vmBounds)),
			modules: newImageCache(m.ModuleCacheBytes), starts: make(chan struct{}, MaxStartsPerVM),
			routes: map[string]*route{}, freed: make(chan struct{}), users: map[string]int{}}
		m.vms[vm] = v
	}
	return v
}

// unreserveVM undoes reserveVM (m.mu not held) for a session that got no
// worker.
func (m *Manager) unreserveVM(vm, user string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.releaseVMLocked(vm, user)
}

func (m *Manager) releaseVMLocked(vm, user string) {
	if v, ok := m.vms[vm]; ok {
		v.workers--
		if user != "" {
			v.byUsers--
			if v.users[user]--; v.users[user] <= 0 {
				delete(v.users, user)
			}
		}
		if v.workers == 0 {
			v.idleSince = time.Now()
		}
		close(v.freed) // wakes the VM's processes waiting for a slot
		v.freed = make(chan struct{})
	}
}

// start starts a worker process.
func (m *Manager) start(vm string) (*proc, error) {
	parent, child, err := handoff.Socketpair(unix.SOCK_SEQPACKET)
	if err != nil {
		return nil, err
	}
	cmd := m.Command(vm)
	cmd.ExtraFiles = []*os.File{child}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		parent.Close()
		child.Close()
		return nil, fmt.Errorf("worker: starting a worker for %q: %w", vm, err)
	}
	child.Close()
	p := &proc{vm: vm, cmd: cmd, ctrl: parent, sessions: map[uint64]chan struct{}{}, ready: make(chan struct{}), dead: make(chan struct{}), heard: make(chan struct{})}
	m.mu.Lock()
	m.init()
	m.live[p] = true
	m.mu.Unlock()
	m.Log.Debug("worker started", "vm", vm, "pid", cmd.Process.Pid, "mode", m.Mode)
	go m.watch(p)
	go m.listen(p)
	return p, nil
}

// watch waits for a worker to exit and ends its sessions.
func (m *Manager) watch(p *proc) {
	err := p.cmd.Wait()
	status := "exit 0"
	if err != nil {
		status = err.Error()
	}
	// Its last messages (the final report) are still in the socket: read
	// them before it is retired.
	select {
	case <-p.heard:
	case <-time.After(5 * time.Second):
		m.Log.Warn("a dead worker's control socket is still open", "pid", p.pid())
	}
	m.mu.Lock()
	close(p.dead)
	delete(m.live, p)
	m.goneLocked(p)
	m.dropRouteLocked(p)
	if m.byVM[p.vm] == p {
		delete(m.byVM, p.vm)
	}
	n := len(p.sessions)
	if p.report != nil {
		m.retire(p.report)
	}
	if v, ok := m.vms[p.vm]; ok && m.Mode == PerProcess && p.served > 0 {
		v.acct.Drop(p)
		v.budget.Drop(p)
		m.releaseVMLocked(p.vm, p.user)
	}
	m.exits = append(m.exits, Exit{VM: p.vm, PID: p.pid(), Status: status, At: time.Now()})
	if len(m.exits) > 64 {
		m.exits = m.exits[1:]
	}
	m.mu.Unlock()
	handoff.Hangup(p.ctrl)
	p.sendMu.Lock()
	p.mem.Release()
	p.sendMu.Unlock()
	if err != nil || n > 0 {
		m.Log.Error("worker ended; its sessions get an error", "vm", p.vm, "pid", p.pid(), "status", status, "sessions", n)
	} else {
		m.Log.Debug("worker ended", "vm", p.vm, "pid", p.pid())
	}
}

// listen reads the worker's messages.
func (m *Manager) listen(p *proc) {
	defer close(p.heard)
	for {
		msg, fds, err := handoff.Recv(p.ctrl)
		if errors.Is(err, handoff.ErrMalformed) {
			// One message lost (its fds did not fit: this process was out
			// of fds, and the kernel closed them): the socket is still
			// good, and the worker's later messages (session-end, a lease)
			// must still be heard (issue 20). A lost answer's caller in
			// the worker gives up after CallTimeout.
			m.Log.Error("worker message lost; going on", "pid", p.pid(), "err", err)
			continue
		}
		if err != nil {
			handoff.CloseFDs(fds)
			return
		}
		if err := m.handle(p, msg, fds); err != nil {
			m.Log.Warn("worker message refused", "pid", p.pid(), "op", msg.Op, "err", err)
		}
	}
}

// handle serves one message of a worker; it owns fds.
func (m *Manager) handle(p *proc, msg *handoff.Message, fds []int) error {
	if msg.Op != handoff.OpModulePut {
		defer handoff.CloseFDs(fds)
	}
	switch msg.Op {
	case handoff.OpReady:
		m.mu.Lock()
		select {
		case <-p.ready:
		default:
			close(p.ready)
		}
		m.mu.Unlock()
	case handoff.OpSessionEnd:
		m.mu.Lock()
		if ch, ok := p.sessions[msg.Session]; ok {
			select {
			case <-ch:
			default:
				close(ch)
			}
		}
		m.mu.Unlock()
	case handoff.OpReport:
		var r server.Report
		if err := json.Unmarshal(msg.Report, &r); err != nil {
			return err
		}
		m.mu.Lock()
		p.report = &r
		if msg.ID != 0 && msg.ID == p.askedID && p.asked != nil {
			close(p.asked)
			p.asked = nil
		}
		m.mu.Unlock()
	case handoff.OpPoisoned:
		m.poisoned(p, msg.Error)
	case handoff.OpLease, handoff.OpLeased, handoff.OpUnlease:
		return m.lease(p, msg)
	case handoff.OpBudgetLease, handoff.OpBudgetUnlease:
		return m.budgetLease(p, msg)
	case handoff.OpModuleGet, handoff.OpModulePut:
		return m.module(p, msg, fds)
	case handoff.OpListProcesses:
		// It waits for the VM's other workers: not on this reader, which
		// carries p's own answers and leases meanwhile.
		go func() {
			if err := m.listProcesses(p, msg); err != nil {
				m.Log.Warn("worker message refused", "pid", p.pid(), "op", msg.Op, "err", err)
			}
		}()
	case handoff.OpOwnProcesses:
		m.ownProcesses(p, msg.ID, msg.Processes)
	default:
		return fmt.Errorf("unknown message")
	}
	return nil
}

// shared returns what the VM of a PerProcess worker shares (nil before it
// has a session).
func (m *Manager) shared(p *proc) *vmShared {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p.served == 0 {
		return nil
	}
	return m.vms[p.vm]
}

func (m *Manager) lease(p *proc, msg *handoff.Message) error {
	v := m.shared(p)
	if v == nil {
		return errors.New("a lease from a worker without a VM")
	}
	a := &handoff.Message{Op: msg.Op, ID: msg.ID}
	switch msg.Op {
	case handoff.OpLease:
		a.Bytes = v.acct.Lease(p, msg.Bytes)
	case handoff.OpLeased:
		a.Bytes = v.acct.Leased()
	case handoff.OpUnlease:
		v.acct.Unlease(p, msg.Bytes)
		return nil
	}
	return m.answer(p, a, nil)
}

// budgetLease serves a worker's lease of its VM's budget.
func (m *Manager) budgetLease(p *proc, msg *handoff.Message) error {
	v := m.shared(p)
	if v == nil {
		return errors.New("a budget lease from a worker without a VM")
	}
	if msg.Op == handoff.OpBudgetUnlease {
		v.budget.Unlease(p, msg.Resource, msg.Units)
		return nil
	}
	got, err := v.budget.Lease(p, msg.Resource, msg.Units, msg.UnitsMax, msg.Force)
	if msg.Force {
		return err // nobody waits for an answer
	}
	a := &handoff.Message{Op: msg.Op, ID: msg.ID, Units: got}
	var ex *budget.Exhausted
	switch {
	case errors.As(err, &ex):
		a.Exhausted = ex
	case err != nil:
		a.Error = err.Error()
	}
	return m.answer(p, a, nil)
}

func (m *Manager) module(p *proc, msg *handoff.Message, fds []int) error {
	v := m.shared(p)
	var h [32]byte
	if n, err := hexDecode(h[:], msg.Hash); err != nil || n != len(h) {
		handoff.CloseFDs(fds)
		return fmt.Errorf("bad image hash %q", msg.Hash)
	}
	if v == nil {
		handoff.CloseFDs(fds)
		return errors.New("a module message from a worker without a VM")
	}
	if msg.Op == handoff.OpModulePut {
		if len(fds) != 1 {
			handoff.CloseFDs(fds)
			return fmt.Errorf("module-put with %d fds", len(fds))
		}
		return v.modules.put(h, fds[0], msg.Bytes)
	}
	a := &handoff.Message{Op: handoff.OpModuleGet, ID: msg.ID}
	f, size, ok := v.modules.get(h)
	if !ok {
		return m.answer(p, a, nil)
	}
	defer f.Close()
	a.Bytes = size
	return m.answer(p, a, []int{int(f.Fd())})
}

func (m *Manager) answer(p *proc, a *handoff.Message, fds []int) error {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	return handoff.Send(p.ctrl, a, fds)
}

func (m *Manager) poisoned(p *proc, cause string) {
	m.mu.Lock()
	p.poisoned = true
	if m.byVM[p.vm] == p {
		delete(m.byVM, p.vm) // new sessions of this VM go to a fresh worker
	}
	m.dropRouteLocked(p) // and its guest process's new connections too
	m.mu.Unlock()
	m.Log.Error("worker's CUDA context is broken; its guest process gets the error, new sessions go to a fresh worker", "vm", p.vm, "pid", p.pid(), "cause", cause)
	if m.Mode == PerProcess {
		return // it is stopped when its sessions end
	}
	// A PerVM worker exits when its sessions end: closing our end of the
	// control socket ends its loop.
	go func() {
		for {
			m.mu.Lock()
			n := len(p.sessions)
			m.mu.Unlock()
			if n == 0 {
				handoff.Hangup(p.ctrl)
				return
			}
			select {
			case <-p.dead:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

// sendMemory sends the VM's current memory table if the worker does not
// have it yet, and returns its generation.
func (m *Manager) sendMemory(p *proc, src guestmem.Source) (uint64, error) {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	return p.mem.Send(p.ctrl, src, func() uint64 {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.gen++
		return m.gen
	})
}

// Status describes the workers.
type Status struct {
	Mode    string         `json:"mode"`
	Pool    int            `json:"pool,omitempty"`
	Workers []WorkerStatus `json:"workers"`
	Exits   []Exit         `json:"exits"`
	// VMs: what each VM's PerProcess workers share.
	VMs []VMShare `json:"vms,omitempty"`
}

// VMShare is what one VM's PerProcess workers share in the manager.
type VMShare struct {
	VM      string `json:"vm"`
	Workers int    `json:"workers"`
	Waiting int    `json:"waiting,omitempty"` // new guest processes waiting for a slot (SlotWait)
	Leased  uint64 `json:"mem_leased"`        // of the VM's cap, by its workers (in use plus their slack)
	// Budget is what the VM's workers hold of its budgets (in use plus
	// their slack), against the VM's bounds.
	Budget      budget.Snapshot `json:"budget"`
	ModuleBytes uint64          `json:"module_cache_bytes"`
}

// WorkerStatus is one live worker.
type WorkerStatus struct {
	VM       string `json:"vm"`
	PID      int    `json:"pid"`
	State    string `json:"state"` // starting, ready (in the pool), serving
	Sessions int    `json:"sessions"`
	Poisoned bool   `json:"poisoned"`
	// Process is the guest process a PerProcess worker serves ("guest pid
	// N", "host pid N"; empty: one connection's).
	Process string `json:"process,omitempty"`
	// User is the guest user its slot counts against (identity.go; empty:
	// root, the guest kernel or a host-mode client).
	User string `json:"user,omitempty"`
}

// Status returns the workers and recent exits.
func (m *Manager) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := Status{Mode: m.Mode.String(), Pool: m.Pool}
	for p := range m.live {
		state := "serving"
		select {
		case <-p.ready:
			if p.served == 0 {
				state = "ready"
			}
		default:
			state = "starting"
		}
		st.Workers = append(st.Workers, WorkerStatus{VM: p.vm, PID: p.pid(), State: state, Sessions: len(p.sessions), Poisoned: p.poisoned, Process: p.owner, User: p.user})
	}
	sort.Slice(st.Workers, func(i, j int) bool { return st.Workers[i].PID < st.Workers[j].PID })
	st.Exits = append(st.Exits, m.exits...)
	for n, v := range m.vms {
		st.VMs = append(st.VMs, VMShare{VM: n, Workers: v.workers, Waiting: v.waiting, Leased: v.acct.Leased(), Budget: v.budget.Pool().Snapshot(), ModuleBytes: v.modules.size()})
	}
	sort.Slice(st.VMs, func(i, j int) bool { return st.VMs[i].VM < st.VMs[j].VM })
	return st
}

// Close stops every worker.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	ps := make([]*proc, 0, len(m.live))
	for p := range m.live {
		ps = append(ps, p)
	}
	m.idle = nil
	m.mu.Unlock()
	for _, p := range ps {
		handoff.Hangup(p.ctrl)
	}
	for _, p := range ps {
		select {
		case <-p.dead:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.dead
		}
	}
	m.mu.Lock()
	for _, v := range m.vms {
		v.modules.clear()
	}
	m.mu.Unlock()
}

// retireWhenIdle stops a PerVM worker after IdleTimeout if it still has no
// session then. It is taken out of the VM's slot first, so a session that
// arrives meanwhile starts a fresh worker instead of reaching one that is
// exiting.
func (m *Manager) retireWhenIdle(p *proc) {
	d := m.IdleTimeout
	if d <= 0 {
		d = DefaultIdleTimeout
	}
	time.AfterFunc(d, func() {
		m.mu.Lock()
		if len(p.sessions) != 0 || m.byVM[p.vm] != p {
			m.mu.Unlock()
			return
		}
		delete(m.byVM, p.vm)
		m.mu.Unlock()
		select {
		case <-p.dead:
			return
		default:
		}
		m.Log.Info("worker idle; stopping it", "vm", p.vm, "pid", p.pid(), "idle", d)
		handoff.Hangup(p.ctrl)
	})
}
