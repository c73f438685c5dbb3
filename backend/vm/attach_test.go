package vm

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/qmp"
	"github.com/vgpu-project/vgpu/vm-images/testguest"
)

// bareQEMU starts a paused QEMU without a guest (-S) for QMP-only tests.
func bareQEMU(t *testing.T, args ...string) *qmp.Client {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		testImage(t, testguest.Options{}) // skips or fails as configured
	}
	sock := filepath.Join(t.TempDir(), "qmp.sock")
	a := append([]string{"-S", "-nodefaults", "-display", "none", "-nic", "none", "-accel", "tcg"}, QMPArgs(sock)...)
	a = append(a, args...)
	cmd := exec.Command("qemu-system-x86_64", a...)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := qmp.Dial(ctx, sock, testLogger(t))
	if err != nil {
		t.Fatalf("%v; qemu: %s", err, stderr.String())
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCheckSharedRAM(t *testing.T) {
	tests := []struct {
		name string
		args []string
		ok   bool
	}{
		{"plain -m", []string{"-machine", "q35", "-m", "256M"}, false},
		{"memfd share=off", []string{"-machine", "q35,memory-backend=mem", "-m", "256M", "-object", "memory-backend-memfd,id=mem,size=256M,share=off"}, false},
		{"memfd default share", []string{"-machine", "q35,memory-backend=mem", "-m", "256M", "-object", "memory-backend-memfd,id=mem,size=256M"}, true},
		{"ram share=on", []string{"-machine", "q35,memory-backend=mem", "-m", "256M", "-object", "memory-backend-ram,id=mem,size=256M,share=on"}, false},
		{"memfd share=on", MemoryArgs(256 << 20), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := bareQEMU(t, tt.args...)
			err := CheckSharedRAM(c)
			if tt.ok && err != nil {
				t.Fatalf("CheckSharedRAM: %v", err)
			}
			if !tt.ok {
				if !errors.Is(err, ErrRAMNotShared) || !strings.Contains(err.Error(), "memory-backend-memfd,id=mem") {
					t.Fatalf("CheckSharedRAM: %v, want ErrRAMNotShared naming the option", err)
				}
				t.Logf("refused: %v", err)
			}
		})
	}
}

func TestAttachRefusesUnsharedRAM(t *testing.T) {
	c := bareQEMU(t, append([]string{"-machine", "q35", "-m", "256M"}, HotplugPortArgs()...)...)
	peer := newFakeVhostUser(t, 3)
	err := AttachClient(context.Background(), c, AttachConfig{VhostUserSocket: peer.path, Logger: testLogger(t)})
	if !errors.Is(err, ErrRAMNotShared) {
		t.Fatalf("AttachClient: %v, want ErrRAMNotShared", err)
	}
}

func TestAttachNeedsHotplugPort(t *testing.T) {
	c := bareQEMU(t, MemoryArgs(256<<20)...)
	peer := newFakeVhostUser(t, 3)
	err := AttachClient(context.Background(), c, AttachConfig{VhostUserSocket: peer.path, Logger: testLogger(t)})
	if !errors.Is(err, ErrNoHotplugPort) {
		t.Fatalf("AttachClient: %v, want ErrNoHotplugPort", err)
	}
}

func TestAttachAccepted(t *testing.T) {
	c := bareQEMU(t, append(MemoryArgs(256<<20), HotplugPortArgs()...)...)
	peer := newFakeVhostUser(t, 3)
	if err := AttachClient(context.Background(), c, AttachConfig{VhostUserSocket: peer.path, Logger: testLogger(t)}); err != nil {
		t.Fatalf("AttachClient: %v", err)
	}
	var typ string
	if err := c.QomGet("/machine/peripheral/vgpu0-dev", "type", &typ); err != nil || typ != "vhost-user-vsock-pci" {
		t.Fatalf("device after attach: %q, %v", typ, err)
	}
	t.Logf("vhost-user requests seen: %v", peer.requests())
}

// TestAttachGuestSeesDevice hot-plugs a vGPU into a running test guest and
// waits for the guest to find a virtio device with id 0x0013 (vsock).
func TestAttachGuestSeesDevice(t *testing.T) {
	img := testImage(t, testguest.Options{})
	peer := newFakeVhostUser(t, 3)
	var con syncBuffer
	script := `for i in $(seq 1 600); do
  for d in /sys/bus/virtio/devices/*; do
    [ "$(cat $d/device 2>/dev/null)" = 0x0013 ] && { echo "found vsock at $d"; exit 0; }
  done
  sleep 0.1
done
echo "no vsock device"; ls -l /sys/bus/virtio/devices/; exit 1`
	m, err := Start(context.Background(), Config{
		Image: img, Command: []string{"/bin/sh", "-c", script}, Console: &con,
		Timeout: 3 * time.Minute, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	select {
	case <-m.Started():
	case <-m.Exited():
	case <-time.After(2 * time.Minute):
	}
	if err := AttachClient(context.Background(), m.QMP(), AttachConfig{VhostUserSocket: peer.path, Logger: testLogger(t)}); err != nil {
		m.Kill()
		m.Wait(context.Background())
		t.Fatalf("AttachClient: %v\nconsole:\n%s", err, con.String())
	}
	res, err := m.Wait(context.Background())
	t.Logf("console:\n%s", con.String())
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if res.ExitStatus != 0 || !strings.Contains(con.String(), "found vsock at /sys/bus/virtio/devices/") {
		t.Fatalf("guest did not see the hot-plugged vsock device (status %d)", res.ExitStatus)
	}
	t.Logf("vhost-user requests seen: %v", peer.requests())
}

// TestRunWithVGPUSocket boots with the vGPU device present from the start.
func TestRunWithVGPUSocket(t *testing.T) {
	img := testImage(t, testguest.Options{})
	peer := newFakeVhostUser(t, 3)
	var con syncBuffer
	res, err := Run(context.Background(), Config{
		Image:      img,
		Command:    []string{"/bin/sh", "-c", `grep -l 0x0013 /sys/bus/virtio/devices/*/device`},
		VGPUSocket: peer.path, Console: &con, Timeout: 2 * time.Minute, Logger: testLogger(t),
	})
	if err != nil {
		t.Fatalf("Run: %v\nconsole:\n%s", err, con.String())
	}
	if res.ExitStatus != 0 {
		t.Fatalf("no vsock device in the guest (status %d); console:\n%s", res.ExitStatus, con.String())
	}
}
