package worker

import (
	"errors"
	"time"

	"github.com/vgpu-project/vgpu/backend/handoff"
	"github.com/vgpu-project/vgpu/backend/session"
	"github.com/vgpu-project/vgpu/protocol"
)

// The VM's process list (NVML's running processes, nvidia-smi). Each
// worker's server keeps a session.ProcessTable of the sessions it serves;
// the VM's list spans all of the VM's workers (a worker per guest process,
// or a PerVM worker and the poisoned one it replaced). Only an NVML query
// pays for it: the worker answering OpDeviceGetProcesses asks the manager
// ("list-processes", Control.OtherProcesses); the manager asks each other
// live worker of that VM for its own entries ("own-processes", answered by
// the worker's control reader from its table, never asking further),
// waits at most ProcessesTimeout (a dead worker counts as answered, a stuck
// one is left out) and answers with their merged entries; the asking worker
// adds its own. The manager picks the workers by the VM it handed them
// sessions of: never another VM's.

// ProcessesTimeout bounds how long the manager waits for a VM's workers'
// entries; the asking worker waits at most twice as long for the manager.
const ProcessesTimeout = 500 * time.Millisecond

// procGather is one list-processes the manager is gathering.
type procGather struct {
	pending map[*proc]bool // asked, not answered (nor dead) yet
	got     [][]protocol.ProcessInfo
	done    chan struct{} // closed when pending is empty
}

// listProcesses answers asker's list-processes: the guest processes on
// msg.Device that the other live workers of asker's VM serve.
func (m *Manager) listProcesses(asker *proc, msg *handoff.Message) error {
	a := &handoff.Message{Op: handoff.OpListProcesses, ID: msg.ID}
	m.mu.Lock()
	if asker.served == 0 {
		m.mu.Unlock()
		a.Error = "a process list asked by a worker without a VM"
		_ = m.answer(asker, a, nil)
		return errors.New(a.Error)
	}
	vm := asker.vm
	m.gen++
	id := m.gen
	g := &procGather{pending: map[*proc]bool{}, done: make(chan struct{})}
	var ps []*proc
	for p := range m.live {
		if p != asker && p.vm == vm && p.served > 0 {
			g.pending[p] = true
			ps = append(ps, p)
		}
	}
	if len(ps) == 0 {
		m.mu.Unlock()
		return m.answer(asker, a, nil)
	}
	m.gathers[id] = g
	m.mu.Unlock()
	ask := &handoff.Message{Op: handoff.OpOwnProcesses, ID: id, VM: vm, Device: msg.Device}
	for _, p := range ps {
		p.sendMu.Lock()
		err := handoff.Send(p.ctrl, ask, nil)
		p.sendMu.Unlock()
		if err != nil {
			m.ownProcesses(p, id, nil) // it is exiting: it serves nobody
		}
	}
	timer := time.NewTimer(ProcessesTimeout)
	defer timer.Stop()
	select {
	case <-g.done:
	case <-timer.C:
	}
	m.mu.Lock()
	delete(m.gathers, id)
	late := len(g.pending)
	a.Processes = capProcesses(session.MergeProcesses(g.got...))
	m.mu.Unlock()
	if late > 0 {
		m.Log.Warn("workers did not say which guest processes they serve in time; the VM's process list leaves them out", "vm", vm, "workers", late, "timeout", ProcessesTimeout)
	}
	return m.answer(asker, a, nil)
}

// ownProcesses takes worker p's answer to gather id (nil: p is gone).
func (m *Manager) ownProcesses(p *proc, id uint64, list []protocol.ProcessInfo) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g, ok := m.gathers[id]; ok {
		g.answeredLocked(p, capProcesses(list))
	}
}

// answeredLocked records p's entries (m.mu held); a worker that was not
// asked, or already answered, adds nothing.
func (g *procGather) answeredLocked(p *proc, list []protocol.ProcessInfo) {
	if !g.pending[p] {
		return
	}
	delete(g.pending, p)
	g.got = append(g.got, list)
	if len(g.pending) == 0 {
		close(g.done)
	}
}

// goneLocked counts a worker that exited as answered by every gather
// waiting for it (m.mu held).
func (m *Manager) goneLocked(p *proc) {
	for _, g := range m.gathers {
		g.answeredLocked(p, nil)
	}
}

// capProcesses cuts a list to what one reply (and one control message)
// carries.
func capProcesses(l []protocol.ProcessInfo) []protocol.ProcessInfo {
	return l[:min(len(l), protocol.MaxProcesses)]
}

// OtherProcesses is server.Config.OtherProcesses for a worker: the guest
// processes on guest device dev that the other workers of this worker's VM
// serve, asked of the manager (which knows the VM; vm is not sent). It
// returns nil if the manager does not answer within 2*ProcessesTimeout.
func (c *Control) OtherProcesses(_ string, dev int) []protocol.ProcessInfo {
	a, fds, err := c.callWithin(&handoff.Message{Op: handoff.OpListProcesses, Device: dev}, nil, 2*ProcessesTimeout)
	handoff.CloseFDs(fds)
	if err != nil || a.Error != "" {
		return nil
	}
	return capProcesses(a.Processes)
}

// ownProcesses answers the manager's own-processes: this worker's entries
// from its server's table, which asks nobody further.
func (w *runner) ownProcesses(m *handoff.Message) error {
	return w.c.send(&handoff.Message{Op: handoff.OpOwnProcesses, ID: m.ID, Processes: capProcesses(w.srv.LocalProcesses(m.VM, m.Device))}, nil)
}
