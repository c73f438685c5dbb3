package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/guestmem"
)

// kernelCPU is a device context for testing the gather engine without a
// GPU: it "executes" the gather kernel on the CPU, reading the descriptors
// the engine wrote, so tests check descriptor building (runs merged, batch
// sizes, chunk limits) byte for byte. Host memory registered with it keeps
// its own address as device address (as with CUDA's unified addressing);
// device memory is one buffer at devBase. Only the methods the gather
// engine uses are implemented.
type kernelCPU struct {
	device.Context // nil: any other method panics
	dev            []byte
	host           [][]byte // registered host memory
	launches       []int    // descriptors per launch
	execute        bool     // copy the bytes (false: benchmarks of the CPU side)
}

const devBase = 1 << 48

func (k *kernelCPU) ExecutesKernels() bool { return true }
func (k *kernelCPU) ModuleLoad([]byte) (device.Module, error) {
	return 1, nil
}
func (k *kernelCPU) ModuleGetFunction(device.Module, string) (device.Function, error) {
	return 1, nil
}
func (k *kernelCPU) HostRegister(b []byte, _ bool) (device.Ptr, error) {
	k.host = append(k.host, b)
	return device.Ptr(uintptr(unsafe.Pointer(&b[0]))), nil
}
func (k *kernelCPU) HostUnregister([]byte) error { return nil }
func (k *kernelCPU) MemAlloc(n uint64) (device.Ptr, error) {
	return devBase + device.Ptr(len(k.dev)), nil // the engine's own small buffers, never read
}
func (k *kernelCPU) EventCreate(uint32) (device.Event, error)      { return 1, nil }
func (k *kernelCPU) EventRecord(device.Event, device.Stream) error { return nil }
func (k *kernelCPU) EventSynchronize(device.Event) error           { return nil }
func (k *kernelCPU) StreamSynchronize(device.Stream) error         { return nil }

// mem returns n bytes at device address p: device memory or registered host
// memory.
func (k *kernelCPU) mem(p device.Ptr, n uint64) []byte {
	if p >= devBase && uint64(p-devBase)+n <= uint64(len(k.dev)) {
		o := uint64(p - devBase)
		return k.dev[o : o+n]
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
	le := binary.LittleEndian
	descs, n := device.Ptr(le.Uint64(params)), int(le.Uint32(params[8:]))
	k.launches = append(k.launches, n)
	if !k.execute {
		return nil
	}
	d := k.mem(descs, uint64(n)*descSize)
	for i := 0; i < n; i++ {
		dst, src, l := le.Uint64(d[i*descSize:]), le.Uint64(d[i*descSize+8:]), le.Uint64(d[i*descSize+16:])
		copy(k.mem(device.Ptr(dst), l), k.mem(device.Ptr(src), l))
	}
	return nil
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
// directions: every byte lands where the piece list says, across batch
// boundaries and the ramp.
func TestGatherDescriptors(t *testing.T) {
	const pages = slotDescs + 123 // 6 launches: the ramp, and slots reused
	_, ps := scatteredRAM(t, pages)
	k := &kernelCPU{dev: make([]byte, pages*4096), execute: true}
	e := New(Gather, NewRegistry())
	if _, err := e.Copy(k, HtoD, devBase, uint64(len(k.dev)), ps, 0); err != nil {
		t.Fatal(err)
	}
	at := 0
	for i, p := range ps {
		if !bytes.Equal(k.dev[at:at+len(p.Host)], p.Host) {
			t.Fatalf("HtoD: piece %d differs", i)
		}
		at += len(p.Host)
	}
	if k.launches[0] != firstBatch {
		t.Errorf("first launch has %d descriptors, want the ramp's %d", k.launches[0], firstBatch)
	}
	for i := range k.dev {
		k.dev[i] = ^k.dev[i]
	}
	if _, err := e.Copy(k, DtoH, devBase, uint64(len(k.dev)), ps, 0); err != nil {
		t.Fatal(err)
	}
	at = 0
	for i, p := range ps {
		if !bytes.Equal(k.dev[at:at+len(p.Host)], p.Host) {
			t.Fatalf("DtoH: piece %d differs", i)
		}
		at += len(p.Host)
	}
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
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*pages), "ns/page")
}

// TestCopyPTX assembles the copy kernel with ptxas (nvcc 11.8 in CI;
// skipped where there is none) for the oldest and the newest architecture
// the backend supports (the oldest only where that ptxas still knows it).
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
	for _, arch := range []string{"sm_52", "sm_90"} {
		out, err := exec.Command(ptxas, "-arch", arch, "-o", filepath.Join(dir, "copy.cubin"), src).CombinedOutput()
		if err != nil && bytes.Contains(out, []byte("is not defined for option 'gpu-name'")) {
			t.Logf("this ptxas does not know %s (CUDA 13 dropped Maxwell): not checked", arch)
			continue
		}
		if err != nil {
			t.Errorf("ptxas -arch %s: %v\n%s", arch, err, out)
		}
	}
}
