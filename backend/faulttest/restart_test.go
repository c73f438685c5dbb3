package faulttest_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/vm"
)

// TestBackendRestart stops the vhost-user-vsock backend of a running VM and
// serves the same socket again (a backend restart). The guest ran a soak
// before the restart; after it, it retries a short soak for up to a minute:
// new programs should work once QEMU has reconnected.
//
// Findings with QEMU 7.2 (docs/RELIABILITY.md): a chardev with reconnect=1
// makes vhost-user-vsock-pci fail at startup ("Failed to set msg fds ...
// vhost_backend_init failed"), because the first connection is made in the
// background; without it (vm.Run's chardev) QEMU does not reconnect, and
// the guest's vGPU stays dead until the VM restarts. The test records which
// happens; VGPU_EXPECT_RECONNECT=1 makes a dead vGPU a failure.
func TestBackendRestart(t *testing.T) {
	k := needGuest(t)
	for _, mode := range []string{"reconnect=1", "plain"} {
		t.Run(mode, func(t *testing.T) {
			h := newVGPUHost(t, 0)
			h.socks["a"] = h.dir + "/a.sock"
			vs := h.serveVM("a", 3)
			var con console
			phase1 := con.on("PHASE1-DONE")
			script := fmt.Sprintf(`export LD_LIBRARY_PATH=%[1]s
%[2]s/soak --seconds 3 --streams 2 | tail -2; echo PHASE1-DONE
sleep 3
i=0
while [ $i -lt 6 ]; do
	if timeout 10 %[2]s/soak --seconds 2 --streams 1 > /tmp/s.log 2>&1; then tail -2 /tmp/s.log; echo "RESTART-PASS after $i retries"; exit 0; fi
	tail -1 /tmp/s.log; i=$((i+1)); sleep 1
done
echo RESTART-FAIL; dmesg | tail -8; exit 1`, k.lib, k.bin)
			cfg := vm.Config{Image: k.img, Command: []string{"/bin/sh", "-c", script}, Console: &con, Mem: "2G", CPUs: 1, Timeout: 5 * time.Minute}
			if mode == "plain" {
				cfg.VGPUSocket = h.socks["a"]
			} else {
				cfg.QEMUArgs = []string{"-chardev", "socket,id=vgr,path=" + h.socks["a"] + ",reconnect=1", "-device", "vhost-user-vsock-pci,chardev=vgr,id=vgr-dev"}
			}
			m, err := vm.Start(h.ctx, cfg)
			if err != nil {
				if mode != "plain" && strings.Contains(err.Error(), "vhost_backend_init failed") {
					t.Skipf("KNOWN LIMITATION (QEMU 7.2): vhost-user-vsock-pci does not start with a reconnect=1 chardev: %v", err)
				}
				t.Fatal(err)
			}
			defer func() { m.Kill(); m.Wait(context.Background()) }()
			select {
			case <-phase1:
			case <-m.Exited():
				t.Fatalf("guest exited early:\n%s", con.String())
			case <-time.After(3 * time.Minute):
				t.Fatalf("no PHASE1-DONE:\n%s", con.String())
			}
			// Restart: the old backend goes away, a new one serves the
			// same socket.
			vs.Close()
			_ = os.Remove(h.socks["a"])
			h.serveVM("a", 3)
			res, err := m.Wait(context.Background())
			out := con.String()
			t.Logf("console:\n%s", tail(out, 30))
			if err != nil || res.ExitStatus != 0 || !strings.Contains(out, "RESTART-PASS") {
				if os.Getenv("VGPU_EXPECT_RECONNECT") == "1" {
					t.Fatalf("programs do not work after a backend restart: %v %v", err, res)
				}
				t.Skipf("KNOWN LIMITATION: after a backend restart new programs do not work (%s chardev; see docs/RELIABILITY.md); VGPU_EXPECT_RECONNECT=1 makes this a failure", mode)
			}
			waitFor(t, 30*time.Second, "device memory released", func() bool { m, n := h.devMem(); return m == 0 && n == 0 })
		})
	}
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
