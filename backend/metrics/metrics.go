// Package metrics exposes the backend's counters to Prometheus: per-opcode
// calls, errors and handler time, sessions, device memory in use, per-VM
// memory, launches and copy-engine use. Values are read from
// server.Status at scrape time; nothing is kept twice.
//
// Trust: the endpoint is read-only; bind it to a local address.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vgpu-project/vgpu/backend/server"
)

// Source is what metrics reads (a *server.Server).
type Source interface {
	Status() server.Status
}

type collector struct {
	src                                     Source
	calls, errs, secs                       *prometheus.Desc
	sessions, totalSessions, bad, unknown   *prometheus.Desc
	panics                                  *prometheus.Desc
	deferred, bytesIn, engineUse            *prometheus.Desc
	memUsed, memTotal, memFree, launches    *prometheus.Desc
	skipped, vmMem, vmLimit, vmSessions, up *prometheus.Desc
	budgetUsed, budgetLimit, budgetRefused  *prometheus.Desc
	refusedSessions, hostFuncTimeouts       *prometheus.Desc
	callTimeouts                            *prometheus.Desc
	workersUsed, workersRefused             *prometheus.Desc
}

// NewCollector returns a prometheus.Collector over src.
func NewCollector(src Source) prometheus.Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("vgpu_"+name, help, labels, nil)
	}
	return &collector{
		src:              src,
		calls:            d("calls_total", "Requests executed, by opcode.", "op"),
		errs:             d("call_errors_total", "Requests answered with an error, by opcode.", "op"),
		secs:             d("call_seconds_total", "Backend time spent in handlers, by opcode.", "op"),
		sessions:         d("sessions", "Open sessions."),
		totalSessions:    d("sessions_total", "Sessions started."),
		bad:              d("bad_frames_total", "Frames with an invalid header."),
		unknown:          d("unknown_opcodes_total", "Requests with an opcode this backend does not serve."),
		panics:           d("session_panics_total", "Internal errors caught at a session's recover boundary (that session's work ended, the process kept serving)."),
		deferred:         d("deferred_errors_total", "Errors of asynchronous calls reported by notification."),
		bytesIn:          d("copy_bytes_total", "Bytes copied between guests and devices.", "dir"),
		engineUse:        d("engine_copies_total", "Guest-memory copies by engine.", "engine"),
		memUsed:          d("device_memory_used_bytes", "Device memory allocated through vgpu.", "gpu", "name"),
		memTotal:         d("device_memory_total_bytes", "Device memory size.", "gpu", "name"),
		memFree:          d("device_memory_free_bytes", "Free device memory.", "gpu", "name"),
		launches:         d("launches_total", "Kernel launches accepted.", "gpu"),
		skipped:          d("launches_not_executed_total", "Launches validated but not executed (sim device).", "gpu"),
		vmMem:            d("vm_memory_used_bytes", "Device memory held by a VM.", "vm"),
		vmLimit:          d("vm_memory_limit_bytes", "A VM's device memory cap (0: none).", "vm"),
		vmSessions:       d("vm_sessions", "Open sessions of a VM.", "vm"),
		up:               d("device_kind_info", "1, labelled with the device kind.", "kind"),
		budgetUsed:       d("budget_used", "What guests hold of the process's bounds (fds, mappings, queued bytes, objects, host-function waits, sessions).", "resource"),
		budgetLimit:      d("budget_limit", "The process's bound on what guests may hold.", "resource"),
		budgetRefused:    d("budget_refused_total", "Requests refused at the process's bound.", "resource"),
		refusedSessions:  d("sessions_refused_total", "Connections closed at once for a VM's or the process's session bound."),
		hostFuncTimeouts: d("host_func_timeouts_total", "Host functions the guest did not answer in time (its stream went on, the guest got CUDA_ERROR_TIMEOUT)."),
		callTimeouts:     d("call_timeouts_total", "Calls that waited for the device past --call-timeout (answered CUDA_ERROR_LAUNCH_TIMEOUT, connection closed)."),
		workersUsed:      d("workers_budget_used", "What guests hold of the worker processes' bounds, summed over the workers (each has its own).", "resource"),
		workersRefused:   d("workers_budget_refused_total", "Requests refused at a worker process's bounds, summed over the workers.", "resource"),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.calls, c.errs, c.secs, c.sessions, c.totalSessions, c.bad, c.unknown, c.panics, c.deferred,
		c.bytesIn, c.engineUse, c.memUsed, c.memTotal, c.memFree, c.launches, c.skipped, c.vmMem, c.vmLimit, c.vmSessions, c.up,
		c.budgetUsed, c.budgetLimit, c.budgetRefused, c.refusedSessions, c.hostFuncTimeouts, c.callTimeouts, c.workersUsed, c.workersRefused} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Status()
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	for op, o := range st.Stats.Ops {
		counter(c.calls, float64(o.Calls), op)
		counter(c.errs, float64(o.Errors), op)
		counter(c.secs, float64(o.Nanos)/1e9, op)
	}
	gauge(c.sessions, float64(st.Stats.ActiveSessions))
	counter(c.totalSessions, float64(st.Stats.TotalSessions))
	counter(c.bad, float64(st.Stats.BadFrames))
	counter(c.unknown, float64(st.Stats.UnknownOps))
	counter(c.panics, float64(st.Stats.Panics))
	counter(c.deferred, float64(st.Stats.DeferredErrors))
	counter(c.bytesIn, float64(st.Stats.BytesHtoD), "htod")
	counter(c.bytesIn, float64(st.Stats.BytesDtoH), "dtoh")
	for e, n := range st.Stats.EngineCopies {
		counter(c.engineUse, float64(n), e)
	}
	for _, d := range st.Devices {
		g := strconv.Itoa(d.GuestOrdinal)
		gauge(c.memUsed, float64(d.MemUsedByVGPU), g, d.Name)
		gauge(c.memTotal, float64(d.MemTotal), g, d.Name)
		gauge(c.memFree, float64(d.MemFree), g, d.Name)
		counter(c.launches, float64(d.Launches), g)
		counter(c.skipped, float64(d.LaunchesSkipped), g)
	}
	for _, v := range st.VMs {
		gauge(c.vmMem, float64(v.MemUsed), v.VM)
		gauge(c.vmLimit, float64(v.MemLimit), v.VM)
		gauge(c.vmSessions, float64(v.Sessions), v.VM)
	}
	gauge(c.up, 1, st.DeviceKind)
	for r, v := range st.Budget.Used {
		gauge(c.budgetUsed, float64(v), r)
	}
	for r, v := range st.Budget.Limits {
		gauge(c.budgetLimit, float64(v), r)
	}
	for r, v := range st.Budget.Refused {
		counter(c.budgetRefused, float64(v), r)
	}
	counter(c.refusedSessions, float64(st.RefusedSessions))
	counter(c.hostFuncTimeouts, float64(st.Stats.HostFuncTimeouts))
	counter(c.callTimeouts, float64(st.Stats.CallTimeouts))
	if w := st.WorkersBudget; w != nil {
		for r, v := range w.Used {
			gauge(c.workersUsed, float64(v), r)
		}
		for r, v := range w.Refused {
			counter(c.workersRefused, float64(v), r)
		}
	}
}

// Server is a running metrics endpoint.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Listen serves /metrics on addr.
func Listen(addr string, src Source, log hclog.Logger) (*Server, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(NewCollector(src)); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln = limitListener(ln, MaxConns)
	s := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: ReadTimeout,
		WriteTimeout: WriteTimeout, IdleTimeout: IdleTimeout, MaxHeaderBytes: 16 << 10}, ln: ln}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && log != nil {
			log.Warn("metrics endpoint failed", "err", err)
		}
	}()
	return s, nil
}

// The endpoint's bounds: a scraper that keeps a connection open without
// asking anything gives it up after IdleTimeout (each holds an fd of the
// backend), and no more than MaxConns are served at once (the rest wait in
// the listen backlog).
var (
	ReadTimeout  = 10 * time.Second
	WriteTimeout = 30 * time.Second
	IdleTimeout  = 30 * time.Second
	MaxConns     = 32
)

// limitListener accepts at most n connections at a time.
type limited struct {
	net.Listener
	slots chan struct{}
}

func limitListener(ln net.Listener, n int) net.Listener {
	return &limited{Listener: ln, slots: make(chan struct{}, n)}
}

func (l *limited) Accept() (net.Conn, error) {
	l.slots <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: c, free: func() { <-l.slots }}, nil
}

type slotConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}

// Addr is the address the endpoint listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the endpoint.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}
