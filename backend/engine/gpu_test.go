//go:build gpu

package engine

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/device/cuda"
	"github.com/vgpu-project/vgpu/backend/guestmem"
)

// TestGPUGatherVariants measures the gather/scatter engine alone on 256 MiB
// of scattered 4 KiB guest pages, of contiguous 4 KiB pages given one
// descriptor each (what a page costs, apart from where it is) and of 2 MiB
// runs, against native pinned copies in the same run, twice. It checks the
// bytes of every layout in both directions, and of pieces aligned to 8, 4
// and 1 bytes (the kernel's narrower paths), and writes a table to
// bench/results (VGPU_BENCH_OUT overrides).
func TestGPUGatherVariants(t *testing.T) {
	const total = 256 << 20
	const page = 4096
	const pages = total / page
	drv, err := cuda.Open(nil)
	if err != nil {
		t.Fatalf("no GPU for a gpu-tagged test: %v", err)
	}
	c, err := drv.Context(0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Properties()
	if err != nil {
		t.Fatal(err)
	}
	mmap := func(n int) []byte {
		b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(b) })
		return b
	}

	// Native pinned baseline.
	host := mmap(total)
	if _, err := c.HostRegister(host, false); err != nil {
		t.Fatal(err)
	}
	defer c.HostUnregister(host)
	dev, err := c.MemAlloc(total)
	if err != nil {
		t.Fatal(err)
	}
	defer c.MemFree(dev)
	best := func(fn func() time.Duration) (float64, float64) { // best and median GB/s of 7 times fn reports
		var ts []float64
		for i := 0; i < 7; i++ {
			ts = append(ts, fn().Seconds())
		}
		sort.Float64s(ts)
		return total / ts[0] / 1e9, total / ts[len(ts)/2] / 1e9
	}
	wall := func(fn func()) func() time.Duration {
		return func() time.Duration {
			s := time.Now()
			fn()
			return time.Since(s)
		}
	}
	nativeH2D, _ := best(wall(func() { c.MemcpyHtoD(dev, host, 0, false) }))
	nativeD2H, _ := best(wall(func() { c.MemcpyDtoH(host, dev, 0, false) }))

	// Guest RAM: 512 MiB; scattered = a permutation of every other page.
	ram := mmap(2 * total)
	for i := range ram {
		ram[i] = byte(i>>12) ^ byte(i)
	}
	r := &guestmem.Region{GuestPhys: 1 << 32, Size: 2 * total, FD: -1, Host: ram}
	var scattered, contig4k, runs Pieces
	for i := 0; i < pages; i++ {
		off := uint64((i*7919)%(2*pages)) * page
		scattered = append(scattered, Piece{Host: ram[off : off+page : off+page], Region: r, Off: off})
	}
	for i := 0; i < pages; i++ { // Dev set, no Region: pieces never merge, no lookups
		off := uint64(i) * page
		contig4k = append(contig4k, Piece{Host: ram[off : off+page : off+page], Off: off})
	}
	for i := 0; i < total/(2<<20); i++ {
		off := uint64(i*2) * (2 << 20)
		runs = append(runs, Piece{Host: ram[off : off+(2<<20) : off+(2<<20)], Region: r, Off: off})
	}
	reg := NewRegistry()
	defer reg.Close()
	e := New(Gather, reg)
	ramDev, err := reg.Ensure(c, r, 0, uint64(len(ram)))
	if err != nil {
		t.Fatal(err)
	}
	for i := range contig4k {
		contig4k[i].Dev = ramDev + device.Ptr(contig4k[i].Off)
	}

	check := func(ps Pieces, what string) {
		got := make([]byte, page)
		for _, k := range []int{0, len(ps) / 3, len(ps) - 1} {
			at := uint64(0)
			for _, p := range ps[:k] {
				at += uint64(len(p.Host))
			}
			if err := c.MemcpyDtoH(got, dev+device.Ptr(at), 0, false); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, ps[k].Host[:page]) {
				t.Fatalf("%s: device bytes of piece %d differ from guest RAM", what, k)
			}
		}
	}

	checkDtoH := func(ps Pieces, what string) { // after a DtoH from dev filled with 0x5a
		for _, k := range []int{0, len(ps) / 3, len(ps) - 1} {
			if !bytes.Equal(ps[k].Host, bytes.Repeat([]byte{0x5a}, len(ps[k].Host))) {
				t.Fatalf("%s: guest bytes of piece %d differ from device memory", what, k)
			}
		}
	}

	// The kernel's narrower paths (pieces aligned to 8, 4 and 1 bytes), a
	// last group of fewer than four descriptors, and a list longer than one
	// launch (70,001 pieces of 1 KiB: two launches).
	for _, tc := range []struct {
		what          string
		count         int
		at, n, stride uint64
	}{
		{"1,023 pieces aligned to 8", 1023, 8, page - 8, page},
		{"1,023 pieces aligned to 4", 1023, 4, page - 4, page},
		{"1,023 pieces aligned to 1, odd lengths", 1023, 1, page - 3, page},
		{"70,001 pieces of 1 KiB", 70001, 0, 1024, 2048},
	} {
		var ps Pieces
		for i := 0; i < tc.count; i++ {
			off := uint64(i*7919%(2*total/int(tc.stride)))*tc.stride + tc.at
			ps = append(ps, Piece{Host: ram[off : off+tc.n : off+tc.n], Region: r, Off: off})
		}
		what := tc.what
		if err := c.Memset(dev, 0, 1, total, 1, total, 0, false); err != nil {
			t.Fatal(err)
		}
		var sum uint64
		for _, p := range ps {
			sum += uint64(len(p.Host))
		}
		if _, err := e.Copy(c, HtoD, dev, sum, ps, 0); err != nil {
			t.Fatal(err)
		}
		if err := c.StreamSynchronize(0); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, sum)
		if err := c.MemcpyDtoH(got, dev, 0, false); err != nil {
			t.Fatal(err)
		}
		if i := differingPiece(got, ps); i >= 0 {
			t.Fatalf("%s, HtoD: piece %d differs", what, i)
		}
		for i := range got {
			got[i] = ^got[i]
		}
		if err := c.MemcpyHtoD(dev, got, 0, false); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Copy(c, DtoH, dev, sum, ps, 0); err != nil {
			t.Fatal(err)
		}
		if err := c.StreamSynchronize(0); err != nil {
			t.Fatal(err)
		}
		if i := differingPiece(got, ps); i >= 0 {
			t.Fatalf("%s, DtoH: piece %d differs", what, i)
		}
	}

	var sb strings.Builder
	fmt.Fprintf(&sb, "# Gather/scatter engine (engine alone)\n\n")
	fmt.Fprintf(&sb, "Measured %s on %s (CUDA %d) by `TestGPUGatherVariants` (backend/engine/gpu_test.go).\n", time.Now().UTC().Format(time.RFC3339), p.Name, drv.Version())
	fmt.Fprintf(&sb, "256 MiB per copy from/to 512 MiB of guest RAM (registered once); best and median of 7; enqueue = time until Copy returned (CPU translating and publishing descriptors).\n\n")
	fmt.Fprintf(&sb, "Native pinned (cuMemcpy, registered 256 MiB buffer): HtoD %.1f GB/s, DtoH %.1f GB/s.\n\n", nativeH2D, nativeD2H)
	fmt.Fprintf(&sb, "| round | layout | dir | best GB/s | median GB/s | enqueue ms | best %% of native |\n|---|---|---|---:|---:|---:|---:|\n")
	defer func(n int) { publishEvery = n }(publishEvery)
	for _, round := range []string{"first", "again", "GPU alone"} {
		// GPU alone: descriptors published only at the end, and the time
		// counted from there (CPU translation not overlapped, not counted).
		gpuAlone := round == "GPU alone"
		if gpuAlone {
			publishEvery = slotDescs
		}
		for _, lay := range []struct {
			name string
			ps   Pieces
		}{{"4 KiB scattered", scattered}, {"4 KiB contiguous, one descriptor each", contig4k}, {"2 MiB runs", runs}} {
			for _, dir := range []Dir{HtoD, DtoH} {
				var enq time.Duration
				run := func() time.Duration { // the time counted: all of it, or after enqueue when the GPU is alone
					s := time.Now()
					if _, err := e.Copy(c, dir, dev, total, lay.ps, 0); err != nil {
						t.Fatal(err)
					}
					enq = time.Since(s)
					if err := c.StreamSynchronize(0); err != nil {
						t.Fatal(err)
					}
					if gpuAlone {
						return time.Since(s) - enq
					}
					return time.Since(s)
				}
				what := round + "/" + lay.name
				if dir == HtoD {
					if err := c.Memset(dev, 0, 1, total, 1, total, 0, false); err != nil {
						t.Fatal(err)
					}
					run()
					check(lay.ps, what)
				} else {
					if err := c.Memset(dev, 0x5a, 1, total, 1, total, 0, false); err != nil {
						t.Fatal(err)
					}
					run()
					checkDtoH(lay.ps, what)
				}
				b, m := best(run)
				native, d := nativeH2D, "HtoD"
				if dir == DtoH {
					native, d = nativeD2H, "DtoH"
				}
				fmt.Fprintf(&sb, "| %s | %s | %s | %.1f | %.1f | %.2f | %.0f%% |\n", round, lay.name, d, b, m, enq.Seconds()*1e3, 100*b/native)
			}
		}
	}
	t.Log("\n" + sb.String())
	out := os.Getenv("VGPU_BENCH_OUT")
	if out == "" {
		d, _ := os.Getwd()
		out = filepath.Join(d, "..", "..", "bench", "results")
	}
	if err := os.MkdirAll(out, 0o755); err == nil {
		name := filepath.Join(out, "engine-gather-variants-"+time.Now().UTC().Format("20060102-150405")+".md")
		if err := os.WriteFile(name, []byte(sb.String()), 0o644); err == nil {
			t.Logf("wrote %s", name)
		}
	}
}
