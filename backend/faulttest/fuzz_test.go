package faulttest_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/fieldfuzz"
	"github.com/vgpu-project/vgpu/backend/server"
)

// TestFieldFuzzRealBackend runs the structure-aware fuzzer (every field of
// every opcode at boundary values, then random mutations) against the real
// bin/vgpu serve --device sim --unix, in both isolation modes: every case
// answered, the process alive at the end, no panic caught (--isolate none,
// where the status socket sees the sessions), a good client's bytes exact.
// VGPU_FUZZ_TIME sets the random phase per mode (default 5s; the GPU
// machine runs the same against --device cuda: scripts/gpu-fuzz.sh).
func TestFieldFuzzRealBackend(t *testing.T) {
	vgpu := filepath.Join(repoRoot(t), "bin/vgpu")
	if _, err := os.Stat(vgpu); err != nil {
		skipOrFail(t, "%s is missing: run make vgpu", vgpu)
	}
	dur := 5 * time.Second
	if s := os.Getenv("VGPU_FUZZ_TIME"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("VGPU_FUZZ_TIME=%q: %v", s, err)
		}
		dur = d
	}
	for _, isolate := range []string{"none", "vm"} {
		t.Run("isolate-"+isolate, func(t *testing.T) {
			dir := t.TempDir()
			sock, status := filepath.Join(dir, "vgpu.sock"), filepath.Join(dir, "status.sock")
			_, exited := startVGPU(t, vgpu, "serve", "--device", "sim", "--sim-mem", "4G", "--isolate", isolate,
				"--unix", sock, "--status-socket", status, "--log-level", "error")
			waitStatus(t, status)
			cfg := fieldfuzz.Config{
				Dial:     func() (net.Conn, error) { return net.Dial("unix", sock) },
				Duration: dur,
				Seed:     uint64(time.Now().UnixNano()),
				Timeout:  30 * time.Second,
			}
			if isolate == "none" {
				cfg.Panics = func() (uint64, error) {
					st, err := server.ReadStatus(status, 5*time.Second)
					if err != nil {
						return 0, err
					}
					return st.Stats.Panics, nil
				}
			}
			rep, err := fieldfuzz.Run(context.Background(), cfg)
			t.Logf("seed %d: %d cases, %d random, %d reconnects, %d good round trips, statuses %v", cfg.Seed, rep.Cases, rep.Random, rep.Reconnects, rep.GoodRounds, rep.Statuses)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				t.Fatalf("vgpu serve exited: %v", err)
			default:
			}
		})
	}
}
