package faulttest_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/backend/engine"
	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/backend/server"
	"github.com/vgpu-project/vgpu/backend/vhostuser"
	"github.com/vgpu-project/vgpu/backend/vm"
	"github.com/vgpu-project/vgpu/protocol"
	"github.com/vgpu-project/vgpu/vm-images/testguest"
)

// skipOrFail skips, or fails under VGPU_REQUIRE_VM=1.
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("VGPU_REQUIRE_VM") == "1" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format+" (set VGPU_REQUIRE_VM=1 to fail instead)", args...)
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// guestKit is what the in-guest tests need: the test guest with vgpu.ko,
// the guest libraries and the soak program (built here with nvcc).
type guestKit struct {
	root, bin, lib string
	img            *testguest.Image
}

func needGuest(t *testing.T) *guestKit {
	t.Helper()
	if testing.Short() && os.Getenv("VGPU_REQUIRE_VM") != "1" {
		t.Skip("boots guests (-short)")
	}
	root := repoRoot(t)
	k := &guestKit{root: root, bin: filepath.Join(root, "build/reliability/bin"), lib: filepath.Join(root, "guest-lib/build")}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		skipOrFail(t, "no QEMU: %v", err)
	}
	ko := filepath.Join(root, "guest-driver/vgpu.ko")
	for _, need := range []string{ko, filepath.Join(k.lib, "libcuda.so.1")} {
		if _, err := os.Stat(need); err != nil {
			skipOrFail(t, "%s is missing: run make guest-lib guest-driver", need)
		}
	}
	if stale(filepath.Join(k.bin, "soak"), filepath.Join(root, "scripts/reliability/soak.cu")) || os.Getenv("VGPU_REBUILD_SOAK") == "1" {
		if _, err := exec.LookPath("nvcc"); err != nil {
			skipOrFail(t, "no nvcc to build scripts/reliability/soak.cu: %v", err)
		}
		out, err := exec.Command(filepath.Join(root, "scripts/reliability/build.sh"), k.bin).CombinedOutput()
		if err != nil {
			t.Fatalf("building the soak program: %v\n%s", err, out)
		}
	}
	for _, f := range []string{"guest-faults.sh", "guest-attack.py"} { // the current copies
		b, err := os.ReadFile(filepath.Join(root, "scripts/reliability", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(k.bin, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(k.bin, "soak-killed-midway.sh"), []byte(soakKilledMidwayScript), 0o755); err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("VGPU_TESTGUEST_IMAGE"); dir != "" {
		img, err := testguest.Load(dir) // prebuilt (with vgpu.ko), e.g. on the GPU machine
		if err != nil {
			t.Fatal(err)
		}
		k.img = img
		return k
	}
	img, err := testguest.Build(testguest.Options{KernelSource: testguest.KernelHost, ExtraModules: []string{ko}})
	if err != nil {
		skipOrFail(t, "cannot build the test guest: %v", err)
	}
	k.img = img
	return k
}

// stale reports whether bin is missing or older than src.
func stale(bin, src string) bool {
	b, err := os.Stat(bin)
	if err != nil {
		return true
	}
	s, err := os.Stat(src)
	return err == nil && s.ModTime().After(b.ModTime())
}

// console collects a guest's console and signals lines that match.
type console struct {
	mu    sync.Mutex
	b     bytes.Buffer
	watch map[string]chan struct{}
}

func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.b.Write(p)
	for s, ch := range c.watch {
		if bytes.Contains(c.b.Bytes(), []byte(s)) {
			close(ch)
			delete(c.watch, s)
		}
	}
	return len(p), nil
}

func (c *console) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}

// on returns a channel closed once s appears on the console.
func (c *console) on(s string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan struct{})
	if bytes.Contains(c.b.Bytes(), []byte(s)) {
		close(ch)
		return ch
	}
	if c.watch == nil {
		c.watch = map[string]chan struct{}{}
	}
	c.watch[s] = ch
	return ch
}

// vgpuHost is one in-process backend serving several VMs, one vhost-user
// socket each, on the sim device.
type vgpuHost struct {
	t     *testing.T
	srv   *server.Server
	drv   *sim.Driver
	ctx   context.Context
	socks map[string]string
	vms   []*vhostuser.VsockVM
	dir   string
	errc  chan error
	log   hclog.Logger
	n     int // Serve loops started
}

func newVGPUHost(t *testing.T, memLimit uint64, names ...string) *vgpuHost {
	t.Helper()
	drv, err := sim.New(sim.Config{Devices: 1, MemBytes: 16 << 30})
	if err != nil {
		t.Fatal(err)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "vgpu", Level: hclog.Error, Output: os.Stderr})
	srv, err := server.New(server.Config{Driver: drv, Engine: engine.Auto, MemLimit: memLimit, Limits: protocol.DefaultLimits, Version: "faulttest", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &vgpuHost{t: t, srv: srv, drv: drv, ctx: ctx, socks: map[string]string{}, dir: t.TempDir(), errc: make(chan error, 16), log: log}
	t.Cleanup(func() {
		cancel()
		for _, vs := range h.vms {
			vs.Close()
		}
		for i := 0; i < h.n; i++ {
			<-h.errc
		}
		drv.Close()
	})
	for i, n := range names {
		h.socks[n] = filepath.Join(h.dir, n+".sock")
		h.serveVM(n, uint64(3+i))
	}
	return h
}

// serveVM serves VM name's vhost-user socket (again).
func (h *vgpuHost) serveVM(name string, cid uint64) *vhostuser.VsockVM {
	h.t.Helper()
	vs, err := vhostuser.ServeVsock(h.ctx, vhostuser.VsockConfig{SocketPath: h.socks[name], GuestCID: cid, Logger: h.log})
	if err != nil {
		h.t.Fatal(err)
	}
	h.vms = append(h.vms, vs)
	h.n++
	go func() { h.errc <- h.srv.Serve(h.ctx, vs.Listener) }()
	return vs
}

// vmUsage is the device memory VM name (its socket) holds, and its sessions.
func (h *vgpuHost) vmUsage(name string) (mem uint64, sessions int) {
	for _, v := range h.srv.Status().VMs {
		if v.VM == h.socks[name] {
			return v.MemUsed, v.Sessions
		}
	}
	return 0, 0
}

func (h *vgpuHost) start(k *guestKit, name string, con *console, timeout time.Duration, script string) *vm.Machine {
	h.t.Helper()
	m, err := vm.Start(h.ctx, vm.Config{Image: k.img, Command: []string{"/bin/sh", "-c", script}, Console: con,
		VGPUSocket: h.socks[name], Mem: "2G", CPUs: 1, Timeout: timeout})
	if err != nil {
		h.t.Fatalf("starting VM %s: %v", name, err)
	}
	return m
}

// vgpuBinary returns the repository's bin/vgpu, skipping the test (failing
// with VGPU_REQUIRE_VM=1) when it has not been built.
func vgpuBinary(t *testing.T, k *guestKit) string {
	t.Helper()
	vgpu := filepath.Join(k.root, "bin/vgpu")
	if _, err := os.Stat(vgpu); err != nil {
		skipOrFail(t, "%s is missing: run make vgpu", vgpu)
	}
	return vgpu
}

// startVGPU runs vgpu with args for the rest of the test (SIGTERM at the
// end, SIGKILL 15 s later; SIGKILL too if the test process dies) and
// returns the command and its exit (its error once, then closed).
func startVGPU(t *testing.T, vgpu string, args ...string) (*exec.Cmd, <-chan error) {
	t.Helper()
	cmd := exec.Command(vgpu, args...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting vgpu %s: %v", args[0], err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); close(exited) }() // closed: the cleanup also sees an exit a test already read
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	return cmd, exited
}

// waitStatus waits until a backend answers on its status socket.
func waitStatus(t *testing.T, status string) {
	t.Helper()
	testwait.For(t, 20*time.Second, "the backend's status socket", func() bool {
		_, err := server.ReadStatus(status, time.Second)
		return err == nil
	})
}

// startAndWait boots the test guest on the vhost-user socket sock running
// script (2 GiB, one vCPU, timeout as the VM's limit) and returns once ready
// is closed (a console line the script prints). A guest that exits first, or
// does not get there in 4 minutes, is killed and fails the test; otherwise
// the caller kills it.
func startAndWait(t *testing.T, k *guestKit, sock string, con *console, ready <-chan struct{}, timeout time.Duration, script string) *vm.Machine {
	t.Helper()
	m, err := vm.Start(context.Background(), vm.Config{Image: k.img, Command: []string{"/bin/sh", "-c", script}, Console: con,
		VGPUSocket: sock, Mem: "2G", CPUs: 1, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ready:
		return m
	case <-m.Exited():
		t.Fatalf("guest exited early:\n%s", con.String())
	case <-time.After(4 * time.Minute):
		m.Kill()
		m.Wait(context.Background())
		t.Fatalf("the guest never got going:\n%s", con.String())
	}
	return nil
}

func soakDuration(t *testing.T) time.Duration {
	if s := os.Getenv("VGPU_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("VGPU_SOAK=%q: %v", s, err)
		}
		return d
	}
	return time.Minute
}

var soakLine = regexp.MustCompile(`SOAK pid=\d+ .*rounds=(\d+) calls=(\d+) moved=(\d+) checked=(\d+) corrupt=(\d+) .*seconds=([\d.]+)`)

// soakTotals adds up the SOAK lines of a console.
func soakTotals(t *testing.T, con string) (procs int, calls, moved, checked, corrupt uint64, secs float64) {
	for _, m := range soakLine.FindAllStringSubmatch(con, -1) {
		procs++
		n := func(i int) uint64 { v, _ := strconv.ParseUint(m[i], 10, 64); return v }
		calls += n(2)
		moved += n(3)
		checked += n(4)
		corrupt += n(5)
		s, _ := strconv.ParseFloat(m[6], 64)
		secs = max(secs, s)
	}
	return
}

// TestGuestFaults runs two TCG guests on one backend (sim device, per-VM
// memory cap 1 GiB). VM B soaks (2 processes x 2 streams of checksummed
// copies, memsets and launches) for VGPU_SOAK (default 1m) while VM A:
//  1. is SIGKILLed (QEMU itself) in the middle of 16 MiB transfers: A's
//     sessions end and its device memory returns to 0;
//  2. boots again on the same socket (QEMU reconnects to the running
//     backend) and runs scripts/reliability/guest-faults.sh: guest
//     processes SIGKILLed mid-copy and mid-launch, device memory back to the
//     baseline, crafted frames from a root process (privileged and
//     unprivileged ports), its own soak; then asks for more than its cap
//     (CUDA_ERROR_OUT_OF_MEMORY) and for less (works).
//
// B must finish with every byte checked and none corrupt; at the end the
// device holds nothing and the backend no more fds or guest-RAM mappings
// than before the VMs came.
func TestGuestFaults(t *testing.T) {
	k := needGuest(t)
	soak := soakDuration(t)
	h := newVGPUHost(t, 1<<30, "a", "b")
	before := countResources(t)
	t.Logf("backend before the VMs: %v", before)

	var conB console
	mb := h.start(k, "b", &conB, soak+5*time.Minute, fmt.Sprintf(`export LD_LIBRARY_PATH=%s
for i in 1 2; do %s/soak --seconds %d --streams 2 --launch --seed $i > /tmp/soak.$i.log 2>&1 & done
wait; cat /tmp/soak.*.log | grep -v READY; grep -q '^PASS soak' /tmp/soak.1.log && grep -q '^PASS soak' /tmp/soak.2.log && echo VM-B-PASS`, k.lib, k.bin, int(soak.Seconds())))
	defer func() { mb.Kill(); mb.Wait(context.Background()) }()

	// 1. QEMU SIGKILLed mid-transfer.
	var conA1 console
	ready := conA1.on("READY")
	ma := h.start(k, "a", &conA1, 5*time.Minute, fmt.Sprintf(`export LD_LIBRARY_PATH=%s; exec %s/soak --seconds 0 --bytes %d --streams 2 --pageable-every 1`, k.lib, k.bin, 16<<20))
	select {
	case <-ready:
	case <-ma.Exited():
		t.Fatalf("VM A exited before its soak got going:\n%s", conA1.String())
	case <-time.After(4 * time.Minute):
		ma.Kill()
		t.Fatalf("VM A's soak never got going:\n%s", conA1.String())
	}
	mem, sess := h.vmUsage("a")
	if sess == 0 || mem == 0 {
		t.Fatalf("VM A has %d sessions and %d bytes before the kill; want its soak's", sess, mem)
	}
	ma.Kill() // SIGKILL to QEMU while transfers run
	ma.Wait(context.Background())
	testwait.For(t, 30*time.Second, "VM A's sessions ended and its device memory released", func() bool {
		m, s := h.vmUsage("a")
		return m == 0 && s == 0
	})
	t.Logf("VM A's QEMU killed with %d bytes in %d sessions; released", mem, sess)
	if _, s := h.vmUsage("b"); s == 0 && !strings.Contains(conB.String(), "VM-B-PASS") {
		t.Logf("note: VM B had no session at the kill (still booting?)")
	}

	// 2. A again, on the same socket: guest-side faults, attacks, quota.
	var conA2 console
	ma2 := h.start(k, "a", &conA2, 8*time.Minute, fmt.Sprintf(`%[1]s/guest-faults.sh %[1]s %[2]s 10 2 2 || exit 1
export LD_LIBRARY_PATH=%[2]s
%[1]s/soak --alloc %[3]d; %[1]s/soak --alloc %[4]d`, k.bin, k.lib, 2<<30, 512<<20))
	resA, err := ma2.Wait(context.Background())
	t.Logf("VM A console:\n%s", filterConsole(conA2.String()))
	if err != nil || resA.ExitStatus != 0 {
		t.Fatalf("VM A: %v (status %v)", err, resA)
	}
	if !strings.Contains(conA2.String(), "GUEST-FAULTS PASS") {
		t.Fatal("VM A: guest-faults.sh did not pass")
	}
	if !strings.Contains(conA2.String(), fmt.Sprintf("ALLOC %d 2 ", 2<<30)) {
		t.Fatal("VM A: an allocation over its cap did not get CUDA_ERROR_OUT_OF_MEMORY (2)")
	}
	if !strings.Contains(conA2.String(), fmt.Sprintf("ALLOC %d 0 ", 512<<20)) {
		t.Fatal("VM A: an allocation within its cap failed")
	}

	resB, err := mb.Wait(context.Background())
	t.Logf("VM B console:\n%s", filterConsole(conB.String()))
	if err != nil || resB.ExitStatus != 0 || !strings.Contains(conB.String(), "VM-B-PASS") {
		t.Fatalf("VM B's soak failed while A was attacked and killed: %v (status %v)", err, resB)
	}
	procs, calls, moved, checked, corrupt, secs := soakTotals(t, conB.String())
	if procs != 2 || corrupt != 0 || checked == 0 {
		t.Fatalf("VM B: %d soak reports, %d corrupt bytes, %d checked", procs, corrupt, checked)
	}
	t.Logf("VM B soak: %d processes, %.0f s, %d calls (%.0f/s), %d bytes moved (%.1f MB/s), %d bytes checked, 0 corrupt",
		procs, secs, calls, float64(calls)/secs, moved, float64(moved)/secs/1e6, checked)

	testwait.For(t, 30*time.Second, "no sessions and no device memory left", func() bool {
		m, n := h.devMem()
		return len(h.srv.Status().Sessions) == 0 && m == 0 && n == 0
	})
	noLeaks(t, before, 64)
}

func (h *vgpuHost) devMem() (uint64, int) {
	s := h.srv.Status()
	if len(s.Devices) == 0 {
		return 0, 0
	}
	return s.Devices[0].MemUsedByVGPU, s.Devices[0].Allocations
}

// filterConsole keeps the lines worth a test log.
func filterConsole(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "PHASE") || strings.HasPrefix(l, "SOAK") || strings.HasPrefix(l, "ATTACK") || strings.HasPrefix(l, "killed") ||
			strings.HasPrefix(l, "ALLOC") || strings.Contains(l, "PASS") || strings.Contains(l, "FAIL") || strings.HasPrefix(l, "guest") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
