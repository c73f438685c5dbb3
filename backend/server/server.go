// Package server accepts guest connections from any transport.Listener and
// runs one session per connection. It owns what sessions share: the device
// contexts (mapped to guest ordinals by --gpus), per-VM state (device memory
// cap, guest RAM registration, module image cache) and the counters; and it
// reports them (Status) for "vgpu status" and the metrics endpoint.
//
// Trust: connections are untrusted; sessions validate everything. The server
// trusts its configuration.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/budget"
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/engine"
	"github.com/vgpu-project/vgpu/backend/session"
	"github.com/vgpu-project/vgpu/backend/transport"
	"github.com/vgpu-project/vgpu/protocol"
)

// Config configures a server.
type Config struct {
	Driver device.Driver
	// GPUs maps guest ordinals to host ordinals: GPUs[i] is the host device
	// guest device i runs on. Empty: every host device, in order.
	GPUs []int
	// MemLimit caps each VM's device memory, all devices together (0: none).
	MemLimit uint64
	// ModuleCacheBytes bounds each VM's module image cache (0:
	// session.DefaultModuleCacheBytes).
	ModuleCacheBytes uint64
	// VMResources, if set, supplies a VM's memory quota and module store
	// instead of this process's own (a worker process whose VM's other
	// processes run elsewhere: both are shared through the manager).
	VMResources func(vm string) (*session.Quota, session.ModuleStore)
	// OtherProcesses, if set, returns VM vm's guest processes on guest
	// device dev that other host processes serve (a worker: the VM's other
	// workers, through the manager); the VM's process list (NVML) adds
	// them to this process's own (session.ProcessTable.Others).
	OtherProcesses func(vm string, dev int) []protocol.ProcessInfo
	// Engine picks the memcpy engine for guest-memory copies.
	Engine engine.Kind
	Limits protocol.Limits
	// AllowUnprivilegedSegments: tests only (see session.Config).
	AllowUnprivilegedSegments bool
	// Trace: sessions stamp every request per layer (session.Config.Trace).
	Trace bool
	// RingSpin and NoGuestRings: a guest's rings in its RAM
	// (session.Config.RingSpin, NoGuestRings).
	RingSpin     time.Duration
	NoGuestRings bool
	// DtoHSmall: session.Config.DtoHSmall.
	DtoHSmall session.DtoHMode
	// ExclusiveContext: this process serves one session (a worker).
	ExclusiveContext bool
	Version          string
	Logger           hclog.Logger
	// Dispatch, if set, serves each connection instead of an in-process
	// session (the worker manager: each VM's sessions in its own process).
	Dispatch func(ctx context.Context, conn transport.Conn, id uint64) error
	// OnStickyError is passed to sessions (see session.Config).
	OnStickyError func(error)
	// Output is passed to sessions (see session.Config): only a process
	// that serves one session (a PerProcess worker) can tell whose device
	// output its fd 1 and 2 carry.
	Output session.DeviceOutput
	// WorkerStatus, if set, adds the worker processes to Status.
	WorkerStatus func() any
	// Aggregate, if set, adds what sessions served in other processes
	// (workers) report: their counters, devices and VMs' memory.
	Aggregate func() Aggregate
	// FrontStatus, if set, adds the connected "vgpu front" processes to
	// Status.
	FrontStatus func() any
	// Bounds are what guests may make this process hold, per client, per
	// VM and in all (nil: budget.DefaultBounds of this process's fd and
	// mapping limits). A connection over its VM's or the process's
	// session bound is closed at once.
	Bounds *budget.Bounds
	// VMBudget, if set, keeps the VM level of Bounds elsewhere: each VM's
	// pool leases from it (budget.LeaseFrom), so that a VM whose processes
	// run in several workers is bounded as a whole (the manager's ledger).
	VMBudget budget.Upstream
	// FrameTimeout and HostFuncTimeout are passed to sessions (0: their
	// defaults).
	FrameTimeout, HostFuncTimeout time.Duration
	// CallTimeout and OnCallTimeout are passed to sessions (see
	// session.Config; 0: no call deadline).
	CallTimeout   time.Duration
	OnCallTimeout func(error)
}

// Server runs sessions.
type Server struct {
	cfg     Config
	log     hclog.Logger
	devices []device.Context
	stats   *session.Stats
	started time.Time
	nextID  atomic.Uint64
	bounds  budget.Bounds
	pool    *budget.Pool // the process's
	limits  *session.LimitTable
	// refused counts connections closed at once for the session bounds.
	refused        atomic.Uint64
	lastRefusalLog atomic.Int64

	mu       sync.Mutex
	vms      map[string]*vmState
	caches   map[string]*vmCache // outlive their VM's sessions (ModuleCacheIdle)
	sessions map[uint64]*sessionInfo
	wg       sync.WaitGroup
}

type vmState struct {
	name     string
	quota    *session.Quota
	procs    *session.ProcessTable // the VM's guest processes (NVML's process list)
	mods     session.ModuleStore
	reg      *engine.Registry
	pool     *budget.Pool
	sessions int
}

// vmCache is a VM's module images. A VM's programs usually run one after
// another, so the cache outlives the VM's sessions; it is dropped once the
// VM has had no session for ModuleCacheIdle.
type vmCache struct {
	c         *session.ModuleCache
	idleSince time.Time // zero while the VM has sessions
}

// ModuleCacheIdle is how long a VM's module cache outlives its last session.
const ModuleCacheIdle = 10 * time.Minute

type sessionInfo struct {
	id      uint64
	vm      string
	peer    string
	started time.Time
	cancel  context.CancelFunc
}

// New opens the configured devices.
func New(cfg Config) (*Server, error) {
	if cfg.Driver == nil {
		return nil, errors.New("server: no device driver")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	gpus := cfg.GPUs
	if len(gpus) == 0 {
		for i := 0; i < cfg.Driver.Count(); i++ {
			gpus = append(gpus, i)
		}
	}
	s := &Server{
		cfg: cfg, log: cfg.Logger.Named("server"),
		stats: &session.Stats{}, started: time.Now(),
		vms: map[string]*vmState{}, caches: map[string]*vmCache{}, sessions: map[uint64]*sessionInfo{},
	}
	if cfg.Bounds != nil {
		s.bounds = *cfg.Bounds
	} else {
		s.bounds = budget.DefaultBounds(budget.ReadFacts(session.MaxFrameBytes(cfg.Limits)))
	}
	s.pool = budget.NewRoot("process", s.bounds.Global)
	s.limits = session.NewLimitTable()
	for gi, hi := range gpus {
		if hi < 0 || hi >= cfg.Driver.Count() {
			return nil, fmt.Errorf("server: --gpus maps guest device %d to host device %d, but the host has %d", gi, hi, cfg.Driver.Count())
		}
		if cfg.Dispatch != nil {
			continue // sessions run elsewhere (workers): hold no context here
		}
		ctx, err := cfg.Driver.Context(hi)
		if err != nil {
			return nil, fmt.Errorf("server: opening host device %d: %w", hi, err)
		}
		s.devices = append(s.devices, ctx)
	}
	return s, nil
}

// Pool returns the process's budget (tests, status).
func (s *Server) Pool() *budget.Pool { return s.pool }

// Warm makes sure every device's context exists and works (a worker does
// it before it tells its manager it is ready: cuInit and context creation
// then cost the guest program nothing).
func (s *Server) Warm() error {
	for _, c := range s.devices {
		if _, _, err := c.MemGetInfo(); err != nil {
			return fmt.Errorf("server: device %d: %w", c.Ordinal(), err)
		}
	}
	return nil
}

// Stats returns the shared session counters.
func (s *Server) Stats() *session.Stats { return s.stats }

// Serve accepts connections until ctx is done or the listener fails; it
// then waits for its sessions to end.
func (s *Server) Serve(ctx context.Context, ln transport.Listener) error {
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	s.log.Info("listening", "addr", ln.Addr().String())
	var err error
	for {
		var conn transport.Conn
		conn, err = ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				break
			}
			// A transient failure (out of fds, ...): say so and go on.
			s.log.Warn("accept failed; retrying", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		s.start(ctx, conn)
	}
	s.wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// ServeConn runs one session on conn and returns when it ends.
func (s *Server) ServeConn(ctx context.Context, conn transport.Conn) error {
	s.wg.Add(1)
	return s.run(ctx, conn)
}

// Wait waits for every session to end.
func (s *Server) Wait() { s.wg.Wait() }

func (s *Server) start(ctx context.Context, conn transport.Conn) {
	s.wg.Add(1)
	go func() { _ = s.run(ctx, conn) }()
}

func (s *Server) run(ctx context.Context, conn transport.Conn) error {
	defer s.wg.Done()
	id := s.nextID.Add(1)
	vm := s.attach(conn.VM())
	defer s.detach(vm)
	if err := vm.pool.Take(budget.Sessions, 1); err != nil {
		// Too many connections for this VM or the process: only the
		// client that asked for one more is refused.
		s.refused.Add(1)
		if now := time.Now().UnixNano(); now-s.lastRefusalLog.Load() > int64(time.Second) {
			s.lastRefusalLog.Store(now)
			s.log.Warn("connection refused: session bound reached; closing it", "vm", conn.VM(), "err", err, "refused_total", s.refused.Load())
		}
		_ = conn.Close()
		return err
	}
	defer vm.pool.Give(budget.Sessions, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	info := &sessionInfo{id: id, vm: conn.VM(), peer: fmt.Sprintf("cid %d port %d", conn.PeerCID(), conn.PeerPort()), started: time.Now(), cancel: cancel}
	s.mu.Lock()
	s.sessions[id] = info
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.sessions, id)
		s.mu.Unlock()
	}()
	if s.cfg.Dispatch != nil {
		err := s.cfg.Dispatch(ctx, conn, id)
		if err != nil {
			s.log.Warn("session ended with an error", "session", id, "vm", conn.VM(), "err", err)
		}
		return err
	}
	sess := session.New(conn, session.Config{
		Devices:                   s.devices,
		DeviceKind:                s.cfg.Driver.Kind(),
		DriverVersion:             s.cfg.Driver.Version(),
		DriverRelease:             s.cfg.Driver.Release(),
		BackendVersion:            s.cfg.Version,
		Limits:                    s.cfg.Limits,
		AllowUnprivilegedSegments: s.cfg.AllowUnprivilegedSegments,
		ExclusiveContext:          s.cfg.ExclusiveContext,
		Quota:                     vm.quota,
		Processes:                 vm.procs,
		Modules:                   vm.mods,
		Engine:                    engine.New(s.cfg.Engine, vm.reg),
		Stats:                     s.stats,
		Logger:                    s.cfg.Logger,
		ID:                        id,
		OnStickyError:             s.cfg.OnStickyError,
		Output:                    s.cfg.Output,
		Budget:                    vm.pool.Client(fmt.Sprintf("session %d", id), s.bounds.Client, s.bounds.Reserve),
		LimitTable:                s.limits,
		FrameTimeout:              s.cfg.FrameTimeout,
		HostFuncTimeout:           s.cfg.HostFuncTimeout,
		CallTimeout:               s.cfg.CallTimeout,
		OnCallTimeout:             s.cfg.OnCallTimeout,
		Trace:                     s.cfg.Trace,
		RingSpin:                  s.cfg.RingSpin,
		NoGuestRings:              s.cfg.NoGuestRings,
		DtoHSmall:                 s.cfg.DtoHSmall,
	})
	err := sess.Serve(ctx)
	if err != nil {
		s.log.Warn("session ended with an error", "session", id, "vm", conn.VM(), "err", err)
	}
	return err
}

func (s *Server) attach(name string) *vmState {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vms[name]
	if !ok {
		v = &vmState{name: name, procs: session.NewProcessTable(), reg: engine.NewRegistry(),
			pool: s.pool.Child("vm "+name, s.bounds.VM)}
		if s.cfg.VMBudget != nil {
			v.pool.LeaseFrom(s.cfg.VMBudget, budget.Slack(s.bounds.VM))
		}
		if others := s.cfg.OtherProcesses; others != nil {
			v.procs.Others = func(dev int) []protocol.ProcessInfo { return others(name, dev) }
		}
		if s.cfg.VMResources != nil {
			v.quota, v.mods = s.cfg.VMResources(name)
		}
		if v.quota == nil {
			v.quota = &session.Quota{Limit: s.cfg.MemLimit}
		}
		if v.mods == nil {
			v.mods = s.moduleCacheLocked(name)
		}
		s.vms[name] = v
	}
	v.sessions++
	return v
}

// LocalProcesses returns VM vm's guest processes on guest device dev that
// this process serves (none if it serves no session of vm): a worker's
// answer to the manager, which gathers a VM's list from its workers.
func (s *Server) LocalProcesses(vm string, dev int) []protocol.ProcessInfo {
	s.mu.Lock()
	v, ok := s.vms[vm]
	s.mu.Unlock()
	if !ok {
		return nil
	}
	return v.procs.Local(dev)
}

// detach drops a session's hold on its VM; the last one unregisters the
// VM's guest RAM.
func (s *Server) detach(v *vmState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v.sessions--
	if v.sessions == 0 {
		v.reg.Close()
		delete(s.vms, v.name)
		if c, ok := s.caches[v.name]; ok {
			c.idleSince = time.Now()
		}
	}
}

// moduleCacheLocked returns VM name's module cache, creating it, and drops
// the caches of VMs idle for longer than ModuleCacheIdle.
func (s *Server) moduleCacheLocked(name string) *session.ModuleCache {
	now := time.Now()
	for n, c := range s.caches {
		if !c.idleSince.IsZero() && now.Sub(c.idleSince) > ModuleCacheIdle {
			delete(s.caches, n)
		}
	}
	c, ok := s.caches[name]
	if !ok {
		c = &vmCache{c: session.NewModuleCache(s.cfg.ModuleCacheBytes)}
		s.caches[name] = c
	}
	c.idleSince = time.Time{}
	return c.c
}

// Status is a snapshot for "vgpu status" and metrics.
type Status struct {
	DeviceKind    string           `json:"device_kind"`
	DriverVersion int32            `json:"driver_version"`
	Uptime        string           `json:"uptime"`
	Devices       []DeviceStatus   `json:"devices"`
	VMs           []VMStatus       `json:"vms"`
	Sessions      []SessionStatus  `json:"sessions"`
	Stats         session.Snapshot `json:"stats"`
	Workers       any              `json:"workers,omitempty"`
	Fronts        any              `json:"fronts,omitempty"`
	// Budget is what guests hold of this process's bounds (per VM in VMs).
	Budget          budget.Snapshot `json:"budget"`
	RefusedSessions uint64          `json:"refused_sessions,omitempty"`
	// WorkersBudget, in a manager, is what guests hold in its worker
	// processes, summed (each worker has its own bounds; refusals of
	// workers that ended included).
	WorkersBudget *budget.Snapshot `json:"workers_budget,omitempty"`
}

// DeviceStatus describes one guest-visible device.
type DeviceStatus struct {
	GuestOrdinal    int    `json:"guest_ordinal"`
	HostOrdinal     int    `json:"host_ordinal"`
	Name            string `json:"name"`
	MemTotal        uint64 `json:"mem_total"`
	MemFree         uint64 `json:"mem_free"`
	MemUsedByVGPU   uint64 `json:"mem_used_by_vgpu"`
	Allocations     int    `json:"allocations"`
	Launches        uint64 `json:"launches"`
	LaunchesSkipped uint64 `json:"launches_not_executed,omitempty"`
}

// VMStatus describes one VM's use.
type VMStatus struct {
	VM       string          `json:"vm"`
	Sessions int             `json:"sessions"`
	MemUsed  uint64          `json:"mem_used"`
	MemLimit uint64          `json:"mem_limit"`
	Budget   budget.Snapshot `json:"budget"`
	// WorkersBudget, in a manager, is what the VM's sessions hold in
	// worker processes, summed over them.
	WorkersBudget *budget.Snapshot `json:"workers_budget,omitempty"`
}

// SessionStatus describes one session.
type SessionStatus struct {
	ID      uint64 `json:"id"`
	VM      string `json:"vm"`
	Peer    string `json:"peer"`
	Started string `json:"started"`
}

// Report is what a worker process tells its manager about itself: its
// counters, its devices and its VMs' memory.
type Report struct {
	Stats   session.Snapshot `json:"stats"`
	Devices []DeviceStatus   `json:"devices,omitempty"`
	VMs     []VMStatus       `json:"vms,omitempty"`
	// Budget is what guests hold of this process's bounds (per VM in VMs).
	Budget budget.Snapshot `json:"budget"`
}

// Aggregate is what a manager adds to its own Status: the sum of its
// workers' reports (counters of workers that ended included).
type Aggregate struct {
	Stats   session.Snapshot
	Devices []DeviceStatus
	VMMem   map[string]uint64 // device memory in use by VM
	// Budget is what guests hold of the workers' bounds, summed (use of
	// live workers; refusals of every worker).
	Budget budget.Snapshot
	// VMBudget is each VM's part of Budget.
	VMBudget map[string]budget.Snapshot
}

// Report returns this process's counters, devices and VMs.
func (s *Server) Report() Report {
	st := s.Status()
	return Report{Stats: st.Stats, Devices: st.Devices, VMs: st.VMs, Budget: st.Budget}
}

// Status returns a snapshot.
func (s *Server) Status() Status {
	st := Status{DeviceKind: s.cfg.Driver.Kind(), DriverVersion: s.cfg.Driver.Version(), Uptime: time.Since(s.started).Round(time.Second).String(), Stats: s.stats.Snapshot(),
		Budget: s.pool.Snapshot(), RefusedSessions: s.refused.Load()}
	var agg Aggregate
	if s.cfg.Aggregate != nil {
		agg = s.cfg.Aggregate()
		st.Stats.Add(agg.Stats)
		if len(s.devices) == 0 {
			st.Devices = agg.Devices
		}
		st.WorkersBudget = &agg.Budget
	}
	for gi, ctx := range s.devices {
		ds := DeviceStatus{GuestOrdinal: gi, HostOrdinal: ctx.Ordinal()}
		if p, err := ctx.Properties(); err == nil {
			ds.Name = p.Name
		}
		if free, total, err := ctx.MemGetInfo(); err == nil {
			ds.MemFree, ds.MemTotal = free, total
		}
		if r, ok := ctx.(device.StatsReporter); ok {
			d := r.Stats()
			ds.MemUsedByVGPU, ds.Allocations, ds.Launches, ds.LaunchesSkipped = d.MemUsed, d.Allocations, d.Launches, d.LaunchesSkipped
		}
		st.Devices = append(st.Devices, ds)
	}
	s.mu.Lock()
	for _, v := range s.vms {
		vs := VMStatus{VM: v.name, Sessions: v.sessions, MemUsed: v.quota.Used() + agg.VMMem[v.name], MemLimit: v.quota.Limit, Budget: v.pool.Snapshot()}
		if b, ok := agg.VMBudget[v.name]; ok {
			vs.WorkersBudget = &b
		}
		st.VMs = append(st.VMs, vs)
	}
	for _, si := range s.sessions {
		st.Sessions = append(st.Sessions, SessionStatus{ID: si.id, VM: si.vm, Peer: si.peer, Started: si.started.UTC().Format(time.RFC3339)})
	}
	s.mu.Unlock()
	if s.cfg.WorkerStatus != nil {
		st.Workers = s.cfg.WorkerStatus()
	}
	if s.cfg.FrontStatus != nil {
		st.Fronts = s.cfg.FrontStatus()
	}
	sort.Slice(st.VMs, func(i, j int) bool { return st.VMs[i].VM < st.VMs[j].VM })
	sort.Slice(st.Sessions, func(i, j int) bool { return st.Sessions[i].ID < st.Sessions[j].ID })
	return st
}
