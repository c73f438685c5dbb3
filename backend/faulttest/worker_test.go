package faulttest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/backend/server"
)

// TestWorkerKilled runs the real default `vgpu serve` (bin/vgpu: a worker
// process per guest process) for a TCG guest, SIGKILLs the worker of the
// running program while a soak runs in the guest, and checks: the guest
// program gets an error and exits (no hang), the next program works (a fresh
// worker), the manager records the exit and holds no sessions afterwards.
// (--isolate vm's workers are killed the same way in TestBackendRestart's
// second backend and in package worker's tests.)
func TestWorkerKilled(t *testing.T) {
	k := needGuest(t)
	vgpu := vgpuBinary(t, k)
	dir := t.TempDir()
	vsock, status := filepath.Join(dir, "vu.sock"), filepath.Join(dir, "status.sock")
	startVGPU(t, vgpu, "serve", "--device", "sim", "--sim-mem", "4G", "--vhost-user-socket", vsock,
		"--status-socket", status, "--log-level", "error")
	waitStatus(t, status)

	var con console
	killNow := con.on("KILL-WORKER-NOW")
	script := fmt.Sprintf(`export LD_LIBRARY_PATH=%[1]s
%[3]s
%[2]s/soak --seconds 3 --streams 2 | tail -1 | grep -q '^PASS soak' && echo WORKER-RECOVERED`, k.lib, k.bin, soakKilledMidway(k.bin, "KILL-WORKER-NOW", "after the worker was killed"))
	m := startAndWait(t, k, vsock, &con, killNow, 6*time.Minute, script)
	defer func() { m.Kill(); m.Wait(context.Background()) }()
	pid := workerPID(t, status)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing worker %d: %v", pid, err)
	}
	res, err := m.Wait(context.Background())
	out := con.String()
	t.Logf("console:\n%s", tail(out, 6))
	if err != nil || res.ExitStatus != 0 || !strings.Contains(out, "WORKER-RECOVERED") || !strings.Contains(out, "exit 1 (FAIL soak") {
		t.Fatalf("after the worker was killed: %v %v; want the running program to fail with an error and the next one to work", err, res)
	}
	testwait.For(t, 20*time.Second, "no sessions left and the killed worker's exit recorded", func() bool {
		s, err := server.ReadStatus(status, time.Second)
		if err != nil || len(s.Sessions) != 0 {
			return false
		}
		b, _ := json.Marshal(s.Workers)
		return strings.Contains(string(b), fmt.Sprintf(`"pid":%d`, pid)) && strings.Contains(string(b), "killed")
	})
}

// workerPID returns the pid of the (only) worker that serves a session
// (the others wait in the pool).
func workerPID(t *testing.T, status string) int {
	t.Helper()
	s, err := server.ReadStatus(status, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var w struct {
		Workers []struct {
			PID      int    `json:"pid"`
			VM       string `json:"vm"`
			Sessions int    `json:"sessions"`
		} `json:"workers"`
	}
	b, _ := json.Marshal(s.Workers)
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatalf("workers in the status: %s (%v)", b, err)
	}
	var pids []int
	for _, x := range w.Workers {
		if x.Sessions > 0 {
			pids = append(pids, x.PID)
		}
	}
	if len(pids) != 1 {
		t.Fatalf("want one worker serving a session: %s", b)
	}
	return pids[0]
}
