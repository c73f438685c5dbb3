package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/handoff"
	"github.com/vgpu-project/vgpu/backend/hostmode"
	"github.com/vgpu-project/vgpu/backend/transport"
)

// Manager starts one worker process per VM and hands it that VM's
// connections.
type Manager struct {
	// Command returns the command that runs a worker for vm ("vgpu worker
	// ..."); the manager adds the control socket as fd 3.
	Command func(vm string) *exec.Cmd
	Log     hclog.Logger
	// IdleTimeout stops a VM's worker once it has had no session for this
	// long, releasing its CUDA context and its mappings of guest RAM (a
	// VM that is gone never comes back for them). 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration

	mu      sync.Mutex
	workers map[string]*proc
	exits   []Exit
	gen     uint64
}

// DefaultIdleTimeout is Manager.IdleTimeout's default.
const DefaultIdleTimeout = 30 * time.Second

// Exit records a worker that ended.
type Exit struct {
	VM     string    `json:"vm"`
	PID    int       `json:"pid"`
	Status string    `json:"status"`
	At     time.Time `json:"at"`
}

type proc struct {
	vm       string
	cmd      *exec.Cmd
	ctrl     *os.File
	sendMu   sync.Mutex
	mem      handoff.SentMemory  // guarded by sendMu
	sessions map[uint64]net.Conn // manager ends of session streams
	poisoned bool
	dead     chan struct{}
}

// NewManager returns a manager.
func NewManager(command func(vm string) *exec.Cmd, log hclog.Logger) *Manager {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Manager{Command: command, Log: log.Named("workers"), workers: map[string]*proc{}}
}

// ServeConn hands conn to its VM's worker and proxies bytes until either
// side ends. It has server.Config.Dispatch's signature.
func (m *Manager) ServeConn(ctx context.Context, conn transport.Conn, id uint64) error {
	defer conn.Close()
	p, err := m.worker(conn.VM())
	if err != nil {
		return err
	}
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

	msg := &handoff.Message{Op: handoff.OpSession, Session: id, CID: conn.PeerCID(), Port: conn.PeerPort(), VM: conn.VM()}
	hc, hostShare := conn.(*hostmode.Conn)
	if hostShare {
		// Host mode with shared memory: the worker maps the client's
		// memfds itself; they travel on the session stream beside their
		// frames (forwardFrames), not as the VM's memory table.
		o := hc.ShareOptions()
		msg.ShareMax, msg.ShareMaxBytes = o.MaxShares, o.MaxShareBytes
	} else if src := conn.Memory(); src != nil {
		gen, err := m.sendMemory(p, src)
		if err != nil {
			m.Log.Warn("guest memory not handed to the worker; its sessions will refuse segments", "vm", conn.VM(), "err", err)
		}
		msg.Memory = gen
	}
	p.sendMu.Lock()
	err = handoff.Send(p.ctrl, msg, []int{int(theirs.Fd())})
	p.sendMu.Unlock()
	if err != nil {
		return fmt.Errorf("worker for %s: handing over session %d: %w", conn.VM(), id, err)
	}
	theirs.Close()
	m.mu.Lock()
	p.sessions[id] = local
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(p.sessions, id)
		idle := len(p.sessions) == 0 && !p.poisoned
		m.mu.Unlock()
		if idle {
			m.retireWhenIdle(p)
		}
	}()

	stop := context.AfterFunc(ctx, func() { local.Close(); conn.Close() })
	defer stop()
	errc := make(chan error, 2)
	fromWorker := make(chan struct{})
	go func() {
		var err error
		if hostShare {
			err = forwardFrames(local.(*net.UnixConn), hc)
		} else {
			_, err = io.Copy(local, conn)
		}
		local.(*net.UnixConn).CloseWrite()
		errc <- err
	}()
	go func() { _, err := io.Copy(conn, local); close(fromWorker); conn.Close(); errc <- err }()
	died := func() error { return fmt.Errorf("worker for %s died; session %d ended", conn.VM(), id) }
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
		// The worker hung up: a normal end, or its death (whose exit
		// status may trail the socket's end by a moment).
		select {
		case <-p.dead:
			return died()
		case <-time.After(200 * time.Millisecond):
		}
	default:
	}
	if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) {
		err = nil
	}
	return err
}

// worker returns the live, healthy worker for vm, starting one if needed.
func (m *Manager) worker(vm string) (*proc, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.workers[vm]; ok && !p.poisoned {
		select {
		case <-p.dead:
		default:
			return p, nil
		}
	}
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
		return nil, fmt.Errorf("worker: starting a worker for %s: %w", vm, err)
	}
	child.Close()
	p := &proc{vm: vm, cmd: cmd, ctrl: parent, sessions: map[uint64]net.Conn{}, dead: make(chan struct{})}
	m.workers[vm] = p
	m.Log.Info("worker started", "vm", vm, "pid", cmd.Process.Pid)
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
	m.mu.Lock()
	close(p.dead)
	if m.workers[p.vm] == p {
		delete(m.workers, p.vm)
	}
	n := len(p.sessions)
	m.exits = append(m.exits, Exit{VM: p.vm, PID: p.cmd.Process.Pid, Status: status, At: time.Now()})
	if len(m.exits) > 64 {
		m.exits = m.exits[1:]
	}
	m.mu.Unlock()
	handoff.Hangup(p.ctrl)
	p.sendMu.Lock()
	p.mem.Release()
	p.sendMu.Unlock()
	if err != nil || n > 0 {
		m.Log.Error("worker ended; its sessions get an error", "vm", p.vm, "pid", p.cmd.Process.Pid, "status", status, "sessions", n)
	} else {
		m.Log.Info("worker ended", "vm", p.vm, "pid", p.cmd.Process.Pid)
	}
}

// listen reads the worker's reports.
func (m *Manager) listen(p *proc) {
	for {
		msg, fds, err := handoff.Recv(p.ctrl)
		handoff.CloseFDs(fds)
		if err != nil {
			return
		}
		if msg.Op == handoff.OpPoisoned {
			m.mu.Lock()
			p.poisoned = true
			m.mu.Unlock()
			m.Log.Error("worker's CUDA context is broken; new sessions of this VM go to a fresh worker", "vm", p.vm, "pid", p.cmd.Process.Pid, "cause", msg.Error)
			// It exits when its sessions end: closing our end of the
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
	}
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
	Workers []WorkerStatus `json:"workers"`
	Exits   []Exit         `json:"exits"`
}

// WorkerStatus is one live worker.
type WorkerStatus struct {
	VM       string `json:"vm"`
	PID      int    `json:"pid"`
	Sessions int    `json:"sessions"`
	Poisoned bool   `json:"poisoned"`
}

// Status returns the workers and recent exits.
func (m *Manager) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	var st Status
	for _, p := range m.workers {
		st.Workers = append(st.Workers, WorkerStatus{VM: p.vm, PID: p.cmd.Process.Pid, Sessions: len(p.sessions), Poisoned: p.poisoned})
	}
	st.Exits = append(st.Exits, m.exits...)
	return st
}

// Close kills every worker.
func (m *Manager) Close() {
	m.mu.Lock()
	ps := make([]*proc, 0, len(m.workers))
	for _, p := range m.workers {
		ps = append(ps, p)
	}
	m.mu.Unlock()
	for _, p := range ps {
		handoff.Hangup(p.ctrl)
		select {
		case <-p.dead:
		case <-time.After(5 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.dead
		}
	}
}

// retireWhenIdle stops p after IdleTimeout if it still has no session then.
// It is taken out of the VM's slot first, so a session that arrives meanwhile
// starts a fresh worker instead of reaching one that is exiting.
func (m *Manager) retireWhenIdle(p *proc) {
	d := m.IdleTimeout
	if d <= 0 {
		d = DefaultIdleTimeout
	}
	time.AfterFunc(d, func() {
		m.mu.Lock()
		if len(p.sessions) != 0 || m.workers[p.vm] != p {
			m.mu.Unlock()
			return
		}
		delete(m.workers, p.vm)
		m.mu.Unlock()
		select {
		case <-p.dead:
			return
		default:
		}
		m.Log.Info("worker idle; stopping it", "vm", p.vm, "pid", p.cmd.Process.Pid, "idle", d)
		handoff.Hangup(p.ctrl)
	})
}
