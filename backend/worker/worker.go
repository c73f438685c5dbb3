package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/handoff"
	"github.com/vgpu-project/vgpu/backend/hostmode"
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
	w := &runner{ctrl: ctrl, srv: srv, log: log, mem: guestmem.Latest{Missing: handoff.ErrNoMemory}}
	var err error
	for {
		var m *handoff.Message
		var fds []int
		m, fds, err = handoff.Recv(ctrl)
		if errors.Is(err, handoff.ErrMalformed) {
			// One message lost (its fds did not fit: this process was out
			// of fds, and the kernel closed them, which ends that
			// session's stream). The control socket is still good: do
			// not stop taking sessions (issue 20: a worker stopped
			// accepting sessions for as long as any older one stayed).
			log.Error("control message lost; going on", "err", err)
			continue
		}
		if err != nil {
			break
		}
		switch m.Op {
		case handoff.OpMemory:
			err = w.setMemory(m, fds)
		case handoff.OpSession:
			err = w.session(ctx, m, fds)
		default:
			handoff.CloseFDs(fds)
			err = fmt.Errorf("worker: unknown control message %q", m.Op)
		}
		if err != nil {
			log.Error("control message refused", "op", m.Op, "err", err)
		}
	}
	if errors.Is(err, handoff.ErrClosed) {
		err = nil
	}
	w.wg.Wait()
	w.mem.Set(nil)
	return err
}

// Poisoned tells the manager that this worker's context is broken (call it
// from server.Config.OnStickyError).
func Poisoned(ctrl *os.File, cause error) {
	_ = handoff.Send(ctrl, &handoff.Message{Op: handoff.OpPoisoned, Error: cause.Error()}, nil)
}

type runner struct {
	wg   sync.WaitGroup
	ctrl *os.File
	srv  *server.Server
	log  hclog.Logger
	mem  guestmem.Latest
}

func (w *runner) setMemory(m *handoff.Message, fds []int) error {
	t, err := handoff.Map(m, fds, handoff.MapOptions{}) // the manager is trusted; it is checked anyway
	if err != nil {
		return err
	}
	w.mem.Set(t)
	w.log.Info("guest memory mapped", "regions", len(m.Regions), "generation", m.Memory)
	return nil
}

func (w *runner) session(ctx context.Context, m *handoff.Message, fds []int) error {
	if len(fds) != 1 {
		handoff.CloseFDs(fds)
		return fmt.Errorf("worker: session message with %d fds", len(fds))
	}
	c, err := handoff.NewConn(fds[0], m.CID, m.Port, m.VM, nil)
	if err != nil {
		return err
	}
	var conn transport.Conn = c
	switch {
	case m.ShareMax > 0: // host mode: the client's memfds come on the stream
		uc, ok := c.Conn.(*net.UnixConn)
		if !ok {
			c.Close()
			return fmt.Errorf("worker: host-mode session stream is a %T, not a unix socket", c.Conn)
		}
		conn = hostmode.NewConn(uc, m.VM, hostmode.Options{MaxShares: m.ShareMax, MaxShareBytes: m.ShareMaxBytes})
	case m.Memory != 0:
		c.Mem = &w.mem
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if err := w.srv.ServeConn(ctx, conn); err != nil {
			w.log.Warn("session ended", "manager_session", m.Session, "err", err)
		}
	}()
	return nil
}
