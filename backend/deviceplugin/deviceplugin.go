// Package deviceplugin is vgpu's Kubernetes device plugin (kubelet
// device-plugin API v1beta1, k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1).
//
// It advertises the node's vGPUs as the extended resource ResourceName:
// (total GPU memory the backend reports) / (the per-VM --mem-limit) of them,
// named vgpu-0, vgpu-1, ..., healthy while the backend's status socket
// answers. When the kubelet allocates one to a container (a KubeVirt
// virt-launcher pod's compute container, where QEMU runs), the plugin starts
// a "vgpu front" for that device in this process -- a vhost-user-vsock
// socket in HostDir/<id>/vgpu.sock forwarding to the backend's front socket,
// so the VM keeps its device across backend restarts -- and mounts HostDir/<id>
// at ContainerDir. The KubeVirt hook (package kubevirthook) points the
// domain's vhost-user-vsock device at ContainerSocket.
//
// The plugin registers with the kubelet (Registration.Register on
// KubeletDir/kubelet.sock) and serves DevicePlugin on KubeletDir/<Socket>.
// The kubelet deletes plugin sockets when it restarts: the plugin notices
// its socket is gone and serves and registers again.
//
// Trust: the kubelet is trusted (it is the node's); the backend's status is
// parsed, not trusted to be sensible (no devices or no memory means no
// vGPUs). Device ids in Allocate are checked against the advertised ones.
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpu-project/vgpu/backend/front"
	"github.com/vgpu-project/vgpu/backend/server"
)

// Defaults for Config.
const (
	DefaultSocket   = "vgpu.sock"
	DefaultHostDir  = "/run/vgpu/kubevirt"
	DefaultInterval = 10 * time.Second
	// DefaultQEMUID is the uid and gid of QEMU in KubeVirt's virt-launcher
	// (user "qemu", 107); the allocated socket is owned by it, mode 0660.
	DefaultQEMUID = 107
	// MaxDevices bounds the advertised count (a tiny --mem-limit would
	// otherwise advertise thousands).
	MaxDevices = 256
)

// Config configures the plugin.
type Config struct {
	// KubeletDir holds the kubelet's registration socket (kubelet.sock) and
	// this plugin's; default pluginapi.DevicePluginPath.
	KubeletDir string
	Socket     string // this plugin's socket name in KubeletDir; default DefaultSocket
	// HostDir holds one folder per allocated device with its front's
	// socket; default DefaultHostDir.
	HostDir string
	// Backend is the backend's front socket (vgpu serve --front-socket);
	// StatusSocket its status socket (vgpu serve --status-socket).
	Backend, StatusSocket string
	// MemLimit is the backend's per-VM device memory cap (vgpu serve
	// --mem-limit); it must be set: each vGPU is that much GPU memory.
	MemLimit uint64
	// QEMUUID and QEMUGID own the allocated sockets (mode 0660); -1 keeps
	// this process's.
	QEMUUID, QEMUGID int
	// Interval is how often the backend's health and the plugin's socket
	// are checked; default DefaultInterval.
	Interval time.Duration
	Logger   hclog.Logger
}

func (c *Config) defaults() error {
	if c.KubeletDir == "" {
		c.KubeletDir = pluginapi.DevicePluginPath
	}
	if c.Socket == "" {
		c.Socket = DefaultSocket
	}
	if c.HostDir == "" {
		c.HostDir = DefaultHostDir
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	switch {
	case c.MemLimit == 0:
		return errors.New("deviceplugin: no per-VM memory cap: set mem-limit in the backend's configuration; each vGPU the plugin advertises is that much GPU memory")
	case c.Backend == "":
		return errors.New("deviceplugin: no backend front socket (vgpu serve --front-socket)")
	case c.StatusSocket == "":
		return errors.New("deviceplugin: no backend status socket (vgpu serve --status-socket)")
	}
	return nil
}

// Plugin is a running device plugin.
type Plugin struct {
	cfg Config
	log hclog.Logger

	mu      sync.Mutex
	devices []*pluginapi.Device // the advertised list, replaced on change
	changed chan struct{}       // closed and replaced when devices change
	fronts  map[string]*front.Front
	srv     *grpc.Server

	done chan struct{}
	wg   sync.WaitGroup
}

// Start checks the backend, serves the plugin and registers it with the
// kubelet; it keeps both up (health, kubelet restarts) until ctx ends or
// Close.
func Start(ctx context.Context, cfg Config) (*Plugin, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	p := &Plugin{cfg: cfg, log: cfg.Logger.Named("deviceplugin"), changed: make(chan struct{}), fronts: map[string]*front.Front{}, done: make(chan struct{})}
	if err := os.MkdirAll(cfg.HostDir, 0o755); err != nil {
		return nil, fmt.Errorf("deviceplugin: %w", err)
	}
	p.refresh()
	if err := p.serve(); err != nil {
		return nil, err
	}
	if err := p.register(ctx); err != nil {
		p.stopServer()
		return nil, err
	}
	p.wg.Add(1)
	go p.watch(ctx)
	return p, nil
}

// Close stops the plugin and every front it started (their VMs lose the
// vGPU: QEMU 7.2 cannot reconnect a vhost-user device).
func (p *Plugin) Close() {
	select {
	case <-p.done:
	default:
		close(p.done)
	}
	p.wg.Wait()
	p.stopServer()
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, f := range p.fronts {
		f.Close()
		delete(p.fronts, id)
	}
}

func (p *Plugin) socketPath() string { return filepath.Join(p.cfg.KubeletDir, p.cfg.Socket) }

// serve listens on the plugin's socket (replacing a stale one).
func (p *Plugin) serve() error {
	path := p.socketPath()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("deviceplugin: removing the old socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("deviceplugin: %w", err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, &service{p: p})
	p.mu.Lock()
	p.srv = srv
	p.mu.Unlock()
	go srv.Serve(ln)
	return nil
}

func (p *Plugin) stopServer() {
	p.mu.Lock()
	srv := p.srv
	p.srv = nil
	p.mu.Unlock()
	if srv != nil {
		srv.Stop() // ends ListAndWatch streams too
	}
}

// register announces the plugin to the kubelet.
func (p *Plugin) register(ctx context.Context) error {
	kubelet := filepath.Join(p.cfg.KubeletDir, filepath.Base(pluginapi.KubeletSocket))
	conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("deviceplugin: kubelet socket %s: %w", kubelet, err)
	}
	defer conn.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(rctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     p.cfg.Socket,
		ResourceName: ResourceName,
		Options:      &pluginapi.DevicePluginOptions{},
	}, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("deviceplugin: registering %s with the kubelet at %s: %w", ResourceName, kubelet, err)
	}
	p.log.Info("registered with the kubelet", "resource", ResourceName, "socket", p.socketPath())
	return nil
}

// watch re-checks the backend and the plugin's socket every Interval.
func (p *Plugin) watch(ctx context.Context) {
	defer p.wg.Done()
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.done:
			return
		case <-t.C:
		}
		p.refresh()
		if _, err := os.Stat(p.socketPath()); errors.Is(err, os.ErrNotExist) {
			p.log.Info("the plugin's socket is gone (the kubelet restarted): serving and registering again")
			p.stopServer()
			if err := p.serve(); err != nil {
				p.log.Error("serving again failed", "err", err)
				continue
			}
			if err := p.register(ctx); err != nil {
				p.log.Error("registering again failed", "err", err)
				p.stopServer() // the next tick tries again
			}
		}
	}
}

// capacity is how many vGPUs st holds under the memory cap.
func capacity(st *server.Status, memLimit uint64) int {
	var total uint64
	for _, d := range st.Devices {
		total += d.MemTotal
	}
	n := total / memLimit
	if n > MaxDevices {
		n = MaxDevices
	}
	return int(n)
}

// refresh reads the backend's status and publishes the device list when it
// changed. An unreachable backend keeps the devices but marks them
// unhealthy, so that running VMs keep their allocations and new ones wait.
func (p *Plugin) refresh() {
	st, err := server.ReadStatus(p.cfg.StatusSocket, 5*time.Second)
	p.mu.Lock()
	defer p.mu.Unlock()
	health, n := pluginapi.Healthy, len(p.devices)
	if err != nil {
		health = pluginapi.Unhealthy
		p.log.Warn("the backend does not answer: vGPUs unhealthy", "err", err)
	} else {
		n = capacity(st, p.cfg.MemLimit)
	}
	same := len(p.devices) == n
	for i := 0; same && i < n; i++ {
		same = p.devices[i].Health == health
	}
	if same {
		return
	}
	devs := make([]*pluginapi.Device, n)
	for i := range devs {
		devs[i] = &pluginapi.Device{ID: fmt.Sprintf("vgpu-%d", i), Health: health}
	}
	p.log.Info("vGPUs", "count", n, "health", health)
	p.devices = devs
	close(p.changed)
	p.changed = make(chan struct{})
}

// snapshot returns the current list and the channel closed on its change.
func (p *Plugin) snapshot() ([]*pluginapi.Device, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.devices, p.changed
}

// allocate starts (or keeps) the front of device id and returns the
// container's view of it.
func (p *Plugin) allocate(id string) (*pluginapi.ContainerAllocateResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	known := false
	for _, d := range p.devices {
		known = known || d.ID == id
	}
	if !known {
		return nil, fmt.Errorf("deviceplugin: unknown device %q", id)
	}
	dir := filepath.Join(p.cfg.HostDir, id)
	sock := filepath.Join(dir, filepath.Base(ContainerSocket))
	if _, ok := p.fronts[id]; !ok {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("deviceplugin: %w", err)
		}
		f, err := front.Start(context.Background(), front.Config{
			SocketPath: sock, Backend: p.cfg.Backend, VM: "k8s/" + id, Logger: p.log.Named(id),
		})
		if err != nil {
			return nil, fmt.Errorf("deviceplugin: starting the front of %s: %w", id, err)
		}
		if err := p.own(sock); err != nil {
			f.Close()
			return nil, err
		}
		p.fronts[id] = f
		p.log.Info("vGPU allocated", "device", id, "socket", sock)
	}
	return &pluginapi.ContainerAllocateResponse{
		Mounts: []*pluginapi.Mount{{ContainerPath: ContainerDir, HostPath: dir}},
		Envs:   map[string]string{EnvSocket: ContainerSocket, EnvDevice: id},
	}, nil
}

// own gives the socket to QEMU's user, mode 0660.
func (p *Plugin) own(sock string) error {
	if p.cfg.QEMUUID >= 0 || p.cfg.QEMUGID >= 0 {
		if err := os.Chown(sock, p.cfg.QEMUUID, p.cfg.QEMUGID); err != nil {
			return fmt.Errorf("deviceplugin: giving %s to QEMU's user %d:%d: %w", sock, p.cfg.QEMUUID, p.cfg.QEMUGID, err)
		}
	}
	if err := os.Chmod(sock, 0o660); err != nil {
		return fmt.Errorf("deviceplugin: %w", err)
	}
	return nil
}
