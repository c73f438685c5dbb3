package deviceplugin

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/backend/engine"
	"github.com/vgpu-project/vgpu/backend/front"
	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/backend/server"
	"github.com/vgpu-project/vgpu/protocol"
)

// fakeKubelet is the kubelet's side of device-plugin registration, served
// over the real v1beta1 gRPC API on kubelet.sock in a temporary folder.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	reqs chan *pluginapi.RegisterRequest
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.reqs <- r
	return &pluginapi.Empty{}, nil
}

func startKubelet(t *testing.T, dir string) *fakeKubelet {
	ln, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeKubelet{reqs: make(chan *pluginapi.RegisterRequest, 4)}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, k)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return k
}

// backend is a real vgpu backend on the sim device: status socket and
// front socket, as "vgpu serve --device sim --front-socket F
// --status-socket S" runs it.
type backend struct {
	front, status string
	fronts        *front.Listener
	stopStatus    context.CancelFunc
}

func startBackend(t *testing.T, dir string, log hclog.Logger) *backend {
	drv, err := sim.New(sim.Config{Devices: 2, MemBytes: 8 << 30, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	b := &backend{front: filepath.Join(dir, "front.sock"), status: filepath.Join(dir, "status.sock")}
	b.fronts, err = front.Listen(b.front, front.ListenOptions{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.fronts.Close() })
	srv, err := server.New(server.Config{
		Driver: drv, MemLimit: 4 << 30, Engine: engine.Auto, Limits: protocol.DefaultLimits, Logger: log,
		FrontStatus: func() any { return b.fronts.Fronts() },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go srv.Serve(ctx, b.fronts)
	sl, err := server.ListenStatus(b.status)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	b.stopStatus = stop
	go srv.ServeStatus(sctx, sl)
	return b
}

func recvDevices(t *testing.T, ch <-chan *pluginapi.ListAndWatchResponse) []*pluginapi.Device {
	t.Helper()
	select {
	case r, ok := <-ch:
		if !ok {
			t.Fatal("ListAndWatch ended")
		}
		return r.Devices
	case <-time.After(20 * time.Second):
		t.Fatal("no ListAndWatch update in 20 s")
	}
	return nil
}

func TestPluginWithKubelet(t *testing.T) {
	dir := t.TempDir()
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr})
	kubelet := startKubelet(t, dir)
	be := startBackend(t, dir, log)

	p, err := Start(context.Background(), Config{
		KubeletDir: dir, HostDir: filepath.Join(dir, "host"), Backend: be.front, StatusSocket: be.status,
		MemLimit: 4 << 30, QEMUUID: os.Getuid(), QEMUGID: os.Getgid(), Interval: 20 * time.Millisecond, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	var reg *pluginapi.RegisterRequest
	select {
	case reg = <-kubelet.reqs:
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin did not register")
	}
	if reg.Version != pluginapi.Version || reg.ResourceName != ResourceName || reg.Endpoint != DefaultSocket {
		t.Fatalf("registration %+v", reg)
	}

	// The kubelet's side: dial the plugin where it said, as the kubelet does.
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, reg.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dp := pluginapi.NewDevicePluginClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := dp.GetDevicePluginOptions(ctx, &pluginapi.Empty{}); err != nil {
		t.Fatal(err)
	}
	stream, err := dp.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	updates := make(chan *pluginapi.ListAndWatchResponse)
	go func() {
		defer close(updates)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			updates <- r
		}
	}()
	// 2 sim devices x 8 GiB under a 4 GiB cap per VM: 4 vGPUs.
	devs := recvDevices(t, updates)
	if len(devs) != 4 {
		t.Fatalf("%d devices, want 4: %v", len(devs), devs)
	}
	for i, d := range devs {
		if d.ID != "vgpu-"+string(rune('0'+i)) || d.Health != pluginapi.Healthy {
			t.Fatalf("device %d: %v", i, d)
		}
	}

	resp, err := dp.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"vgpu-1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	cr := resp.ContainerResponses[0]
	host := filepath.Join(dir, "host", "vgpu-1")
	if len(cr.Mounts) != 1 || cr.Mounts[0].ContainerPath != ContainerDir || cr.Mounts[0].HostPath != host || cr.Mounts[0].ReadOnly {
		t.Fatalf("mounts %v", cr.Mounts)
	}
	if cr.Envs[EnvSocket] != ContainerSocket || cr.Envs[EnvDevice] != "vgpu-1" {
		t.Fatalf("envs %v", cr.Envs)
	}
	sock := filepath.Join(host, filepath.Base(ContainerSocket))
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Fatalf("the allocated socket: %v, %v (want a socket, mode 0660)", fi, err)
	}
	c, err := net.Dial("unix", sock) // QEMU's end: the front accepts
	if err != nil {
		t.Fatalf("connecting to the vGPU socket: %v", err)
	}
	c.Close()
	testwait.For(t, 10*time.Second, "the device's front at the backend", func() bool {
		for _, f := range be.fronts.Fronts() {
			if f.VM == "k8s/vgpu-1" {
				return true
			}
		}
		return false
	})
	// Allocating it again (a later VM on the same device) reuses the front.
	if _, err := dp.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"vgpu-1"}}}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ids  []string
		want string
	}{
		{[]string{"vgpu-9"}, `unknown device "vgpu-9"`},
		{[]string{"vgpu-0", "vgpu-2"}, "asked for 2"},
		{nil, "asked for 0"},
	} {
		_, err := dp.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: tc.ids}}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Allocate(%v): %v, want %q", tc.ids, err, tc.want)
		}
	}

	// The backend stops answering: the same devices, unhealthy.
	be.stopStatus()
	devs = recvDevices(t, updates)
	if len(devs) != 4 || devs[0].Health != pluginapi.Unhealthy {
		t.Fatalf("after the backend went away: %v", devs)
	}

	// The kubelet restarts (it deletes the plugins' sockets): the plugin
	// serves and registers again.
	if err := os.Remove(filepath.Join(dir, reg.Endpoint)); err != nil {
		t.Fatal(err)
	}
	select {
	case reg = <-kubelet.reqs:
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin did not register again after its socket was deleted")
	}
	testwait.For(t, 10*time.Second, "the plugin's new socket", func() bool {
		_, err := os.Stat(filepath.Join(dir, reg.Endpoint))
		return err == nil
	})
}

func TestCapacity(t *testing.T) {
	st := func(mems ...uint64) *server.Status {
		s := &server.Status{}
		for _, m := range mems {
			s.Devices = append(s.Devices, server.DeviceStatus{MemTotal: m})
		}
		return s
	}
	for _, tc := range []struct {
		st    *server.Status
		limit uint64
		want  int
	}{
		{st(80 << 30), 16 << 30, 5},
		{st(80<<30, 80<<30), 12 << 30, 13}, // all GPUs together, rounded down
		{st(), 1 << 30, 0},
		{st(8 << 30), 16 << 30, 0},
		{st(80 << 30), 1 << 20, MaxDevices},
	} {
		if got := capacity(tc.st, tc.limit); got != tc.want {
			t.Errorf("capacity(%d devices, limit %d) = %d, want %d", len(tc.st.Devices), tc.limit, got, tc.want)
		}
	}
}

func TestConfigNeedsMemLimit(t *testing.T) {
	_, err := Start(context.Background(), Config{KubeletDir: t.TempDir(), Backend: "/f", StatusSocket: "/s"})
	if err == nil || !strings.Contains(err.Error(), "mem-limit") {
		t.Fatalf("err %v, want one naming mem-limit", err)
	}
}
