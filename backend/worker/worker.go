package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/handoff"
	"github.com/vgpu-project/vgpu/backend/hostmode"
	"github.com/vgpu-project/vgpu/backend/server"
	"github.com/vgpu-project/vgpu/backend/transport"
)

// Mode is how the manager uses its workers.
type Mode int

// Modes.
const (
	// PerProcess: one worker per guest process (all the connections one
	// guest process opens), from a pool of started workers; it exits when
	// the manager stops it after its last session ("--isolate process",
	// the default).
	PerProcess Mode = iota
	// PerVM: one worker per VM serves all the VM's sessions and stops
	// after an idle timeout ("--isolate vm").
	PerVM
)

func (m Mode) String() string {
	if m == PerVM {
		return "vm"
	}
	return "process"
}

// ParseMode parses "process" or "vm".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "process":
		return PerProcess, nil
	case "vm":
		return PerVM, nil
	}
	return 0, fmt.Errorf("worker mode %q: want process or vm", s)
}

// DefaultReportInterval is how often a worker reports its counters.
const DefaultReportInterval = time.Second

// RunOptions configure Run.
type RunOptions struct {
	Mode Mode
	// ReportInterval: how often the worker sends its counters (0:
	// DefaultReportInterval); it also sends them when a session ends.
	ReportInterval time.Duration
}

// Run is the worker process's main loop: it tells the manager it is ready,
// reads control messages from c and serves each session message's stream
// with srv. It runs until the control socket closes (the manager is gone
// or stopped it), the manager sends "stop" (a PerProcess worker whose guest
// process's sessions have all ended), or ctx ends. Run returns when every
// session has ended.
func Run(ctx context.Context, c *Control, srv *server.Server, log hclog.Logger, opt RunOptions) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if opt.ReportInterval <= 0 {
		opt.ReportInterval = DefaultReportInterval
	}
	w := &runner{c: c, srv: srv, log: log, mode: opt.Mode, mem: guestmem.Latest{Missing: handoff.ErrNoMemory}, stop: make(chan struct{})}
	w.report()
	if err := c.send(&handoff.Message{Op: handoff.OpReady}, nil); err != nil {
		return fmt.Errorf("worker: telling the manager it is ready: %w", err)
	}
	readErr := make(chan error, 1)
	go func() { readErr <- w.read(ctx) }()
	tick := time.NewTicker(opt.ReportInterval)
	defer tick.Stop()
	var err error
loop:
	for {
		select {
		case err = <-readErr:
			break loop
		case <-w.stop:
			break loop // its guest process's sessions have ended
		case <-ctx.Done():
			break loop
		case <-tick.C:
			w.report()
		}
	}
	w.mu.Lock()
	if !w.stopping { // no session may start while Run waits for them
		w.stopping = true
		close(w.stop)
	}
	w.mu.Unlock()
	w.wg.Wait()
	c.bg.Wait()
	w.mem.Set(nil)
	w.report()
	if errors.Is(err, handoff.ErrClosed) {
		err = nil
	}
	return err
}

// Poisoned tells the manager that this worker's context is broken (call it
// from server.Config.OnStickyError).
func (c *Control) Poisoned(cause error) {
	_ = c.send(&handoff.Message{Op: handoff.OpPoisoned, Error: cause.Error()}, nil)
}

// EndOnCallTimeout returns server.Config.OnCallTimeout for a worker: a
// call that waited past the deadline (a kernel that does not end) ends
// this process, and with it the context and the kernel, so the GPU is
// free again; the session has answered the call and closed its
// connection, and a second gives the reply time to be written. The
// manager records the exit; the guest process's (PerProcess) or the VM's
// (PerVM) next connection gets a fresh worker.
func (c *Control) EndOnCallTimeout(log hclog.Logger) func(error) {
	var once sync.Once
	return func(cause error) {
		once.Do(func() {
			c.Poisoned(cause)
			log.Error("a call waited past the deadline; this worker exits to end its context and the kernel", "cause", cause)
			go func() {
				time.Sleep(time.Second)
				os.Exit(3)
			}()
		})
	}
}

type runner struct {
	wg       sync.WaitGroup
	c        *Control
	srv      *server.Server
	log      hclog.Logger
	mode     Mode
	mem      guestmem.Latest
	mu       sync.Mutex
	stopping bool          // "stop" came: no session may start
	stop     chan struct{} // closed when "stop" comes
}

// read serves control messages until the socket fails.
func (w *runner) read(ctx context.Context) error {
	for {
		m, fds, err := handoff.Recv(w.c.ctrl)
		if errors.Is(err, handoff.ErrMalformed) {
			// One message lost (its fds did not fit: this process was out
			// of fds, and the kernel closed them, which ends that
			// session's stream; a lost answer's caller gives up after
			// CallTimeout). The control socket is still good: do not stop
			// taking sessions (issue 20: a worker stopped accepting
			// sessions for as long as any older one stayed).
			w.log.Error("control message lost; going on", "err", err)
			continue
		}
		if err != nil {
			w.c.closeWaiters()
			return err
		}
		switch {
		case m.Op == handoff.OpMemory:
			err = w.setMemory(m, fds)
		case m.Op == handoff.OpSession:
			err = w.session(ctx, m, fds)
		case m.Op == handoff.OpReportNow:
			handoff.CloseFDs(fds)
			w.reportFor(m.ID)
		case m.Op == handoff.OpOwnProcesses:
			handoff.CloseFDs(fds)
			err = w.ownProcesses(m)
		case m.Op == handoff.OpStop:
			handoff.CloseFDs(fds)
			w.mu.Lock()
			if !w.stopping {
				w.stopping = true
				close(w.stop)
			}
			w.mu.Unlock()
		case w.c.answer(m, fds):
		default:
			handoff.CloseFDs(fds)
			err = fmt.Errorf("worker: unexpected control message %q", m.Op)
		}
		if err != nil {
			w.log.Error("control message refused", "op", m.Op, "err", err)
		}
	}
}

// report sends the manager this process's counters.
func (w *runner) report() { w.reportFor(0) }

// reportFor sends the counters, as the answer to request id (0: none).
func (w *runner) reportFor(id uint64) {
	b, err := json.Marshal(w.srv.Report())
	if err == nil {
		err = w.c.send(&handoff.Message{Op: handoff.OpReport, ID: id, Report: b}, nil)
	}
	if err != nil && !errors.Is(err, handoff.ErrClosed) {
		w.log.Debug("report not sent", "err", err)
	}
}

func (w *runner) setMemory(m *handoff.Message, fds []int) error {
	t, err := handoff.Map(m, fds, handoff.MapOptions{}) // the manager is trusted; it is checked anyway
	if err != nil {
		return err
	}
	w.mem.Set(t)
	w.log.Debug("guest memory mapped", "regions", len(m.Regions), "generation", m.Memory)
	return nil
}

func (w *runner) session(ctx context.Context, m *handoff.Message, fds []int) error {
	if len(fds) != 1 {
		handoff.CloseFDs(fds)
		return fmt.Errorf("worker: session message with %d fds", len(fds))
	}
	w.mu.Lock()
	stopping := w.stopping
	if !stopping {
		w.wg.Add(1) // before Run can see "stop" and wait
	}
	w.mu.Unlock()
	if stopping {
		handoff.CloseFDs(fds)
		return errors.New("worker: a session after stop")
	}
	started := false
	defer func() {
		if !started {
			w.wg.Done()
		}
	}()
	c, err := handoff.NewConn(fds[0], m.CID, m.Port, m.VM, nil)
	if err != nil {
		return err
	}
	var conn transport.Conn = c
	switch {
	case len(m.Prefix) > 0 && m.ShareMax > 0:
		c.Close()
		return errors.New("worker: a host-mode session with bytes read before it")
	case len(m.Prefix) > 0: // the guest's HELLO, read by the manager
		c.Conn = &prefixConn{Conn: c.Conn, prefix: m.Prefix}
		if m.Memory != 0 {
			c.Mem = &w.mem
		}
	case m.ShareMax > 0: // host mode: the client's memfds come on the stream
		uc, ok := c.Conn.(*net.UnixConn)
		if !ok {
			c.Close()
			return fmt.Errorf("worker: host-mode session stream is a %T, not a unix socket", c.Conn)
		}
		conn = hostmode.NewConn(uc, m.VM, hostmode.Options{MaxShares: m.ShareMax, MaxShareBytes: m.ShareMaxBytes,
			NoRing: m.NoRing, RingSpin: time.Duration(m.RingSpinNs)})
	case m.Memory != 0:
		c.Mem = &w.mem
	}
	started = true
	go func() {
		defer w.wg.Done()
		if err := w.srv.ServeConn(ctx, conn); err != nil {
			w.log.Warn("session ended", "manager_session", m.Session, "err", err)
		}
		w.report()
		_ = w.c.send(&handoff.Message{Op: handoff.OpSessionEnd, Session: m.Session}, nil)
	}()
	return nil
}

// prefixConn serves prefix (bytes the manager read from the stream) before
// the stream's own.
type prefixConn struct {
	net.Conn
	mu     sync.Mutex
	prefix []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		c.mu.Unlock()
		return n, nil
	}
	c.mu.Unlock()
	return c.Conn.Read(b)
}

// Control is a worker's end of its control socket: Run reads it; the
// worker's sessions ask the manager through it for what a VM's processes
// share (VMResources).
type Control struct {
	ctrl    *os.File
	bg      sync.WaitGroup // messages sent in the background (module images); Run waits for them
	mu      sync.Mutex
	next    uint64
	waiting map[uint64]chan answer
	closed  bool
}

type answer struct {
	m   *handoff.Message
	fds []int
}

// NewControl wraps the control socket (the worker's fd 3).
func NewControl(ctrl *os.File) *Control {
	return &Control{ctrl: ctrl, waiting: map[uint64]chan answer{}}
}

// CallTimeout bounds how long a worker waits for the manager's answer.
const CallTimeout = 30 * time.Second

func (c *Control) send(m *handoff.Message, fds []int) error {
	return handoff.Send(c.ctrl, m, fds)
}

// call sends m with a fresh ID and waits for the manager's answer (at most
// CallTimeout); the caller owns the answer's fds.
func (c *Control) call(m *handoff.Message, fds []int) (*handoff.Message, []int, error) {
	return c.callWithin(m, fds, CallTimeout)
}

// callWithin is call, waiting at most d.
func (c *Control) callWithin(m *handoff.Message, fds []int, d time.Duration) (*handoff.Message, []int, error) {
	ch := make(chan answer, 1)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, nil, handoff.ErrClosed
	}
	c.next++
	m.ID = c.next
	c.waiting[m.ID] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, m.ID)
		c.mu.Unlock()
	}()
	if err := c.send(m, fds); err != nil {
		return nil, nil, err
	}
	select {
	case a, ok := <-ch:
		if !ok {
			return nil, nil, handoff.ErrClosed
		}
		return a.m, a.fds, nil
	case <-time.After(d):
		return nil, nil, fmt.Errorf("worker: the manager did not answer %s in %v", m.Op, d)
	}
}

// answer hands an answer to its caller and reports whether m was one.
func (c *Control) answer(m *handoff.Message, fds []int) bool {
	if m.ID == 0 {
		return false
	}
	c.mu.Lock()
	ch, ok := c.waiting[m.ID]
	delete(c.waiting, m.ID)
	c.mu.Unlock()
	if !ok {
		handoff.CloseFDs(fds) // a late answer: its caller gave up
		return true
	}
	ch <- answer{m, fds}
	return true
}

func (c *Control) closeWaiters() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for id, ch := range c.waiting {
		close(ch)
		delete(c.waiting, id)
	}
}
