package vhostuser

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/transport"
	"github.com/vgpu-project/vgpu/backend/vsock"
)

// VsockConfig configures ServeVsock.
type VsockConfig struct {
	SocketPath string // vhost-user socket QEMU connects to
	GuestCID   uint64 // the guest's CID (default 3)
	Port       uint32 // service port (default transport.DefaultPort)
	// AllowUnprivileged accepts guest source ports >= 1024 (tests only:
	// the vGPU service must refuse them, see transport.PrivilegedPort).
	AllowUnprivileged bool
	BufAlloc          uint32       // per-connection receive buffer (default vsock.DefaultBufAlloc)
	Logger            hclog.Logger // nil: discard
}

// VsockVM is one VM served over vhost-user-vsock.
type VsockVM struct {
	Server   *Server
	Device   *vsock.Device
	Listener *vsock.Listener
	done     chan error
}

// ServeVsock creates the socket, a vsock device and a listener for the
// service port, and serves QEMU in the background until ctx ends or Close;
// then the listener is closed too. The listener outlives QEMU reconnects.
func ServeVsock(ctx context.Context, cfg VsockConfig) (*VsockVM, error) {
	if cfg.GuestCID == 0 {
		cfg.GuestCID = 3
	}
	if cfg.Port == 0 {
		cfg.Port = transport.DefaultPort
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	dev, err := vsock.NewDevice(vsock.Config{GuestCID: cfg.GuestCID, VM: cfg.SocketPath, Logger: log.Named("vsock"), BufAlloc: cfg.BufAlloc})
	if err != nil {
		return nil, err
	}
	l, err := dev.Listen(cfg.Port, vsock.ListenOptions{RequirePrivileged: !cfg.AllowUnprivileged})
	if err != nil {
		return nil, err
	}
	srv, err := Listen(cfg.SocketPath, dev, log.Named("vhost-user"))
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("serve vsock for CID %d: %w", cfg.GuestCID, err)
	}
	vm := &VsockVM{Server: srv, Device: dev, Listener: l, done: make(chan error, 1)}
	go func() {
		err := srv.Serve(ctx)
		l.Close() // Accept returns net.ErrClosed once serving ends
		vm.done <- err
	}()
	return vm, nil
}

// Close stops serving QEMU, resets the VM's connections and closes the
// listener; it returns Serve's error.
func (vm *VsockVM) Close() error {
	vm.Server.Close()
	err := <-vm.done
	vm.done <- err
	vm.Listener.Close()
	return err
}

// Wait blocks until serving ends (ctx cancelled or Close).
func (vm *VsockVM) Wait() error {
	err := <-vm.done
	vm.done <- err
	return err
}
