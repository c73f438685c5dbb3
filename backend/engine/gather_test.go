package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/guestmem"
)

// kernelCPU is a device context for testing the gather engine without a
// GPU: it "executes" the gather kernel on the CPU, reading the descriptors
// and the published count the engine wrote, so tests check descriptor
// building (runs merged, launch sizes, chunk limits) byte for byte. It
// runs a launch at the next event or synchronization, as a stream would,
// and records a violation of the engine's rule if the engine calls it
// while a launch is open (its count not final): on a GPU that kernel could
// be what the call waits for. Host memory registered with it keeps its own
// address as device address (as with CUDA's unified addressing); device
// memory is dev at devBase, and the engine's own allocations follow it.
// Only the methods the gather engine uses are implemented.
type kernelCPU struct {
	device.Context // nil: any other method panics
	dev            []byte
	aux            []byte   // the engine's device allocations (mirrors)
	host           [][]byte // registered host memory
	pending        []launch // launched, not yet run
	launches       []int    // descriptors per launch, as run
	execute        bool     // copy the bytes (false: benchmarks of the CPU side)
	violations     []string // calls made while a launch was open
}

type launch struct {
	descs, published device.Ptr
	grid             uint32
}

const devBase = 1 << 48

// opened returns the first launch whose count is not final, if any.
func (k *kernelCPU) opened() (launch, bool) {
	for _, l := range k.pending {
		if binary.LittleEndian.Uint64(k.mem(l.published, 8))&finalMark == 0 {
			return l, true
		}
	}
	return launch{}, false
}

// call checks the engine's rule on entry to a driver call.
func (k *kernelCPU) call(name string) {
	if l, ok := k.opened(); ok {
		k.violations = append(k.violations, fmt.Sprintf("%s while the launch of slot %#x is open", name, l.descs))
	}
}

// run executes the pending launches, in order.
func (k *kernelCPU) run() {
	le := binary.LittleEndian
	for _, l := range k.pending {
		n := int(le.Uint64(k.mem(l.published, 8)) &^ finalMark)
		k.launches = append(k.launches, n)
		if !k.execute {
			continue
		}
		d := k.mem(l.descs, uint64(n)*descSize)
		for i := 0; i < n; i++ {
			dst, src, l := le.Uint64(d[i*descSize:]), le.Uint64(d[i*descSize+8:]), le.Uint64(d[i*descSize+16:])
			copy(k.mem(device.Ptr(dst), l), k.mem(device.Ptr(src), l))
		}
	}
	k.pending = k.pending[:0]
}

func (k *kernelCPU) ExecutesKernels() bool { return true }
func (k *kernelCPU) ModuleLoad([]byte) (device.Module, error) {
	return 1, nil
}
func (k *kernelCPU) ModuleGetFunction(device.Module, string) (device.Function, error) {
	return 1, nil
}
func (k *kernelCPU) Properties() (*device.Properties, error) {
	p := &device.Properties{}
	p.Attrs[attrMultiprocessors] = 4
	return p, nil
}
func (k *kernelCPU) HostRegister(b []byte, _ bool) (device.Ptr, error) {
	k.call("HostRegister")
	k.host = append(k.host, b)
	return device.Ptr(uintptr(unsafe.Pointer(&b[0]))), nil
}
func (k *kernelCPU) HostUnregister([]byte) error { k.call("HostUnregister"); return nil }
func (k *kernelCPU) MemAlloc(n uint64) (device.Ptr, error) {
	k.call("MemAlloc")
	p := devBase + device.Ptr(len(k.dev)+len(k.aux))
	k.aux = append(k.aux, make([]byte, n)...)
	return p, nil
}
func (k *kernelCPU) Memset(dst device.Ptr, v uint32, size int, w, h, pitch uint64, _ device.Stream, _ bool) error {
	k.call("Memset")
	if v != 0 || size != 4 || h != 1 {
		panic("kernelCPU: only zeroing 32-bit words")
	}
	clear(k.mem(dst, w*4))
	return nil
}
func (k *kernelCPU) EventCreate(uint32) (device.Event, error) { return 1, nil }
func (k *kernelCPU) EventRecord(device.Event, device.Stream) error {
	k.call("EventRecord")
	k.run()
	return nil
}
func (k *kernelCPU) EventSynchronize(device.Event) error {
	k.call("EventSynchronize")
	k.run()
	return nil
}
func (k *kernelCPU) StreamSynchronize(device.Stream) error {
	k.call("StreamSynchronize")
	k.run()
	return nil
}

// mem returns n bytes at device address p: device memory, the engine's
// allocations or registered host memory.
func (k *kernelCPU) mem(p device.Ptr, n uint64) []byte {
	if p >= devBase && uint64(p-devBase)+n <= uint64(len(k.dev)) {
		o := uint64(p - devBase)
		return k.dev[o : o+n]
	}
	if a := devBase + device.Ptr(len(k.dev)); p >= a && uint64(p-a)+n <= uint64(len(k.aux)) {
		o := uint64(p - a)
		return k.aux[o : o+n]
	}
	for _, h := range k.host {
		base := device.Ptr(uintptr(unsafe.Pointer(&h[0])))
		if p >= base && uint64(p-base)+n <= uint64(len(h)) {
			o := uint64(p - base)
			return h[o : o+n]
		}
	}
	panic(fmt.Sprintf("kernelCPU: %#x+%d is neither device memory nor registered host memory", p, n))
}

func (k *kernelCPU) Launch(_ device.Function, cfg device.LaunchConfig, params []byte) error {
	k.call("Launch")
	le := binary.LittleEndian
	if len(params) != 24 || cfg.Block[0] != gatherThreads || cfg.Grid[0] == 0 || cfg.Grid[0] > 4 {
		panic(fmt.Sprintf("kernelCPU: launch %+v with %d parameter bytes", cfg, len(params)))
	}
	k.pending = append(k.pending, launch{descs: device.Ptr(le.Uint64(params)), published: device.Ptr(le.Uint64(params[8:])), grid: cfg.Grid[0]})
	return nil
}

// check fails t on violations of the engine's rule and on a launch left
// open.
func (k *kernelCPU) check(t testing.TB) {
	t.Helper()
	for _, v := range k.violations {
		t.Errorf("driver called with a launch open: %s", v)
	}
	if l, ok := k.opened(); ok {
		t.Errorf("the launch of slot %#x was left open: its kernel would never end", l.descs)
	}
}

// differingPiece returns the index of the first piece of ps whose bytes
// differ from its place in buf (the pieces side by side), or -1.
func differingPiece(buf []byte, ps Pieces) int {
	at := 0
	for i, p := range ps {
		if !bytes.Equal(buf[at:at+len(p.Host)], p.Host) {
			return i
		}
		at += len(p.Host)
	}
	return -1
}

// smallSlots makes launches take n descriptors for the rest of the test.
func smallSlots(t testing.TB, n int) {
	old := slotDescs
	slotDescs = n
	t.Cleanup(func() { slotDescs = old })
}

// scatteredRAM returns a guest RAM region of 2*pages pages and a permutation
// of every other page of it, with some neighbours left adjacent so that
// runs get merged.
func scatteredRAM(t testing.TB, pages int) (*guestmem.Region, Pieces) {
	const page = 4096
	ram, err := unix.Mmap(-1, 0, 2*pages*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(ram) })
	for i := range ram {
		ram[i] = byte(i>>12) ^ byte(i)
	}
	r := &guestmem.Region{Size: uint64(len(ram)), FD: -1, Host: ram}
	var ps Pieces
	for i := 0; i < pages; i++ {
		pg := (i * 7919) % (2 * pages)
		if i%5 == 1 { // continue the previous piece: merged into one run
			pg = int(ps[len(ps)-1].Off/page) + 1
		}
		off := uint64(pg) * page
		ps = append(ps, Piece{Host: ram[off : off+page : off+page], Region: r, Off: off})
	}
	return r, ps
}

// TestGatherDescriptors runs the gather engine against kernelCPU in both
// directions: every byte lands where the piece list says, across launches
// and reused slots, and no driver call happens while a launch is open.
func TestGatherDescriptors(t *testing.T) {
	smallSlots(t, 1000)
	const pages = 3000 // 2,400 runs: three launches, the first slot reused
	_, ps := scatteredRAM(t, pages)
	k := &kernelCPU{dev: make([]byte, pages*4096), execute: true}
	e := New(Gather, NewRegistry())
	if _, err := e.Copy(k, HtoD, devBase, uint64(len(k.dev)), ps, 0); err != nil {
		t.Fatal(err)
	}
	k.run()
	if i := differingPiece(k.dev, ps); i >= 0 {
		t.Fatalf("HtoD: piece %d differs", i)
	}
	if want := []int{1000, 1000, 400}; fmt.Sprint(k.launches) != fmt.Sprint(want) {
		t.Errorf("launches of %v descriptors, want %v", k.launches, want)
	}
	for i := range k.dev {
		k.dev[i] = ^k.dev[i]
	}
	if _, err := e.Copy(k, DtoH, devBase, uint64(len(k.dev)), ps, 0); err != nil {
		t.Fatal(err)
	}
	k.run()
	if i := differingPiece(k.dev, ps); i >= 0 {
		t.Fatalf("DtoH: piece %d differs", i)
	}
	k.check(t)
}

// failingSource yields the pieces of ps and fails at piece at.
type failingSource struct {
	ps Pieces
	at int
}

var errPiece = errors.New("piece refused")

func (f failingSource) Count() int { return len(f.ps) }
func (f failingSource) Piece(i int) (Piece, error) {
	if i == f.at {
		return Piece{}, errPiece
	}
	return f.ps[i], nil
}

// TestGatherClosesLaunches: the launch is closed, with what was published,
// when a piece fails mid-list, and before a chunk that is not registered
// yet is registered (a driver call).
func TestGatherClosesLaunches(t *testing.T) {
	smallSlots(t, 1000)
	_, ps := scatteredRAM(t, 600)
	k := &kernelCPU{dev: make([]byte, 600*4096), execute: true}
	e := New(Gather, NewRegistry())
	if _, err := e.Copy(k, HtoD, devBase, uint64(len(k.dev)), failingSource{ps, 300}, 0); !errors.Is(err, errPiece) {
		t.Fatalf("Copy with a failing piece: %v, want %v", err, errPiece)
	}
	k.run()
	if len(k.launches) != 1 || k.launches[0] == 0 || k.launches[0] > 300 {
		t.Errorf("launches %v, want one of the runs before piece 300", k.launches)
	}
	k.check(t)

	// A second region, registered on its first piece in the middle of the
	// list: the launch closes first, a new one takes the rest.
	_, ps2 := scatteredRAM(t, 100)
	mixed := append(append(append(Pieces{}, ps[:200]...), ps2...), ps[200:300]...)
	k2 := &kernelCPU{execute: true}
	for _, p := range mixed {
		k2.dev = append(k2.dev, make([]byte, len(p.Host))...)
	}
	e2 := New(Gather, NewRegistry())
	if _, err := e2.Copy(k2, HtoD, devBase, uint64(len(k2.dev)), mixed, 0); err != nil {
		t.Fatal(err)
	}
	k2.run()
	if i := differingPiece(k2.dev, mixed); i >= 0 {
		t.Fatalf("piece %d differs", i)
	}
	if len(k2.launches) != 2 {
		t.Errorf("launches %v, want two: the second region's registration closes the first", k2.launches)
	}
	k2.check(t)
}

// BenchmarkGatherCPU measures the CPU side of the gather engine (turning
// pieces into descriptors and launching) per 4 KiB page: on the GPU it
// overlaps the transfer, which it must outrun (about 75 ns per page at
// 55 GB/s).
func BenchmarkGatherCPU(b *testing.B) {
	const pages = 65536
	_, ps := scatteredRAM(b, pages)
	for i := range ps { // no merging: one descriptor per page
		if i%5 == 1 {
			ps[i] = ps[i-1]
		}
	}
	k := &kernelCPU{dev: make([]byte, 0)}
	e := New(Gather, NewRegistry())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := e.Copy(k, HtoD, devBase, pages*4096, ps, 0); err != nil {
			b.Fatal(err)
		}
		k.run()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*pages), "ns/page")
}

// TestCopyPTX assembles the copy kernel with ptxas (nvcc 11.8 in CI;
// skipped where there is none) for the oldest and the newest architecture
// the kernel supports (the oldest only where that ptxas still knows it).
func TestCopyPTX(t *testing.T) {
	ptxas, err := exec.LookPath("ptxas")
	if err != nil {
		t.Skip("no ptxas on PATH (scripts/setup.sh installs nvidia-cuda-toolkit)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "copy.ptx")
	if err := os.WriteFile(src, []byte(copyPTX), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, arch := range []string{"sm_70", "sm_90"} {
		out, err := exec.Command(ptxas, "-arch", arch, "-o", filepath.Join(dir, "copy.cubin"), src).CombinedOutput()
		if err != nil && bytes.Contains(out, []byte("is not defined for option 'gpu-name'")) {
			t.Logf("this ptxas does not know %s (CUDA 13 dropped Volta): not checked", arch)
			continue
		}
		if err != nil {
			t.Errorf("ptxas -arch %s: %v\n%s", arch, err, out)
		}
	}
}

// TestCopyPTXCurrent regenerates copy.ptx from copy.cu with
// scripts/gen-copy-ptx.sh, when the nvcc on PATH is the one that made it
// (its version is in the file's header), and fails if they differ: run the
// script after changing copy.cu.
func TestCopyPTXCurrent(t *testing.T) {
	nvcc, err := exec.LookPath("nvcc")
	if err != nil {
		t.Skip("no nvcc on PATH (scripts/setup.sh installs nvidia-cuda-toolkit)")
	}
	ver, err := exec.Command(nvcc, "--version").Output()
	if err != nil {
		t.Fatalf("nvcc --version: %v", err)
	}
	var release string
	for _, line := range strings.Split(string(ver), "\n") {
		if strings.HasPrefix(line, "Cuda compilation tools, release ") {
			release = line
		}
	}
	if release == "" || !strings.Contains(copyPTX, "// "+release+"\n") {
		t.Skipf("copy.ptx was not made by this nvcc (%q): only TestCopyPTX checks it here", release)
	}
	// Read here too, not only by nvcc, so that go test's cache sees the file.
	if _, err := os.ReadFile("copy.cu"); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "copy.ptx")
	if b, err := exec.Command("../../scripts/gen-copy-ptx.sh", out).CombinedOutput(); err != nil {
		t.Fatalf("scripts/gen-copy-ptx.sh: %v\n%s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != copyPTX {
		t.Errorf("copy.ptx is stale: run scripts/gen-copy-ptx.sh")
	}
}
