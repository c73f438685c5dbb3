package faulttest_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/backend/engine"
	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/backend/server"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/protocol"
)

// Guest RAM of the fake VMs: q35's layout in miniature. Low RAM below the
// VGA hole, RAM from 1 MiB up to lowEnd, then the PCI/MMIO hole up to 4 GiB,
// then high RAM. Every GPA outside these three regions must be refused.
const (
	vgaHole  = 0xa0000
	lowStart = 0x100000
	lowEnd   = 4 << 20 // the test's "below-4G RAM ends here"
	highBase = 4 << 30
	highSize = 4 << 20
	ioapic   = 0xfec00000 // an MMIO address inside the hole
)

func q35RAM(t *testing.T) *guestmem.Table {
	t.Helper()
	tab, err := sessiontest.GuestRAM(
		sessiontest.RegionSpec{GPA: 0, Size: vgaHole},
		sessiontest.RegionSpec{GPA: lowStart, Size: lowEnd - lowStart},
		sessiontest.RegionSpec{GPA: highBase, Size: highSize},
	)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// backend is one server (the unit a guest must not be able to hurt) on the
// sim device.
type backend struct {
	t   *testing.T
	drv *sim.Driver
	srv *server.Server
	ctx context.Context
	wg  sync.WaitGroup
}

const simMem = 1 << 30

func newBackend(t *testing.T, memLimit uint64) *backend {
	t.Helper()
	drv, err := sim.New(sim.Config{Devices: 1, MemBytes: simMem})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Driver: drv, Engine: engine.Auto, MemLimit: memLimit,
		Limits: protocol.Limits{MaxPayload: 1 << 20, MaxSegments: 4096}, Version: "faulttest"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &backend{t: t, drv: drv, srv: srv, ctx: ctx}
	t.Cleanup(func() {
		cancel()
		testwait.For(t, 10*time.Second, "every session ended", func() bool { return len(srv.Status().Sessions) == 0 })
		b.wg.Wait()
		drv.Close()
	})
	return b
}

// guest is one guest connection (a session) of a VM.
type guest struct {
	t    *testing.T
	c    *sessiontest.Client
	vm   string
	ram  *guestmem.Table // nil: host mode
	port uint32
	done chan error
	once sync.Once
}

// connect opens a session for vm from guest source port port; ram may be
// nil (host mode).
func (b *backend) connect(vm string, port uint32, ram *guestmem.Table) *guest {
	b.t.Helper()
	var src guestmem.Source
	if ram != nil {
		src = ram
	}
	bc, gc := sessiontest.Pipe(3, port, src)
	bc.Name = vm
	g := &guest{t: b.t, c: sessiontest.NewClient(gc), vm: vm, ram: ram, port: port, done: make(chan error, 1)}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		g.done <- b.srv.ServeConn(b.ctx, bc)
	}()
	return g
}

// close hangs up and waits for the backend to end the session.
func (g *guest) close() {
	g.t.Helper()
	g.once.Do(func() {
		g.c.Close()
		select {
		case <-g.done:
		case <-time.After(10 * time.Second):
			g.t.Errorf("vm %s: the session did not end after the guest hung up", g.vm)
		}
	})
}

func (g *guest) call(op protocol.Opcode, payload []byte, segs []protocol.Segment) protocol.Frame {
	g.t.Helper()
	f, err := g.c.Call(op, 0, payload, segs)
	if err != nil {
		g.t.Fatalf("vm %s %v: %v", g.vm, op, err)
	}
	return f
}

func mustOK(t *testing.T, what string, f protocol.Frame) protocol.Frame {
	t.Helper()
	if f.Status != 0 {
		t.Fatalf("%s: status %v", what, device.Result(f.Status))
	}
	return f
}

func (g *guest) alloc(n uint64) uint64 {
	g.t.Helper()
	f := mustOK(g.t, "alloc", g.call(protocol.OpMemAlloc, protocol.Bytes(&protocol.MemAllocReq{Size: n}), nil))
	return binary.LittleEndian.Uint64(f.Payload)
}

func (g *guest) handle(op protocol.Opcode, payload []byte) uint64 {
	g.t.Helper()
	f := mustOK(g.t, op.String(), g.call(op, payload, nil))
	return binary.LittleEndian.Uint64(f.Payload)
}

func (g *guest) stream() uint64 {
	return g.handle(protocol.OpStreamCreate, protocol.Bytes(&protocol.StreamCreateReq{}))
}
func (g *guest) event() uint64 {
	return g.handle(protocol.OpEventCreate, protocol.Bytes(&protocol.EventCreateReq{}))
}

func (g *guest) htod(dst uint64, data []byte) int32 {
	r := protocol.MemcpyHtoDReq{Dst: dst, Src: protocol.BufRef{Kind: protocol.BufInline, Len: uint64(len(data))}}
	return g.call(protocol.OpMemcpyHtoD, append(protocol.Bytes(&r), data...), nil).Status
}

func (g *guest) dtoh(src, n uint64) []byte {
	g.t.Helper()
	r := protocol.MemcpyDtoHReq{Src: src, Dst: protocol.BufRef{Kind: protocol.BufInline, Len: n}}
	return mustOK(g.t, "dtoh", g.call(protocol.OpMemcpyDtoH, protocol.Bytes(&r), nil)).Payload
}

// pattern is deterministic test data.
func pattern(seed uint64, n int) []byte {
	b := make([]byte, n)
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

// roundTrip proves a session works: through guest RAM by GPA when it has
// some (H2D from segments, D2D, memset, D2H into segments), inline
// otherwise; every byte is compared.
func (g *guest) roundTrip(seed uint64) {
	g.t.Helper()
	const n = 3 * 4096
	want := pattern(seed, n)
	p, q := g.alloc(n), g.alloc(n)
	if g.ram != nil && g.port < 1024 {
		// Scatter the source over low and high RAM, the result back too.
		src := []protocol.Segment{{GPA: lowStart + 0x10000, Len: 4096}, {GPA: highBase + 0x3000, Len: 2 * 4096}}
		dst := []protocol.Segment{{GPA: highBase + 0x20000, Len: 8192}, {GPA: lowStart + 0x40000, Len: 4096}}
		off := 0
		for _, s := range src {
			b, err := g.ram.Slice(guestmem.GPA(s.GPA), s.Len)
			if err != nil {
				g.t.Fatal(err)
			}
			copy(b, want[off:])
			off += int(s.Len)
		}
		r := protocol.MemcpyHtoDReq{Dst: p, Src: protocol.BufRef{Kind: protocol.BufSegments, Len: n}}
		mustOK(g.t, "htod segs", g.call(protocol.OpMemcpyHtoD, protocol.Bytes(&r), src))
		mustOK(g.t, "dtod", g.call(protocol.OpMemcpyDtoD, protocol.Bytes(&protocol.MemcpyDtoDReq{Dst: q, Src: p, Size: n}), nil))
		mustOK(g.t, "memset", g.call(protocol.OpMemset, protocol.Bytes(&protocol.MemsetReq{Dst: q + 100, Count: 50, ElemSize: 1, Value: 0xa5}), nil))
		for i := 100; i < 150; i++ {
			want[i] = 0xa5
		}
		d := protocol.MemcpyDtoHReq{Src: q, Dst: protocol.BufRef{Kind: protocol.BufSegments, Len: n}}
		mustOK(g.t, "dtoh segs", g.call(protocol.OpMemcpyDtoH, protocol.Bytes(&d), dst))
		var got []byte
		for _, s := range dst {
			b, _ := g.ram.Slice(guestmem.GPA(s.GPA), s.Len)
			got = append(got, b...)
		}
		if !bytes.Equal(got, want) {
			g.t.Fatalf("vm %s: round trip through guest RAM corrupted", g.vm)
		}
	} else {
		if st := g.htod(p, want); st != 0 {
			g.t.Fatalf("htod: %v", device.Result(st))
		}
		if !bytes.Equal(g.dtoh(p, n), want) {
			g.t.Fatalf("vm %s: inline round trip corrupted", g.vm)
		}
	}
	for _, x := range []uint64{p, q} {
		mustOK(g.t, "free", g.call(protocol.OpMemFree, protocol.Bytes(&protocol.PtrReq{Ptr: x}), nil))
	}
}

// devMem is what the sim device has allocated for all sessions.
func (b *backend) devMem() (uint64, int) {
	s := b.srv.Status()
	if len(s.Devices) == 0 {
		return 0, 0
	}
	return s.Devices[0].MemUsedByVGPU, s.Devices[0].Allocations
}

// resources counts what this process (the backend) holds: open fds,
// mappings of guest RAM (memfds) and all memory mappings.
type resources struct{ fds, ramMaps, maps int }

func (r resources) String() string {
	return fmt.Sprintf("%d fds, %d guest-RAM mappings, %d mappings", r.fds, r.ramMaps, r.maps)
}

func countResources(t *testing.T) resources {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	m, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return resources{fds: len(ents), ramMaps: strings.Count(string(m), "/memfd:"), maps: strings.Count(string(m), "\n")}
}

// noLeaks waits until the process holds no more fds and guest-RAM mappings
// than before, and no more mappings than before plus mapSlack (the Go heap
// and thread stacks grow: those are anonymous mappings).
func noLeaks(t *testing.T, before resources, mapSlack int) {
	t.Helper()
	var now resources
	ok := func() bool {
		now = countResources(t)
		return now.fds <= before.fds && now.ramMaps <= before.ramMaps && now.maps <= before.maps+mapSlack
	}
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			m, _ := os.ReadFile("/proc/self/maps")
			t.Fatalf("leak: before %v, after %v\n%s", before, now, m)
		}
		runtime.GC()
		<-time.After(10 * time.Millisecond)
	}
	t.Logf("resources: before %v, after %v", before, now)
}

// soakKilledMidway is guest shell that starts a soak from bin, prints marker
// once the soak moves data (the test then kills something on the host),
// waits up to 120 s for the soak to end (else prints SOAK-HUNG and exits 1)
// and reports how it ended: "soak <when>: exit N (its PASS/FAIL line)" (the
// library may log after it, e.g. its notification thread seeing the
// session end). The script is a file in bin (needGuest writes it): a test
// guest's whole command must fit the kernel command line.
func soakKilledMidway(bin, marker, when string) string {
	return fmt.Sprintf(`%s/soak-killed-midway.sh %s %s %q || exit 1`, bin, bin, marker, when)
}

// soakKilledMidwayScript is soak-killed-midway.sh BIN MARKER WHEN.
const soakKilledMidwayScript = `#!/bin/sh
$1/soak --seconds 0 --ready-file /tmp/ready --bytes 4194304 --streams 2 > /tmp/k.log 2>&1 & pid=$!
n=0; while [ ! -e /tmp/ready ] && [ $n -lt 1200 ]; do sleep 0.1; n=$((n+1)); done
echo $2
n=0; while kill -0 $pid 2>/dev/null && [ $n -lt 1200 ]; do sleep 0.1; n=$((n+1)); done
if kill -0 $pid 2>/dev/null; then echo "SOAK-HUNG"; kill -9 $pid; exit 1; fi
wait $pid; echo "soak $3: exit $? ($(grep ' soak' /tmp/k.log | tail -1))"
`
