//go:build gpu

package cuda

import (
	"encoding/binary"
	"math"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
)

// Run on the GPU machine: go test -tags gpu ./backend/device/cuda
// (or a test binary built with CGO_ENABLED=0 go test -c -tags gpu).

var (
	gpuOnce sync.Once
	gpuDrv  *Driver
	gpuErr  error
)

func gpu(t *testing.T) *Context {
	t.Helper()
	gpuOnce.Do(func() { gpuDrv, gpuErr = Open(nil) })
	if gpuErr != nil {
		t.Fatalf("no GPU for a gpu-tagged test: %v", gpuErr)
	}
	c, err := gpuDrv.Context(0)
	if err != nil {
		t.Fatal(err)
	}
	return c.(*Context)
}

func ok(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestGPUProperties(t *testing.T) {
	c := gpu(t)
	p, err := c.Properties()
	ok(t, "properties", err)
	if p.Name == "" || p.TotalMem < 1<<30 || p.Attrs[75] < 7 || p.Attrs[16] == 0 {
		t.Fatalf("properties: %q mem %d cc %d.%d SMs %d", p.Name, p.TotalMem, p.Attrs[75], p.Attrs[76], p.Attrs[16])
	}
	free, total, err := c.MemGetInfo()
	ok(t, "mem info", err)
	t.Logf("%s, cc %d.%d, %d SMs, %d/%d MiB free, CUDA %d, cuFuncGetParamInfo %v",
		p.Name, p.Attrs[75], p.Attrs[76], p.Attrs[16], free>>20, total>>20, gpuDrv.Version(), c.l.has("cuFuncGetParamInfo"))
	lim, err := c.GetLimit(2)
	ok(t, "get limit", err)
	ok(t, "set limit", c.SetLimit(2, lim))
}

func TestGPUMemory(t *testing.T) {
	c := gpu(t)
	const n = 1 << 20
	p, err := c.MemAlloc(n)
	ok(t, "alloc", err)
	defer c.MemFree(p)
	q, err := c.MemAlloc(n)
	ok(t, "alloc", err)
	defer c.MemFree(q)
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i * 13)
	}
	ok(t, "htod", c.MemcpyHtoD(p, src, 0, false))
	ok(t, "dtod", c.MemcpyDtoD(q, p, n, 0, false))
	got := make([]byte, n)
	ok(t, "dtoh", c.MemcpyDtoH(got, q, 0, false))
	for i := range got {
		if got[i] != src[i] {
			t.Fatalf("byte %d: %d != %d", i, got[i], src[i])
		}
	}
	s, err := c.StreamCreate(1, 0)
	ok(t, "stream", err)
	defer c.StreamDestroy(s)
	ok(t, "memset8 async", c.Memset(p, 0xab, 1, 16, 1, 0, s, true))
	ok(t, "memset16 async", c.Memset(p+16, 0xcdef, 2, 8, 1, 0, s, true))
	ok(t, "memset32", c.Memset(p+32, 0x01020304, 4, 4, 1, 0, 0, false))
	ok(t, "memset2D8", c.Memset(p+1024, 0x77, 1, 4, 3, 256, s, true))
	ok(t, "sync", c.StreamSynchronize(s))
	ok(t, "dtoh", c.MemcpyDtoH(got[:2048], p, s, true))
	ok(t, "sync", c.StreamSynchronize(s))
	if got[15] != 0xab || got[16] != 0xef || got[17] != 0xcd || binary.LittleEndian.Uint32(got[44:]) != 0x01020304 || got[1024+512+3] != 0x77 || got[1024+4] == 0x77 {
		t.Fatalf("memsets: % x / % x", got[:48], got[1024:1032])
	}
	// Registered host memory with a device address.
	host := mapHost(t, 1<<20)
	dp, err := c.HostRegister(host, false)
	ok(t, "host register", err)
	copy(host, "mapped host memory")
	ok(t, "dtod from mapped host memory", c.MemcpyDtoD(q, dp, 64, 0, false))
	ok(t, "dtoh", c.MemcpyDtoH(got[:18], q, 0, false))
	if string(got[:18]) != "mapped host memory" {
		t.Fatalf("via device pointer of host memory: %q", got[:18])
	}
	ok(t, "host unregister", c.HostUnregister(host))
}

func TestGPUKernel(t *testing.T) {
	c := gpu(t)
	m, err := c.ModuleLoad([]byte(sessiontest.FillPTX))
	ok(t, "module load", err)
	defer c.ModuleUnload(m)
	f, err := c.ModuleGetFunction(m, "fill")
	ok(t, "get function", err)
	ps, err := c.FuncParams(f)
	ok(t, "param info", err)
	want := []device.Param{{Offset: 0, Size: 8}, {Offset: 8, Size: 4}, {Offset: 12, Size: 8}, {Offset: 20, Size: 1}}
	if len(ps) != 4 || ps[0] != want[0] || ps[1] != want[1] || ps[2] != want[2] || ps[3] != want[3] {
		t.Fatalf("param layout %v, want %v", ps, want)
	}
	const n = 1000
	out, err := c.MemAlloc(n * 4)
	ok(t, "alloc", err)
	defer c.MemFree(out)
	cfg := device.LaunchConfig{Grid: [3]uint32{(n + 127) / 128, 1, 1}, Block: [3]uint32{128, 1, 1}}
	ok(t, "launch", c.Launch(f, cfg, sessiontest.FillParams(uint64(out), n, 0.5, 3, 2)))
	ok(t, "sync", c.Synchronize())
	got := make([]byte, n*4)
	ok(t, "dtoh", c.MemcpyDtoH(got, out, 0, false))
	for i := 0; i < n; i++ {
		v := math.Float32frombits(binary.LittleEndian.Uint32(got[i*4:]))
		if v != float32(i)*0.5+3+2 {
			t.Fatalf("out[%d] = %v, want %v", i, v, float32(i)*0.5+5)
		}
	}
	a, err := c.FuncGetAttribute(f, 0)
	ok(t, "func attribute", err)
	ok(t, "set func attribute", c.FuncSetAttribute(f, 8, 64<<10))
	blocks, err := c.OccupancyMaxBlocks(f, 128, 0, 0)
	ok(t, "occupancy", err)
	if a == 0 || blocks == 0 {
		t.Fatalf("max threads %d, occupancy %d", a, blocks)
	}
	// The image fallback (drivers without cuFuncGetParamInfo) agrees.
	c.mu.Lock()
	c.images[m] = []byte(sessiontest.FillPTX)
	c.mu.Unlock()
	ips, err := c.paramsFromImage(f)
	ok(t, "params from image", err)
	if len(ips) != 4 || ips[2] != want[2] || ips[3] != want[3] {
		t.Fatalf("image layout %v", ips)
	}
}

func TestGPUStreamsEventsHostFuncs(t *testing.T) {
	c := gpu(t)
	s, err := c.StreamCreate(0, -1)
	ok(t, "stream", err)
	defer c.StreamDestroy(s)
	a, err := c.EventCreate(0)
	ok(t, "event", err)
	defer c.EventDestroy(a)
	b, err := c.EventCreate(0)
	ok(t, "event", err)
	defer c.EventDestroy(b)
	release := make(chan struct{})
	ran := make(chan struct{})
	ok(t, "record a", c.EventRecord(a, s))
	ok(t, "host func", c.LaunchHostFunc(s, func() { close(ran); <-release }))
	ok(t, "record b", c.EventRecord(b, s))
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("host function did not run")
	}
	if err := c.StreamQuery(s); device.ResultOf(err) != device.ErrNotReady {
		t.Fatalf("stream query behind a blocked host function: %v", err)
	}
	if err := c.EventQuery(b); device.ResultOf(err) != device.ErrNotReady {
		t.Fatalf("event query behind a blocked host function: %v", err)
	}
	close(release)
	ok(t, "event sync", c.EventSynchronize(b))
	ms, err := c.EventElapsed(a, b)
	ok(t, "elapsed", err)
	if ms < 0 {
		t.Fatalf("elapsed %v ms", ms)
	}
	s2, err := c.StreamCreate(1, 0)
	ok(t, "stream", err)
	defer c.StreamDestroy(s2)
	ok(t, "wait event", c.StreamWaitEvent(s2, b, 0))
	ok(t, "sync", c.StreamSynchronize(s2))
	ok(t, "query", c.StreamQuery(s2))
}

// TestGPUThreads: calls from many goroutines (each possibly on a fresh OS
// thread) find the context current.
func TestGPUThreads(t *testing.T) {
	c := gpu(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := c.MemAlloc(4096)
			if err == nil {
				err = c.MemFree(p)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		ok(t, "alloc from a goroutine", err)
	}
}

// The host's NVML finds the GPU by its CUDA UUID and reads it: on a data
// centre GPU at least utilization, temperature, power and the SM clock.
func TestGPUMonitor(t *testing.T) {
	c := gpu(t)
	m, err := c.Monitor()
	ok(t, "Monitor", err)
	t.Logf("driver %q, monitor %+v", gpuDrv.Release(), m)
	if gpuDrv.Release() == "" {
		t.Error("Release is empty: the host NVML was not loaded")
	}
	want := device.HasUtilization | device.HasTemperature | device.HasPower | device.HasClock<<device.ClockSM | device.HasMaxClock<<device.ClockSM
	if m.Has&want != want {
		t.Errorf("readings %#x, want at least %#x", m.Has, want)
	}
	if m.Has&device.HasUtilization != 0 && (m.GPUUtil > 100 || m.MemUtil > 100) {
		t.Errorf("utilization %d %% / %d %%", m.GPUUtil, m.MemUtil)
	}
}

// Clusters (sm_90), the module's kernels by name and the virtual-memory
// granularity, as NVIDIA's libraries ask them (issue 16).
func TestGPUClustersAndLibraryQueries(t *testing.T) {
	c := gpu(t)
	m, err := c.ModuleLoad([]byte(sessiontest.FillPTX))
	ok(t, "module load", err)
	defer c.ModuleUnload(m)
	names, err := c.ModuleFunctionNames(m)
	ok(t, "module function names", err)
	// FillPTX has two entries, fill and nop; the H200's driver lists both
	// (2026-11-27), in an order of its own.
	sort.Strings(names)
	if len(names) != 2 || names[0] != "fill" || names[1] != "nop" {
		t.Fatalf("kernels %q, want [fill nop]", names)
	}
	g, err := c.MemGetGranularity(device.AllocProp{Type: 1}, 0)
	ok(t, "granularity", err)
	if g == 0 || g&(g-1) != 0 {
		t.Fatalf("granularity %d", g)
	}
	p, err := c.Properties()
	ok(t, "properties", err)
	if p.Attrs[75] < 9 {
		t.Skipf("compute capability %d: no clusters", p.Attrs[75])
	}
	f, err := c.ModuleGetFunction(m, "fill")
	ok(t, "get function", err)
	const n = 1024
	cfg := device.LaunchConfig{Grid: [3]uint32{n / 128, 1, 1}, Block: [3]uint32{128, 1, 1}, Cluster: [3]uint32{2, 1, 1}, ClusterPolicy: 1}
	clusters, err := c.OccupancyMaxClusters(f, cfg)
	ok(t, "cluster occupancy", err)
	if clusters <= 0 {
		t.Fatalf("%d clusters of 2 fit", clusters)
	}
	out, err := c.MemAlloc(n * 4)
	ok(t, "alloc", err)
	defer c.MemFree(out)
	ok(t, "cluster launch", c.Launch(f, cfg, sessiontest.FillParams(uint64(out), n, 0.5, 3, 2)))
	ok(t, "sync", c.Synchronize())
	got := make([]byte, n*4)
	ok(t, "dtoh", c.MemcpyDtoH(got, out, 0, false))
	for i := 0; i < n; i++ {
		if v := math.Float32frombits(binary.LittleEndian.Uint32(got[i*4:])); v != float32(i)*0.5+5 {
			t.Fatalf("out[%d] = %v after a cluster launch, want %v", i, v, float32(i)*0.5+5)
		}
	}
	cfg.Grid[0] = 3 // not a multiple of the cluster
	if err := c.Launch(f, cfg, sessiontest.FillParams(uint64(out), 384, 0.5, 3, 2)); err == nil {
		if err = c.Synchronize(); err == nil {
			t.Fatal("a grid of 3 in clusters of 2 was accepted")
		}
	}
}
