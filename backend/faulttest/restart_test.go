package faulttest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/backend/server"
)

// TestBackendRestart restarts the GPU backend under a running VM. QEMU
// 7.2's vhost-user-vsock-pci cannot reconnect to a vhost-user backend
// (with reconnect=1 it fails at startup, without it the device stays dead;
// docs/RELIABILITY.md), so the VM's device is served by "vgpu front"
// (package front), which outlives the backend: the real bin/vgpu serve
// --front-socket and bin/vgpu front, a TCG guest on the front's socket.
//
// While a soak runs in the guest the test SIGKILLs the backend. Checked:
// the running program gets an error and exits (no hang); a program started
// while no backend is up fails at once; a new backend (this time with
// --isolate vm) on the same front socket serves a new program in the same
// VM; the old backend process is gone (so is its device memory: the sim's
// memory is the process's), the new one ends with no sessions and no device
// memory; the front holds no more fds and guest-RAM mappings once the VM
// has exited than before it booted.
func TestBackendRestart(t *testing.T) {
	k := needGuest(t)
	vgpu := vgpuBinary(t, k)
	dir := t.TempDir()
	frontSock, vu, status := filepath.Join(dir, "front.sock"), filepath.Join(dir, "vu.sock"), filepath.Join(dir, "status.sock")

	serve := func(extra ...string) (*exec.Cmd, <-chan error) {
		t.Helper()
		_ = os.Remove(status) // the killed backend's status socket stays behind
		args := append([]string{"serve", "--device", "sim", "--sim-mem", "4G", "--front-socket", frontSock,
			"--status-socket", status, "--log-level", "error"}, extra...)
		cmd, exited := startVGPU(t, vgpu, args...)
		waitStatus(t, status)
		return cmd, exited
	}

	backend1, exited1 := serve()
	front, _ := startVGPU(t, vgpu, "front", "--vhost-user-socket", vu, "--backend-socket", frontSock, "--log-level", "warn",
		"--max-backoff", "500ms")
	testwait.For(t, 20*time.Second, "the front's vhost-user socket", func() bool { _, err := os.Stat(vu); return err == nil })
	frontBefore := procResources(t, front.Process.Pid)

	var con console
	killNow, startNow := con.on("KILL-BACKEND-NOW"), con.on("START-BACKEND-NOW")
	script := fmt.Sprintf(`export LD_LIBRARY_PATH=%[1]s
%[2]s/soak --seconds 2 --streams 2 | tail -1
%[3]s
t0=$(date +%%s); timeout 60 %[2]s/soak --seconds 1 --streams 1 > /tmp/p.log 2>&1; rc=$?
echo "soak with no backend: exit $rc after $(( $(date +%%s) - t0 )) s ($(grep ' soak' /tmp/p.log|tail -1))"
echo START-BACKEND-NOW
i=0
while [ $i -lt 60 ]; do
	if timeout 60 %[2]s/soak --seconds 3 --streams 2 > /tmp/s.log 2>&1; then tail -2 /tmp/s.log; echo "RESTART-PASS after $i retries"; exit 0; fi
	i=$((i+1)); sleep 0.5
done
tail -2 /tmp/s.log; echo RESTART-FAIL; exit 1`, k.lib, k.bin, soakKilledMidway(k.bin, "KILL-BACKEND-NOW", "when the backend was killed"))
	m := startAndWait(t, k, vu, &con, killNow, 6*time.Minute, script)
	defer func() { m.Kill(); m.Wait(context.Background()) }()
	s, err := server.ReadStatus(status, 5*time.Second)
	if err != nil || len(s.Sessions) == 0 || s.Devices[0].MemUsedByVGPU == 0 {
		t.Fatalf("backend 1 while the soak runs: %v %+v", err, s)
	}
	t.Logf("backend 1 before the kill: %d sessions, %d bytes of device memory", len(s.Sessions), s.Devices[0].MemUsedByVGPU)
	if err := backend1.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited1:
		t.Logf("backend 1: %v (its device memory went with the process)", err)
	case <-time.After(10 * time.Second):
		t.Fatal("backend 1 did not die")
	}

	select {
	case <-startNow:
	case <-m.Exited():
		t.Fatalf("guest exited early:\n%s", con.String())
	case <-time.After(3 * time.Minute):
		t.Fatalf("the guest program did not end after the backend was killed:\n%s", con.String())
	}
	_, _ = serve("--isolate", "vm")
	res, err := m.Wait(context.Background())
	out := con.String()
	t.Logf("console:\n%s", tail(out, 8))
	if err != nil || res.ExitStatus != 0 || !strings.Contains(out, "RESTART-PASS") {
		t.Fatalf("after the backend restart: %v %+v; want a new program to work", err, res)
	}
	if !strings.Contains(out, "backend was killed: exit 1 (FAIL soak") {
		t.Fatal("the program running when the backend was killed did not fail with a CUDA error")
	}
	if !strings.Contains(out, "soak with no backend: exit 1") {
		t.Fatal("a program started while no backend was up did not fail with a CUDA error")
	}
	testwait.For(t, 30*time.Second, "backend 2 holds no sessions and no device memory", func() bool {
		s, err := server.ReadStatus(status, time.Second)
		return err == nil && len(s.Sessions) == 0 && (len(s.Devices) == 0 || s.Devices[0].MemUsedByVGPU == 0)
	})
	var after resources
	testwait.For(t, 20*time.Second, "the front's fds and guest-RAM mappings back to where they were before the VM", func() bool {
		after = procResources(t, front.Process.Pid)
		return after.fds <= frontBefore.fds && after.ramMaps <= frontBefore.ramMaps
	})
	t.Logf("front: before the VM %v, after %v", frontBefore, after)
}

// procResources counts another process's fds and guest-RAM mappings.
func procResources(t *testing.T, pid int) resources {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	m, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	return resources{fds: len(ents), ramMaps: strings.Count(string(m), "/memfd:"), maps: strings.Count(string(m), "\n")}
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
