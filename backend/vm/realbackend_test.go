package vm_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/transport"
	"github.com/vgpu-project/vgpu/backend/vhostuser"
	"github.com/vgpu-project/vgpu/backend/vm"
	"github.com/vgpu-project/vgpu/vm-images/testguest"
)

// TestAttachRealBackend hot-plugs a vGPU served by the real backend
// (vhostuser.ServeVsock) into a running test guest; the guest then connects
// from a privileged port to the service port and exchanges a message with
// the host.
func TestAttachRealBackend(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("the guest side uses the host's /usr/bin/python3 (AF_VSOCK)")
	}
	img := vm.TestImage(t, testguest.Options{})
	log := vm.TestLogger(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sock := filepath.Join(t.TempDir(), "vgpu.sock")
	vs, err := vhostuser.ServeVsock(ctx, vhostuser.VsockConfig{SocketPath: sock, GuestCID: 5, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer vs.Close()
	served := make(chan error, 1)
	go func() {
		c, err := vs.Listener.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil {
			served <- err
			return
		}
		_, err = c.Write([]byte("pong:" + string(buf)))
		served <- err
	}()

	script := fmt.Sprintf(`for i in $(seq 1 600); do grep -q 0x0013 /sys/bus/virtio/devices/*/device 2>/dev/null && break; sleep 0.1; done
exec /usr/bin/python3 -c '
import socket, time
for i in range(100):
    try:
        s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
        s.bind((socket.VMADDR_CID_ANY, 1000))
        s.connect((2, %d))
        break
    except OSError as e:
        err = e
        s.close()
        time.sleep(0.1)
else:
    raise err
s.sendall(b"ping")
print(s.recv(16).decode())
'`, transport.DefaultPort)
	var con vm.SyncBuffer
	m, err := vm.Start(ctx, vm.Config{Image: img, Command: []string{"/bin/sh", "-c", script}, Console: &con, Timeout: 3 * time.Minute, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Started():
	case <-m.Exited():
	case <-ctx.Done():
	}
	if err := vm.AttachClient(ctx, m.QMP(), vm.AttachConfig{VhostUserSocket: sock, Logger: log}); err != nil {
		m.Kill()
		m.Wait(ctx)
		t.Fatalf("AttachClient: %v", err)
	}
	res, err := m.Wait(ctx)
	t.Logf("console:\n%s", con.String())
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitStatus != 0 || !strings.Contains(con.String(), "pong:ping") {
		t.Fatalf("guest status %d; want the host's pong on the console", res.ExitStatus)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("host side: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("host side never finished")
	}
}
