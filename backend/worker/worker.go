package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/server"
	"github.com/vgpu-project/vgpu/backend/transport"
)

// Run is the worker process's main loop: it reads control messages from
// ctrl and serves each session message's stream with srv until the control
// socket closes (the manager is gone) or ctx ends. It returns when every
// session has ended.
func Run(ctx context.Context, ctrl *os.File, srv *server.Server, log hclog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &runner{ctrl: ctrl, srv: srv, log: log}
	var err error
	for {
		var m *message
		var fds []int
		m, fds, err = recv(ctrl)
		if err != nil {
			break
		}
		switch m.Op {
		case msgMemory:
			err = w.setMemory(m, fds)
		case msgSession:
			err = w.session(ctx, m, fds)
		default:
			closeFDs(fds)
			err = fmt.Errorf("worker: unknown control message %q", m.Op)
		}
		if err != nil {
			log.Error("control message refused", "op", m.Op, "err", err)
		}
	}
	if errors.Is(err, errEOF) {
		err = nil
	}
	w.wg.Wait()
	w.mem.release()
	return err
}

// Poisoned tells the manager that this worker's context is broken (call it
// from server.Config.OnStickyError).
func Poisoned(ctrl *os.File, cause error) {
	_ = send(ctrl, &message{Op: msgPoisoned, Error: cause.Error()}, nil)
}

type runner struct {
	wg   sync.WaitGroup
	ctrl *os.File
	srv  *server.Server
	log  hclog.Logger
	mem  memSource
}

// memSource serves the latest memory table the manager sent.
type memSource struct {
	mu  sync.Mutex
	cur *guestmem.Table
	gen atomic.Uint64
}

func (s *memSource) Acquire() (*guestmem.Table, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return nil, errors.New("worker: no guest memory table received")
	}
	return s.cur.Acquire()
}

func (s *memSource) set(t *guestmem.Table) {
	s.mu.Lock()
	old := s.cur
	s.cur = t
	s.mu.Unlock()
	if old != nil {
		old.Release()
	}
}

func (s *memSource) release() { s.set(nil) }

func (w *runner) setMemory(m *message, fds []int) error {
	if len(fds) != len(m.Regions) || len(fds) == 0 {
		closeFDs(fds)
		return fmt.Errorf("worker: memory message with %d regions and %d fds", len(m.Regions), len(fds))
	}
	specs := make([]guestmem.RegionSpec, len(fds))
	for i, r := range m.Regions {
		specs[i] = guestmem.RegionSpec{GuestPhys: guestmem.GPA(r.GPA), Size: r.Size, UserAddr: r.UserAddr, MmapOffset: r.MmapOffset, FD: fds[i]}
	}
	t, err := guestmem.NewTable(specs) // owns the fds now
	if err != nil {
		return err
	}
	w.mem.set(t)
	w.mem.gen.Store(m.Memory)
	w.log.Info("guest memory mapped", "regions", len(specs), "generation", m.Memory)
	return nil
}

func (w *runner) session(ctx context.Context, m *message, fds []int) error {
	if len(fds) != 1 {
		closeFDs(fds)
		return fmt.Errorf("worker: session message with %d fds", len(fds))
	}
	f := os.NewFile(uintptr(fds[0]), "vgpu-session")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("worker: session stream: %w", err)
	}
	c := &conn{Conn: nc, cid: m.CID, port: m.Port, vm: m.VM}
	if m.Memory != 0 {
		c.mem = &w.mem
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if err := w.srv.ServeConn(ctx, c); err != nil {
			w.log.Warn("session ended", "manager_session", m.Session, "err", err)
		}
	}()
	return nil
}

// conn is a guest stream handed over by the manager.
type conn struct {
	net.Conn
	cid, port uint32
	vm        string
	mem       guestmem.Source
}

func (c *conn) PeerCID() uint32  { return c.cid }
func (c *conn) PeerPort() uint32 { return c.port }
func (c *conn) VM() string       { return c.vm }
func (c *conn) Memory() guestmem.Source {
	if c.mem == nil {
		return nil
	}
	return c.mem
}

var _ transport.Conn = (*conn)(nil)
