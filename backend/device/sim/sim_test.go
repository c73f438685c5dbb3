package sim

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/device"
)

func newCtx(t *testing.T) *Context {
	t.Helper()
	d, err := New(Config{Devices: 1, MemBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	c, _ := d.Context(0)
	return c.(*Context)
}

func TestAllocatorReusesAddressesAndCounts(t *testing.T) {
	c := newCtx(t)
	a, err := c.MemAlloc(1000)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := c.MemAlloc(1000)
	if a != baseAddr || b != baseAddr+1024 {
		t.Fatalf("addresses %#x %#x", a, b)
	}
	if _, err := c.MemAlloc(1 << 20); device.ResultOf(err) != device.ErrOutOfMemory {
		t.Fatalf("over capacity: %v", err)
	}
	if err := c.MemFree(a); err != nil {
		t.Fatal(err)
	}
	if err := c.MemFree(a); device.ResultOf(err) != device.ErrInvalidValue {
		t.Fatalf("double free: %v", err)
	}
	a2, _ := c.MemAlloc(512)
	if a2 != a {
		t.Fatalf("freed range not reused: %#x", a2)
	}
	free, total, _ := c.MemGetInfo()
	if total != 1<<20 || free != total-1000-512 {
		t.Fatalf("mem info %d/%d", free, total)
	}
}

func TestDefaultStreamOrdersBlockingStreams(t *testing.T) {
	c := newCtx(t)
	s, _ := c.StreamCreate(0, 0) // blocking
	n, _ := c.StreamCreate(streamNonBlocking, 0)
	p, _ := c.MemAlloc(16)
	gate := make(chan struct{})
	if err := c.LaunchHostFunc(s, func() { <-gate }); err != nil {
		t.Fatal(err)
	}
	// The NULL stream waits for s; the non-blocking stream does not.
	if err := c.MemcpyHtoD(p, []byte("null"), 0, true); err != nil {
		t.Fatal(err)
	}
	if err := c.MemcpyHtoD(p+8, []byte("nonb"), n, false); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	c.MemcpyDtoH(got, p+8, n, false)
	if string(got) != "nonb" {
		t.Fatal("non-blocking stream waited for a blocking one")
	}
	if err := c.StreamQuery(0); device.ResultOf(err) != device.ErrNotReady {
		t.Fatalf("NULL stream should wait behind the blocked stream: %v", err)
	}
	close(gate)
	if err := c.StreamSynchronize(0); err != nil {
		t.Fatal(err)
	}
	c.MemcpyDtoH(got, p, n, false)
	if string(got) != "null" {
		t.Fatalf("NULL stream copy: %q", got)
	}
}

func TestEventsTimeAndWait(t *testing.T) {
	c := newCtx(t)
	s, _ := c.StreamCreate(0, 0)
	a, _ := c.EventCreate(0)
	b, _ := c.EventCreate(0)
	nt, _ := c.EventCreate(eventDisableTiming)
	if _, err := c.EventElapsed(a, b); device.ResultOf(err) != device.ErrInvalidHandle {
		t.Fatalf("elapsed of unrecorded events: %v", err)
	}
	gate, ran := make(chan struct{}), make(chan struct{})
	c.EventRecord(a, s)
	c.LaunchHostFunc(s, func() { close(ran); <-gate })
	c.EventRecord(b, s)
	c.EventRecord(nt, s)
	s2, _ := c.StreamCreate(streamNonBlocking, 0)
	c.StreamWaitEvent(s2, b, 0)
	if err := c.StreamQuery(s2); device.ResultOf(err) != device.ErrNotReady {
		t.Fatalf("stream waiting on a pending event: %v", err)
	}
	<-ran // event a has its timestamp
	start := time.Now()
	for time.Since(start) < time.Millisecond { // let measurable time pass
	}
	close(gate)
	c.EventSynchronize(b)
	ms, err := c.EventElapsed(a, b)
	if err != nil || ms < 1 {
		t.Fatalf("elapsed %v ms, %v", ms, err)
	}
	if _, err := c.EventElapsed(a, nt); device.ResultOf(err) != device.ErrInvalidHandle {
		t.Fatalf("elapsed with a no-timing event: %v", err)
	}
	if err := c.StreamSynchronize(s2); err != nil {
		t.Fatal(err)
	}
}

func TestRealModuleLaunchValidation(t *testing.T) {
	c := newCtx(t)
	img, err := os.ReadFile("../image/testdata/kc.fatbin")
	if err != nil {
		t.Fatal(err)
	}
	m, err := c.ModuleLoad(img)
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.ModuleGetFunction(m, "withstruct")
	if err != nil {
		t.Fatal(err)
	}
	ps, _ := c.FuncParams(f)
	if device.ParamBytes(ps) != 48 {
		t.Fatalf("withstruct layout %v", ps)
	}
	cfg := device.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}}
	if err := c.Launch(f, cfg, make([]byte, 48)); err != nil {
		t.Fatal(err)
	}
	if err := c.Launch(f, cfg, make([]byte, 40)); device.ResultOf(err) != device.ErrInvalidValue {
		t.Fatalf("short parameter block: %v", err)
	}
	cfg.SharedMem = 100 << 10
	if err := c.Launch(f, cfg, make([]byte, 48)); device.ResultOf(err) != device.ErrInvalidValue {
		t.Fatalf("too much dynamic shared memory: %v", err)
	}
	c.Synchronize()
	if st := c.Stats(); st.Launches != 1 || st.LaunchesSkipped != 1 {
		t.Fatalf("stats %+v", st)
	}
	// The initialised global holds the image's bytes.
	p, size, err := c.ModuleGetGlobal(m, "table")
	if err != nil || size != 400 {
		t.Fatal(err, size)
	}
	got := make([]byte, 8)
	c.MemcpyDtoH(got, p, 0, false)
	if !bytes.Equal(got, []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0x40}) {
		t.Fatalf("global initialiser: % x", got)
	}
	if err := c.ModuleUnload(m); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Allocations != 0 {
		t.Fatalf("globals not freed with their module: %+v", st)
	}
	if _, err := c.ModuleLoad([]byte("not an image")); device.ResultOf(err) != device.ErrInvalidImage {
		t.Fatalf("garbage image: %v", err)
	}
}

// TestModuleLoadNoBinaryForGPU: an image with no code the simulated H100
// (9.0) can run is refused at load with CUDA_ERROR_NO_BINARY_FOR_GPU, as
// the driver refuses it; PTX of an older virtual architecture loads (JIT).
func TestModuleLoadNoBinaryForGPU(t *testing.T) {
	c := newCtx(t)
	for file, want := range map[string]device.Result{"k86.fatbin": device.ErrNoBinaryForGPU, "k52ptx.fatbin": device.Success} {
		img, err := os.ReadFile("../image/testdata/" + file)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.ModuleLoad(img)
		if got := device.ResultOf(err); got != want {
			t.Errorf("%s: %v, want %v", file, err, want)
		}
	}
}

func TestMemset2DAndPatterns(t *testing.T) {
	c := newCtx(t)
	p, _ := c.MemAlloc(64)
	if err := c.Memset(p, 0xa1b2c3d4, 4, 3, 2, 32, 0, false); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 64)
	c.MemcpyDtoH(got, p, 0, false)
	want := []byte{0xd4, 0xc3, 0xb2, 0xa1}
	if !bytes.Equal(got[8:12], want) || !bytes.Equal(got[40:44], want) || got[12] != 0 || got[44] != 0 {
		t.Fatalf("2D memset: % x", got)
	}
	if err := c.Memset(p, 0, 4, 8, 3, 32, 0, false); device.ResultOf(err) != device.ErrInvalidValue {
		t.Fatalf("2D memset past the allocation: %v", err)
	}
}

// A stream holds a bounded amount of work not yet started: an enqueue
// beyond it waits for the stream to run some (as the driver's launch
// waits on a full push buffer), then goes on.
func TestStreamQueueIsBounded(t *testing.T) {
	old := maxQueued
	maxQueued = 4
	t.Cleanup(func() { maxQueued = old })
	c := newCtx(t)
	s, _ := c.StreamCreate(streamNonBlocking, 0)
	gate := make(chan struct{})
	if err := c.LaunchHostFunc(s, func() { <-gate }); err != nil {
		t.Fatal(err)
	}
	ran := 0
	queued := make(chan int, 16)
	go func() {
		for i := 0; i < 10; i++ {
			if err := c.LaunchHostFunc(s, func() { ran++ }); err != nil {
				t.Error(err)
			}
			queued <- i
		}
		close(queued)
	}()
	// The first host function holds the stream once it starts: four more
	// fit behind it, and the fifth waits.
	n := 0
	for ; n < 4; n++ {
		select {
		case <-queued:
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d items queued behind a held stream with room for 4", n)
		}
	}
	select {
	case <-queued:
		t.Fatal("a fifth item queued behind a held stream with room for 4")
	case <-time.After(100 * time.Millisecond):
	}
	close(gate)
	for range queued {
		n++
	}
	if err := c.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	if n != 10 || ran != 10 {
		t.Fatalf("queued %d, ran %d of 10 after the stream went on", n, ran)
	}
}
