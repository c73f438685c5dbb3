package worker_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/backend/server"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/backend/worker"
	"github.com/vgpu-project/vgpu/protocol"
)

// The test binary doubles as the worker: with VGPU_TEST_WORKER set it runs
// worker.Run on fd 3, as "vgpu worker" does.
func TestMain(m *testing.M) {
	if mode := os.Getenv("VGPU_TEST_WORKER"); mode != "" {
		os.Exit(childWorker(mode))
	}
	os.Exit(m.Run())
}

// childWorker is "vgpu worker" on the sim: mode "ok" and "poison" (which
// reports a sticky error at once) serve a VM (PerVM); "process" serves one
// guest process (PerProcess) as vgpu serve's default does, with its fd 1
// and 2 captured and a memory cap of 64 MiB shared with the VM's others.
func childWorker(mode string) int {
	log := hclog.New(&hclog.LoggerOptions{Name: "test-worker", Level: hclog.Warn})
	ctrl := worker.NewControl(os.NewFile(3, "control"))
	opt := worker.RunOptions{Mode: worker.PerVM, ReportInterval: 50 * time.Millisecond}
	cfg := server.Config{AllowUnprivilegedSegments: true, Logger: log, OnStickyError: ctrl.Poisoned, OtherProcesses: ctrl.OtherProcesses}
	simCfg := sim.Config{MemBytes: 256 << 20}
	if mode == "process" {
		out, logFile, err := worker.CaptureOutput()
		if err != nil {
			return 1
		}
		log = hclog.New(&hclog.LoggerOptions{Name: "test-worker", Level: hclog.Warn, Output: logFile})
		opt.Mode = worker.PerProcess
		cfg.Output, cfg.VMResources, cfg.VMBudget, cfg.Logger = out, ctrl.VMResources(testMemLimit), ctrl.VMBudget(), log
	}
	drv, _ := sim.New(simCfg)
	cfg.Driver = drv
	if mode == "stall" {
		// A call deadline far below the host-function deadline: a stream
		// held by an unanswered host function stands for a kernel that
		// does not end.
		cfg.CallTimeout, cfg.HostFuncTimeout, cfg.OnCallTimeout = 200*time.Millisecond, time.Hour, ctrl.EndOnCallTimeout(log)
	}
	srv, err := server.New(cfg)
	if err != nil {
		return 1
	}
	if mode == "poison" {
		ctrl.Poisoned(errors.New("test: pretend CUDA_ERROR_ILLEGAL_ADDRESS"))
	}
	if err := worker.Run(context.Background(), ctrl, srv, log, opt); err != nil {
		return 1
	}
	return 0
}

// testMemLimit is the VM cap of the "process" workers (and their manager).
const testMemLimit = 64 << 20

func manager(t testing.TB, mode string) *worker.Manager {
	m := worker.NewManager(func(vm string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "VGPU_TEST_WORKER="+mode)
		return cmd
	}, nil)
	if mode == "process" {
		m.Mode, m.MemLimit = worker.PerProcess, testMemLimit
	}
	t.Cleanup(m.Close)
	return m
}

func TestWorkerServesSessionsWithGuestMemory(t *testing.T) {
	table, err := sessiontest.GuestRAM(sessiontest.RegionSpec{GPA: 0, Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer table.Release()
	ram, _ := table.Slice(0, 8192)
	copy(ram[4096:], "guest page handed to the worker by memfd")
	m := manager(t, "ok")
	bc, gc := sessiontest.Pipe(3, 1023, table)
	bc.Name = "vm-a"
	served := make(chan error, 1)
	go func() { served <- m.ServeConn(context.Background(), bc, 1) }()
	c := sessiontest.NewClient(gc)
	st, hello, _, err := sessiontest.Do[protocol.HelloReq, protocol.HelloReply](c, protocol.OpHello, &protocol.HelloReq{Major: 1, Features: ^uint64(0)}, nil)
	if err != nil || st != 0 || hello.Features&protocol.FeatureSegments == 0 {
		t.Fatalf("hello through the worker: %v %d %+v", err, st, hello)
	}
	_, p, _, _ := sessiontest.Do[protocol.MemAllocReq, protocol.PtrReply](c, protocol.OpMemAlloc, &protocol.MemAllocReq{Size: 4096}, nil)
	st, _, _, err = sessiontest.DoSegs[protocol.MemcpyHtoDReq, protocol.Empty](c, protocol.OpMemcpyHtoD,
		&protocol.MemcpyHtoDReq{Dst: p.Ptr, Src: protocol.BufRef{Kind: protocol.BufSegments, Len: 4096}}, []protocol.Segment{{GPA: 4096, Len: 4096}})
	if err != nil || st != 0 {
		t.Fatalf("htod with segments in the worker: %v %d", err, st)
	}
	req := protocol.MemcpyDtoHReq{Src: p.Ptr, Dst: protocol.BufRef{Kind: protocol.BufInline, Len: 41}}
	f, err := c.Call(protocol.OpMemcpyDtoH, 0, protocol.Bytes(&req), nil)
	if err != nil || !bytes.Equal(f.Payload, ram[4096:4096+41]) {
		t.Fatalf("worker read guest memory: %v %q", err, f.Payload)
	}
	st1 := m.Status()
	if len(st1.Workers) != 1 || st1.Workers[0].Sessions != 1 {
		t.Fatalf("status %+v", st1)
	}
	pid := st1.Workers[0].PID

	// Kill the worker: the guest's connection ends (an error, not a hang),
	// and the VM's next connection gets a fresh worker.
	syscall.Kill(pid, syscall.SIGKILL)
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("guest connection still open after its worker died")
	}
	if err := <-served; err == nil {
		t.Fatal("ServeConn reported no error for a dead worker")
	}
	bc2, gc2 := sessiontest.Pipe(3, 1023, table)
	bc2.Name = "vm-a"
	go m.ServeConn(context.Background(), bc2, 2)
	c2 := helloClient(t, gc2)
	defer c2.Close()
	if f, err := c2.Call(protocol.OpPing, 0, nil, nil); err != nil || f.Status != 0 {
		t.Fatalf("new connection after the crash: %v", err)
	}
	st2 := m.Status()
	if len(st2.Workers) != 1 || st2.Workers[0].PID == pid || len(st2.Exits) != 1 {
		t.Fatalf("after the crash: %+v", st2)
	}
}

func TestPoisonedWorkerIsReplaced(t *testing.T) {
	m := manager(t, "poison")
	bc, gc := sessiontest.Pipe(3, 1023, nil)
	bc.Name = "vm-b"
	go m.ServeConn(context.Background(), bc, 1)
	c := helloClient(t, gc)
	if f, err := c.Call(protocol.OpPing, 0, nil, nil); err != nil || f.Status != 0 {
		t.Fatalf("ping: %v", err)
	}
	first := m.Status().Workers[0].PID
	// Wait (with a deadline) for the poisoned report to arrive.
	deadline := time.Now().Add(10 * time.Second)
	for !m.Status().Workers[0].Poisoned {
		if time.Now().After(deadline) {
			t.Fatal("poisoned report not seen")
		}
		runtimeGosched()
	}
	bc2, gc2 := sessiontest.Pipe(3, 1023, nil)
	bc2.Name = "vm-b"
	go m.ServeConn(context.Background(), bc2, 2)
	c2 := helloClient(t, gc2)
	defer c2.Close()
	if f, err := c2.Call(protocol.OpPing, 0, nil, nil); err != nil || f.Status != 0 {
		t.Fatalf("ping on the fresh worker: %v", err)
	}
	// The poisoned one serves its last session; the VM's new session went
	// to a fresh worker.
	if ws := m.Status().Workers; len(ws) != 2 || ws[0].PID != first || !ws[0].Poisoned || ws[1].Sessions != 1 {
		t.Fatalf("workers %+v (first %d)", ws, first)
	}
	c.Close() // its last session ends: the poisoned worker exits
	deadline = time.Now().Add(10 * time.Second)
	for len(m.Status().Exits) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("poisoned worker did not exit after its last session")
		}
		runtimeGosched()
	}
}

// A VM's worker that has had no session for IdleTimeout exits (its CUDA
// context and guest-RAM mappings go with it); the VM's next connection gets
// a fresh worker.
func TestIdleWorkerStops(t *testing.T) {
	m := manager(t, "ok")
	m.IdleTimeout = 50 * time.Millisecond
	bc, gc := sessiontest.Pipe(3, 1023, nil)
	bc.Name = "vm-idle"
	served := make(chan error, 1)
	go func() { served <- m.ServeConn(context.Background(), bc, 1) }()
	c := helloClient(t, gc)
	if f, err := c.Call(protocol.OpPing, 0, nil, nil); err != nil || f.Status != 0 {
		t.Fatalf("ping: %v", err)
	}
	c.Close()
	<-served
	deadline := time.Now().Add(10 * time.Second)
	for st := m.Status(); len(st.Workers) != 0 || len(st.Exits) != 1; st = m.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("idle worker still running: %+v", st)
		}
		runtimeGosched()
	}
	bc2, gc2 := sessiontest.Pipe(3, 1023, nil)
	bc2.Name = "vm-idle"
	go m.ServeConn(context.Background(), bc2, 2)
	c2 := helloClient(t, gc2)
	defer c2.Close()
	if f, err := c2.Call(protocol.OpPing, 0, nil, nil); err != nil || f.Status != 0 {
		t.Fatalf("ping on a fresh worker after the idle one stopped: %v", err)
	}
}

// helloClient starts a client that has said HELLO (a session serves
// nothing before it).
func helloClient(t *testing.T, conn net.Conn) *sessiontest.Client {
	t.Helper()
	c, err := sessiontest.NewHelloClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
