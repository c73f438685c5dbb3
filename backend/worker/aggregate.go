package worker

import (
	"sort"

	"github.com/vgpu-project/vgpu/backend/server"
)

// Counters. Each worker reports its server's counters (server.Report)
// every RunOptions.ReportInterval and when a session ends; they are
// cumulative for the worker's life. The manager keeps each live worker's
// latest report and, when a worker exits, folds its last one into retired:
// Aggregate is retired plus the live workers' reports, so /metrics and
// "vgpu status" count every call in every isolation mode. A worker killed
// between two reports loses what it did since its last one (at most one
// interval).

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

// Aggregate sums the workers' reports (server.Config.Aggregate).
func (m *Manager) Aggregate() server.Aggregate {
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
