package vm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/vm-images/testguest"
)

// testImage builds (or reuses) the test guest, skipping the test when this
// machine cannot run one, unless VGPU_REQUIRE_VM=1.
func testImage(t *testing.T, o testguest.Options) *testguest.Image {
	t.Helper()
	skip := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("VGPU_REQUIRE_VM") == "1" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format+" (set VGPU_REQUIRE_VM=1 to fail instead)", args...)
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		skip("no QEMU: %v", err)
	}
	if dir := os.Getenv("VGPU_TESTGUEST_IMAGE"); dir != "" && len(o.ExtraModules) == 0 && len(o.ExtraFiles) == 0 {
		img, err := testguest.Load(dir) // a prebuilt image, e.g. on the GPU machine
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	o.KernelSource = testguest.KernelHost
	o.Logger = testLogger(t)
	img, err := testguest.Build(o)
	if err != nil {
		skip("cannot build the test guest: %v", err)
	}
	return img
}

func testLogger(t *testing.T) hclog.Logger {
	lvl := hclog.Info
	if testing.Verbose() {
		lvl = hclog.Debug
	}
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: lvl, Output: &testWriter{t: t}})
}

type testWriter struct{ t *testing.T }

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// syncBuffer is a bytes.Buffer safe for the console goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunUnameAndShare(t *testing.T) {
	img := testImage(t, testguest.Options{})
	out := t.TempDir()
	var con syncBuffer
	res, err := Run(context.Background(), Config{
		Image:   img,
		Command: []string{"/bin/sh", "-c", `uname -a; echo "written in the guest" > "$OUT/hello.txt"; cd /; pwd; exit 7`},
		Env:     []string{"OUT=" + out},
		Shares:  []Share{{HostPath: out}},
		Console: &con,
		Timeout: 2 * time.Minute,
		Logger:  testLogger(t),
	})
	t.Logf("console:\n%s", con.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.ExitStatus != 7 {
		t.Errorf("exit status %d, want 7", res.ExitStatus)
	}
	if want := "Linux (none) " + img.Meta.KernelVersion; !strings.Contains(con.String(), want) {
		t.Errorf("console lacks %q", want)
	}
	b, err := os.ReadFile(filepath.Join(out, "hello.txt"))
	if err != nil || string(b) != "written in the guest\n" {
		t.Errorf("shared file: %q, %v", b, err)
	}
	if strings.Contains(con.String(), "VGPU-") {
		t.Errorf("marker lines leaked to the console")
	}
	t.Logf("boot: wall to init %v, to command %v, total %v; guest uptime at init %v, at command %v",
		res.WallToInit, res.WallToCommand, res.WallTotal, res.UptimeAtInit, res.UptimeAtCommand)
}

func TestRunEcho(t *testing.T) {
	img := testImage(t, testguest.Options{})
	var con syncBuffer
	res, err := Run(context.Background(), Config{
		Image: img, Command: []string{"/bin/echo", "hello"}, Console: &con,
		Timeout: 30 * time.Second, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatalf("Run: %v\nconsole:\n%s", err, con.String())
	}
	if res.ExitStatus != 0 || strings.TrimSpace(con.String()) != "hello" {
		t.Errorf("status %d, console %q; want 0, hello", res.ExitStatus, con.String())
	}
	t.Logf("vm run -- /bin/echo hello: total %v (wall to init %v, to command %v; guest uptime at command %v)",
		res.WallTotal, res.WallToInit, res.WallToCommand, res.UptimeAtCommand)
	if res.WallTotal > 30*time.Second {
		t.Errorf("took %v, target is 30 s", res.WallTotal)
	}
}

func TestRunTimeout(t *testing.T) {
	img := testImage(t, testguest.Options{})
	_, err := Run(context.Background(), Config{
		Image: img, Command: []string{"sleep", "600"}, Console: &syncBuffer{},
		Timeout: 2 * time.Second, Logger: testLogger(t),
	})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Run: %v, want ErrTimeout", err)
	}
}

func TestRunMissingCommand(t *testing.T) {
	img := testImage(t, testguest.Options{})
	res, err := Run(context.Background(), Config{
		Image: img, Command: []string{"/no/such/program"}, Console: &syncBuffer{},
		Timeout: time.Minute, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.ExitStatus != 127 {
		t.Errorf("exit status %d, want 127", res.ExitStatus)
	}
}

// TestRunExtraModuleAndFile checks the two ways other tests bring things
// into the guest: an extra kernel module (here a copy of vsock_loopback, as
// vgpu.ko would be) and an extra file placed in the guest's /tmp.
func TestRunExtraModuleAndFile(t *testing.T) {
	base := testImage(t, testguest.Options{})
	src := filepath.Join("/lib/modules", base.Meta.KernelVersion, "kernel/net/vmw_vsock/vsock_loopback.ko")
	b, err := os.ReadFile(src)
	if err != nil {
		t.Skipf("no %s: %v", src, err)
	}
	dir := t.TempDir()
	ko := filepath.Join(dir, "vsock_loopback.ko")
	os.WriteFile(ko, b, 0o644)
	script := filepath.Join(dir, "hello.sh")
	os.WriteFile(script, []byte("#!/bin/sh\necho extra file runs\n"), 0o755)
	img := testImage(t, testguest.Options{
		CacheDir:     t.TempDir(),
		ExtraModules: []string{ko},
		ExtraFiles:   []testguest.File{{Src: script, Dst: "/tmp/vgpu/hello.sh"}},
	})
	var con syncBuffer
	res, err := Run(context.Background(), Config{
		Image:   img,
		Command: []string{"/bin/sh", "-c", `grep -q '^vsock_loopback ' /proc/modules && echo module loaded; /tmp/vgpu/hello.sh`},
		Console: &con, Timeout: 2 * time.Minute, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatalf("Run: %v\nconsole:\n%s", err, con.String())
	}
	if res.ExitStatus != 0 || con.String() != "module loaded\nextra file runs\n" {
		t.Fatalf("status %d, console %q", res.ExitStatus, con.String())
	}
}
