package worker_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/backend/worker"
	"github.com/vgpu-project/vgpu/protocol"
)

// testKernelsPTX declares the sim's test kernels (device/sim/testkernels.go).
const testKernelsPTX = `
.version 7.0
.target sm_52
.address_size 64
.visible .entry vgpu_printf_probe(.param .u32 tag) { ret; }
.visible .entry vgpu_fault_illegal_address(.param .u64 p) { ret; }
`

// guestProc is one guest process: a session of a VM through the manager.
type guestProc struct {
	t      *testing.T
	c      *sessiontest.Client
	served chan error
}

var nextSession struct {
	sync.Mutex
	n uint64
}

func connect(t *testing.T, m *worker.Manager, vm string) *guestProc {
	t.Helper()
	nextSession.Lock()
	nextSession.n++
	id := nextSession.n
	nextSession.Unlock()
	bc, gc := sessiontest.Pipe(3, 1023, nil)
	bc.Name = vm
	g := &guestProc{t: t, c: sessiontest.NewClient(gc), served: make(chan error, 1)}
	go func() { g.served <- m.ServeConn(context.Background(), bc, id) }()
	t.Cleanup(func() { g.c.Close() })
	return g
}

func (g *guestProc) hello(features uint64) protocol.HelloReply {
	g.t.Helper()
	st, rep, _, err := sessiontest.Do[protocol.HelloReq, protocol.HelloReply](g.c, protocol.OpHello, &protocol.HelloReq{Major: 1, Features: features}, nil)
	if err != nil || st != 0 {
		g.t.Fatalf("hello: %v %v", err, device.Result(st))
	}
	return rep
}

func (g *guestProc) alloc(n uint64) (uint64, device.Result) {
	g.t.Helper()
	st, p, _, err := sessiontest.Do[protocol.MemAllocReq, protocol.PtrReply](g.c, protocol.OpMemAlloc, &protocol.MemAllocReq{Size: n}, nil)
	if err != nil {
		g.t.Fatal(err)
	}
	return p.Ptr, device.Result(st)
}

func (g *guestProc) free() uint64 {
	g.t.Helper()
	st, r, _, err := sessiontest.Do[protocol.DeviceReq, protocol.MemInfoReply](g.c, protocol.OpMemGetInfo, &protocol.DeviceReq{}, nil)
	if err != nil || st != 0 {
		g.t.Fatalf("mem info: %v %v", err, device.Result(st))
	}
	return r.Free
}

func (g *guestProc) load(img []byte, byHash bool) (protocol.ModuleLoadReply, device.Result) {
	g.t.Helper()
	req := protocol.ModuleLoadReq{Hash: sha256.Sum256(img)}
	tail := img
	if byHash {
		tail = nil
	} else {
		req.Image = protocol.BufRef{Kind: protocol.BufInline, Len: uint64(len(img))}
	}
	st, rep, _, err := sessiontest.Do[protocol.ModuleLoadReq, protocol.ModuleLoadReply](g.c, protocol.OpModuleLoad, &req, tail)
	if err != nil {
		g.t.Fatal(err)
	}
	return rep, device.Result(st)
}

func (g *guestProc) launch(img []byte, kernel string, params []byte) {
	g.t.Helper()
	mod, st := g.load(img, false)
	if st != 0 {
		g.t.Fatalf("load: %v", st)
	}
	st2, fn, _, err := sessiontest.Do[protocol.NameReq, protocol.FunctionReply](g.c, protocol.OpModuleGetFunction, &protocol.NameReq{Module: mod.Module, NameLen: uint32(len(kernel))}, []byte(kernel))
	if err != nil || st2 != 0 {
		g.t.Fatalf("get %s: %v %v", kernel, err, device.Result(st2))
	}
	l := protocol.LaunchReq{Func: fn.Func, GridX: 1, GridY: 1, GridZ: 1, BlockX: 2, BlockY: 1, BlockZ: 1, ParamSize: uint32(len(params))}
	f, err := g.c.Call(protocol.OpLaunchKernel, 0, append(protocol.Bytes(&l), params...), nil)
	if err != nil || f.Status != 0 {
		g.t.Fatalf("launch %s: %v %v", kernel, err, device.Result(f.Status))
	}
}

func (g *guestProc) sync() protocol.Frame {
	g.t.Helper()
	f, err := g.c.Call(protocol.OpDeviceSynchronize, 0, protocol.Bytes(&protocol.DeviceReq{}), nil)
	if err != nil {
		g.t.Fatal(err)
	}
	return f
}

// end hangs up and waits for the manager to see the session end.
func (g *guestProc) end() {
	g.t.Helper()
	g.c.Close()
	select {
	case <-g.served:
	case <-time.After(10 * time.Second):
		g.t.Fatal("the session did not end after the guest hung up")
	}
}

// TestPerProcessWorkers: with a worker per guest process (the default of
// vgpu serve), each session of a VM gets its own worker from the pool; the
// VM's memory cap holds across them and what MemGetInfo calls free can be
// allocated; a module image one process loaded is the next process's to
// load by hash, and no other VM's; a limit a process sets is its own; a
// process's device printf reaches that process only; a sticky error ends
// only the process that caused it; the
// counters of workers that ended are still counted; workers exit with their
// session and give their lease back.
func TestPerProcessWorkers(t *testing.T) {
	m := manager(t, "process")
	m.Pool = 2
	m.Start()
	testwait.For(t, 20*time.Second, "the pool's two workers ready", func() bool {
		n := 0
		for _, w := range m.Status().Workers {
			if w.State == "ready" {
				n++
			}
		}
		return n == 2
	})
	const mib = 1 << 20
	a, b, c := connect(t, m, "vm-p"), connect(t, m, "vm-p"), connect(t, m, "vm-q")
	for _, g := range []*guestProc{a, b, c} {
		g.hello(protocol.FeatureBatch | protocol.FeatureDeviceOutput)
	}
	pids := map[int]bool{}
	for _, w := range m.Status().Workers {
		if w.State == "serving" {
			pids[w.PID] = true
		}
	}
	if len(pids) != 3 {
		t.Fatalf("three guest processes, %d serving workers: %+v", len(pids), m.Status())
	}

	// The cap of vm-p spans its two processes.
	if _, st := a.alloc(40 * mib); st != 0 {
		t.Fatalf("40 MiB of 64 in process a: %v", st)
	}
	if _, st := b.alloc(40 * mib); st != device.ErrOutOfMemory {
		t.Fatalf("40 more MiB in process b of the same VM: %v, want CUDA_ERROR_OUT_OF_MEMORY", st)
	}
	free := b.free()
	if free == 0 || free > 24*mib {
		t.Fatalf("process b is told %d bytes are free (a holds 40 MiB of 64)", free)
	}
	if _, st := b.alloc(free); st != 0 {
		t.Fatalf("process b allocating the %d bytes it was told are free: %v", free, st)
	}
	if _, st := c.alloc(60 * mib); st != 0 {
		t.Fatalf("vm-q's own cap: %v", st)
	}

	// A limit one process sets is its own (issue 20: it was every
	// client's in a shared context): CU_LIMIT_PRINTF_FIFO_SIZE.
	if st, _, _, err := sessiontest.Do[protocol.LimitReq, protocol.Empty](a.c, protocol.OpDeviceSetLimit, &protocol.LimitReq{Limit: 1, Value: 4 << 20}, nil); err != nil || st != 0 {
		t.Fatalf("a sets its printf FIFO: %v %v", err, device.Result(st))
	}
	for name, g := range map[string]*guestProc{"a": a, "b, same VM": b, "c, other VM": c} {
		_, l, _, err := sessiontest.Do[protocol.LimitReq, protocol.LimitReply](g.c, protocol.OpDeviceGetLimit, &protocol.LimitReq{Limit: 1}, nil)
		want := uint64(1 << 20)
		if name == "a" {
			want = 4 << 20
		}
		if err != nil || l.Value != want {
			t.Fatalf("process %s's printf FIFO after a set its own: %d (%v), want %d", name, l.Value, err, want)
		}
	}

	// Device output: each process gets its own printf lines.
	a.launch([]byte(testKernelsPTX), "vgpu_printf_probe", []byte{1, 0, 0, 0})
	c.launch([]byte(testKernelsPTX), "vgpu_printf_probe", []byte{3, 0, 0, 0})
	for tag, g := range map[int]*guestProc{1: a, 3: c} {
		g.sync() // its reply (or the launch's) follows the output
		out := notes(g)
		want := ""
		for th := 0; th < 2; th++ {
			want += "vgpu printf probe: tag " + string(rune('0'+tag)) + " block 0 thread " + string(rune('0'+th)) + "\n"
		}
		if out != want {
			t.Fatalf("process %d's output %q, want %q", tag, out, want)
		}
	}
	if out := notes(b); out != "" {
		t.Fatalf("process b printed nothing but got %q", out)
	}

	// A sticky error in b ends b's GPU work only.
	b.launch([]byte(testKernelsPTX), "vgpu_fault_illegal_address", make([]byte, 8))
	if st := device.Result(b.sync().Status); st != device.ErrIllegalAddress {
		t.Fatalf("b's sync after its fault: %v", st)
	}
	if st := device.Result(b.sync().Status); st != device.ErrIllegalAddress {
		t.Fatalf("b after its fault: %v, want it to stay broken", st)
	}
	if st := device.Result(a.sync().Status); st != 0 {
		t.Fatalf("a, same VM, after b's fault: %v", st)
	}
	p, st := a.alloc(4096)
	if st != 0 {
		t.Fatalf("a's alloc after b's fault: %v", st)
	}
	data := []byte("a's bytes survive b's fault")
	h := protocol.MemcpyHtoDReq{Dst: p, Src: protocol.BufRef{Kind: protocol.BufInline, Len: uint64(len(data))}}
	if f, err := a.c.Call(protocol.OpMemcpyHtoD, 0, append(protocol.Bytes(&h), data...), nil); err != nil || f.Status != 0 {
		t.Fatalf("a's copy: %v %v", err, f.Status)
	}
	d := protocol.MemcpyDtoHReq{Src: p, Dst: protocol.BufRef{Kind: protocol.BufInline, Len: uint64(len(data))}}
	if f, err := a.c.Call(protocol.OpMemcpyDtoH, 0, protocol.Bytes(&d), nil); err != nil || string(f.Payload) != string(data) {
		t.Fatalf("a's copy back: %v %q", err, f.Payload)
	}
	b.end()

	// Module images: a later process of vm-p loads a's image by hash,
	// vm-q's processes cannot.
	img := []byte("// a's image\n" + testKernelsPTX)
	if _, st := a.load(img, false); st != 0 {
		t.Fatalf("a's load: %v", st)
	}
	a.end()
	a2 := connect(t, m, "vm-p")
	if rep, st := a2.load(img, true); st != 0 || rep.Cached != 1 {
		t.Fatalf("the next process of vm-p, by hash: %v cached=%d", st, rep.Cached)
	}
	if _, st := c.load(img, true); st != device.ErrNotFound {
		t.Fatalf("vm-q loading vm-p's image by hash: %v, want CUDA_ERROR_NOT_FOUND", st)
	}
	// a's and b's memory went with their workers.
	if _, st := a2.alloc(60 * mib); st != 0 {
		t.Fatalf("after a and b ended, 60 MiB in vm-p: %v", st)
	}
	a2.end()
	c.end()

	testwait.For(t, 20*time.Second, "every served worker gone, leases back", func() bool {
		st := m.Status()
		for _, w := range st.Workers {
			if w.State == "serving" {
				return false
			}
		}
		for _, v := range st.VMs {
			if v.Leased != 0 || v.Workers != 0 {
				return false
			}
		}
		return len(st.Exits) >= 4
	})
	agg := m.Aggregate()
	if n := agg.Stats.Ops["MEM_ALLOC"]; n.Calls != 6 || n.Errors != 1 {
		t.Fatalf("MEM_ALLOC counted after the workers ended: %+v, want 6 calls, 1 error: %+v", n, agg.Stats)
	}
	if agg.Stats.TotalSessions != 4 || agg.Stats.ActiveSessions != 0 {
		t.Fatalf("sessions: %d total, %d active", agg.Stats.TotalSessions, agg.Stats.ActiveSessions)
	}
}

// notes returns the device output a guest has been sent so far.
func notes(g *guestProc) string {
	var b strings.Builder
	for {
		select {
		case n := <-g.c.Notes:
			if n.Opcode == protocol.OpNotifyOutput {
				p, tail, err := protocol.Decode[protocol.OutputNotify](n.Payload)
				if err == nil && int(p.Len) <= len(tail) {
					b.Write(tail[:p.Len])
				}
			}
		default:
			return b.String()
		}
	}
}

// TestMaxProcessesPerVM: a VM may have MaxPerVM guest processes on the GPU
// at once (each a worker with a CUDA context); one more is refused, another
// VM is not affected, and the slot comes back when a process ends.
func TestMaxProcessesPerVM(t *testing.T) {
	m := manager(t, "process")
	m.MaxPerVM = 1
	a := connect(t, m, "vm-1")
	a.hello(protocol.FeatureBatch)
	b := connect(t, m, "vm-1")
	select {
	case err := <-b.served:
		if !errors.Is(err, worker.ErrTooManyProcesses) {
			t.Fatalf("the second process of vm-1: %v, want ErrTooManyProcesses", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second process of vm-1 was not refused")
	}
	if _, err := b.c.Call(protocol.OpPing, 0, nil, nil); err == nil {
		t.Fatal("the refused process's connection still answers")
	}
	connect(t, m, "vm-2").hello(protocol.FeatureBatch)
	a.end()
	connect(t, m, "vm-1").hello(protocol.FeatureBatch)
}
