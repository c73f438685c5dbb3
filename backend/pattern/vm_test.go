package pattern_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/pattern"
	"github.com/vgpu-project/vgpu/backend/vhostuser"
	"github.com/vgpu-project/vgpu/backend/vm"
	"github.com/vgpu-project/vgpu/protocol"
	"github.com/vgpu-project/vgpu/vm-images/testguest"
)

// TestGuestDriver boots the test guest under TCG with a vhost-user-vsock
// device served in this process, builds vgpu.ko against the guest kernel's
// headers and the static guest test program, and runs the program in the
// guest against the pattern server: load/unload/load of the module, copies
// of 1 byte to 64 MiB (unaligned, 4 KiB and THP memory, continuation
// frames), bad arguments, threads, register/unregister, mmap, submit/recv,
// a call that times out, a process killed mid-call, a non-root process
// whose own vsock connection must be refused, and the pin timing.
//
//	go test -run TestGuestDriver -v ./backend/pattern/
//
// It is skipped when QEMU, the guest kernel or its headers are missing,
// unless VGPU_REQUIRE_VM=1. VGPU_GUEST_TESTS="copy_4k bench" runs only
// those tests of the guest program (after the load test). VGPU_DRIVER_BENCH_OUT=path writes the BENCH
// lines as markdown.
func TestGuestDriver(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM under TCG")
	}
	skip := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("VGPU_REQUIRE_VM") == "1" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format+" (set VGPU_REQUIRE_VM=1 to make this a failure)", args...)
	}
	if runtime.GOARCH != "amd64" {
		skip("needs an amd64 host")
	}
	for _, p := range []string{"qemu-system-x86_64", "gcc", "make"} {
		if _, err := exec.LookPath(p); err != nil {
			skip("%s not found", p)
		}
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.Warn, Output: testWriter{t}})
	img, err := testguest.Build(testguest.Options{Logger: log})
	if err != nil {
		skip("test guest image: %v", err)
	}
	kdir := filepath.Join("/lib/modules", img.Meta.KernelVersion, "build")
	if _, err := os.Stat(filepath.Join(kdir, "Makefile")); err != nil {
		skip("no kernel headers for the guest kernel %s in %s", img.Meta.KernelVersion, kdir)
	}
	root := repoRoot(t)
	dir := t.TempDir()
	ko := buildModule(t, root, dir, kdir)
	prog := filepath.Join(dir, "vgpu-guest-test")
	run(t, root, "gcc", "-static", "-O2", "-pthread", "-Iguest-driver", "-Iprotocol",
		"-o", prog, "guest-driver/tests/vgpu_guest_test.c")

	ctx, cancel := context.WithTimeout(context.Background(), 14*time.Minute)
	defer cancel()
	sock := filepath.Join(dir, "vgpu.sock")
	vs, err := vhostuser.ServeVsock(ctx, vhostuser.VsockConfig{SocketPath: sock, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer vs.Close()
	// 512 segments a frame: a 64 MiB copy of 4 KiB pages needs continuation.
	srv := pattern.NewServer(pattern.Options{
		Limits: protocol.Limits{MaxPayload: protocol.DefaultLimits.MaxPayload, MaxSegments: 512},
		Delay:  2 * time.Second, Logger: log,
	})
	go func() { _ = srv.ServeListener(vs.Listener) }()

	var console bytes.Buffer
	res, err := vm.Run(ctx, vm.Config{
		Image: img,
		Command: []string{"/bin/sh", "-c", fmt.Sprintf(
			"%s -m %s -p call_timeout_ms=30000 %s; rc=$?; dmesg | grep 'vgpu:' | tail -40; exit $rc",
			prog, ko, os.Getenv("VGPU_GUEST_TESTS"))},
		VGPUSocket: sock,
		Shares:     []vm.Share{{HostPath: dir}},
		// A loaded host can make TCG miss the IO-APIC timer check at boot
		// ("IO-APIC + timer doesn't work!" panic).
		KernelArgs: []string{"no_timer_check"},
		Timeout:    12 * time.Minute,
		Console:    &syncWriter{w: &console},
		Logger:     log,
	})
	out := console.String()
	t.Logf("guest output:\n%s", out)
	if err != nil {
		t.Fatalf("guest run: %v", err)
	}
	if res.ExitStatus != 0 || !strings.Contains(out, "DONE 0 failures") {
		t.Fatalf("guest test program failed (exit status %d)", res.ExitStatus)
	}

	st := &srv.Stats
	t.Logf("pattern server: sessions %d closed %d frames %d (continuations %d) segments %d checked %d MiB filled %d MiB registers %d",
		st.Sessions.Load(), st.Closed.Load(), st.Frames.Load(), st.ContFrames.Load(), st.Segments.Load(),
		st.BytesChecked.Load()>>20, st.BytesFilled.Load()>>20, st.Registers.Load())
	if st.DriverHellos.Load() == 0 {
		t.Error("no HELLO with the driver role")
	}
	full := os.Getenv("VGPU_GUEST_TESTS") == ""
	if full && st.ContFrames.Load() == 0 {
		t.Error("no OpSegments continuation frame was sent")
	}
	if st.Errors.Load() != 0 {
		t.Errorf("%d sessions ended with a protocol error", st.Errors.Load())
	}
	if st.Refused.Load() != 0 {
		t.Errorf("%d frames with segments came from unprivileged ports", st.Refused.Load())
	}
	if got := vs.Device.Stats().Refused; full && got == 0 {
		t.Error("the non-root guest process's own vsock connection was not refused")
	}
	waitFor(t, 10*time.Second, func() bool { return st.Closed.Load() == st.Sessions.Load() },
		"every session closed (sessions %d, closed %d)", st.Sessions.Load(), st.Closed.Load())
	if p := os.Getenv("VGPU_DRIVER_BENCH_OUT"); p != "" {
		writeBench(t, p, img.Meta.KernelVersion, out)
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// buildModule builds vgpu.ko from a copy of guest-driver laid out like the
// DKMS tree (protocol header in protocol/), so the checkout stays clean.
func buildModule(t *testing.T, root, dir, kdir string) string {
	t.Helper()
	src := filepath.Join(dir, "vgpu-src")
	run(t, root, "cp", "-r", "guest-driver", src)
	if err := os.MkdirAll(filepath.Join(src, "protocol"), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, root, "cp", "protocol/vgpu_protocol.h", filepath.Join(src, "protocol"))
	run(t, src, "make", "clean", "KDIR="+kdir)
	run(t, src, "make", "KDIR="+kdir, "W=1")
	return filepath.Join(src, "vgpu.ko")
}

var benchLine = regexp.MustCompile(`BENCH .*`)

func writeBench(t *testing.T, path, kver, out string) {
	var b strings.Builder
	fmt.Fprintf(&b, "Guest kernel %s under QEMU TCG (%s), %s\n\n", kver, runtime.GOARCH, time.Now().UTC().Format(time.RFC3339))
	for _, l := range benchLine.FindAllString(out, -1) {
		fmt.Fprintf(&b, "    %s\n", strings.TrimSpace(l))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Error(err)
	}
}

func waitFor(t *testing.T, d time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Errorf("timed out waiting: "+format, args...)
			return
		}
		<-tick.C
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
