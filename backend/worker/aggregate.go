package worker

import (
	"sort"
	"time"

	"github.com/vgpu-project/vgpu/backend/handoff"
	"github.com/vgpu-project/vgpu/backend/server"
)

// Counters. Each worker reports its server's counters (server.Report)
// every RunOptions.ReportInterval, when a session ends, and when the
// manager asks (Aggregate asks every live worker first, and waits at most
// RefreshTimeout); they are cumulative for the worker's life. The manager
// keeps each live worker's latest report and, when a worker exits, folds its
// last one into retired: Aggregate is retired plus the live workers'
// reports, so /metrics and "vgpu status" count every call in every isolation
// mode. A worker killed between two reports loses what it did since its last
// one (at most one interval).

// RefreshTimeout bounds how long Aggregate waits for fresh reports.
const RefreshTimeout = 500 * time.Millisecond

// refresh asks every live, ready worker for a report and waits for them
// (at most RefreshTimeout).
func (m *Manager) refresh() {
	m.mu.Lock()
	m.gen++
	id := m.gen
	var waits []chan struct{}
	var ps []*proc
	for p := range m.live {
		select {
		case <-p.ready:
		default:
			continue
		}
		ch := make(chan struct{})
		p.askedID, p.asked = id, ch
		waits = append(waits, ch)
		ps = append(ps, p)
	}
	m.mu.Unlock()
	for _, p := range ps {
		p.sendMu.Lock()
		_ = handoff.Send(p.ctrl, &handoff.Message{Op: handoff.OpReportNow, ID: id}, nil)
		p.sendMu.Unlock()
	}
	deadline := time.After(RefreshTimeout)
	for i, ch := range waits {
		select {
		case <-ch:
		case <-ps[i].dead:
		case <-deadline:
			return
		}
	}
}

// retire folds an ended worker's last report into the retired totals
// (m.mu held): its counters stay, its gauges (open sessions, memory in
// use) go with it.
func (m *Manager) retire(r *server.Report) {
	s := r.Stats
	s.ActiveSessions = 0
	m.retired.Stats.Add(s)
	for _, d := range r.Devices {
		rd := retiredDevice(&m.retired, d.GuestOrdinal)
		rd.Launches += d.Launches
		rd.LaunchesSkipped += d.LaunchesSkipped
	}
}

func retiredDevice(r *server.Report, ord int) *server.DeviceStatus {
	for i := range r.Devices {
		if r.Devices[i].GuestOrdinal == ord {
			return &r.Devices[i]
		}
	}
	r.Devices = append(r.Devices, server.DeviceStatus{GuestOrdinal: ord})
	return &r.Devices[len(r.Devices)-1]
}

// Aggregate sums the workers' reports (server.Config.Aggregate), fresh.
func (m *Manager) Aggregate() server.Aggregate {
	m.refresh()
	m.mu.Lock()
	defer m.mu.Unlock()
	var a server.Aggregate
	a.Stats.Add(m.retired.Stats)
	a.VMMem = map[string]uint64{}
	devs := map[int]*server.DeviceStatus{}
	dev := func(ord int) *server.DeviceStatus {
		d, ok := devs[ord]
		if !ok {
			d = &server.DeviceStatus{GuestOrdinal: ord}
			devs[ord] = d
		}
		return d
	}
	for _, d := range m.retired.Devices {
		x := dev(d.GuestOrdinal)
		x.Launches += d.Launches
		x.LaunchesSkipped += d.LaunchesSkipped
	}
	for p := range m.live {
		r := p.report
		if r == nil {
			continue
		}
		a.Stats.Add(r.Stats)
		for _, d := range r.Devices {
			x := dev(d.GuestOrdinal)
			x.HostOrdinal, x.Name, x.MemTotal = d.HostOrdinal, d.Name, d.MemTotal
			if x.MemFree == 0 || d.MemFree < x.MemFree {
				x.MemFree = d.MemFree // the device's free memory (the lowest report is the latest for a real GPU, near enough)
			}
			x.MemUsedByVGPU += d.MemUsedByVGPU
			x.Allocations += d.Allocations
			x.Launches += d.Launches
			x.LaunchesSkipped += d.LaunchesSkipped
		}
		for _, v := range r.VMs {
			a.VMMem[v.VM] += v.MemUsed
		}
	}
	for _, d := range devs {
		a.Devices = append(a.Devices, *d)
	}
	sort.Slice(a.Devices, func(i, j int) bool { return a.Devices[i].GuestOrdinal < a.Devices[j].GuestOrdinal })
	return a
}
