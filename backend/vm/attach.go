package vm

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/qmp"
)

// AttachConfig says which vGPU backend to plug into which VM.
type AttachConfig struct {
	// QMPSocket is the VM's QMP unix socket (-qmp unix:PATH,server=on,wait=off).
	QMPSocket string
	// LibvirtDomain, instead of QMPSocket, names a running libvirt domain:
	// the commands go through libvirtd's QEMU monitor passthrough.
	LibvirtDomain string
	// LibvirtSocket is libvirtd's socket (default qmp.DefaultLibvirtSocket).
	LibvirtSocket string
	// VhostUserSocket is the listening vhost-user-vsock backend.
	VhostUserSocket string
	// ID names the chardev; the device is ID+"-dev". Default "vgpu0".
	ID string
	// Bus is the PCIe port to plug into; default HotplugPort
	// (LibvirtHotplugPort for a libvirt domain).
	Bus    string
	Logger hclog.Logger
}

// Errors of Attach.
var (
	// ErrRAMNotShared: vhost-user needs guest RAM in a shareable fd.
	ErrRAMNotShared = errors.New("vm: the VM's RAM is not shareable, so a vhost-user device cannot map it")
	// ErrNoHotplugPort: q35's root bus takes no hot-plugged devices.
	ErrNoHotplugPort = errors.New("vm: the VM has no free PCIe hot-plug port for the vGPU")
)

// sharedRAMHint is the QEMU option that ErrRAMNotShared asks for.
const sharedRAMHint = "start QEMU with -object memory-backend-memfd,id=mem,size=<RAM size>,share=on -machine memory-backend=mem (vgpu qemu-args prints the options)"

// CheckSharedRAM returns nil when all of the VM's RAM lies in shareable
// memfd or file backends, and an error wrapping ErrRAMNotShared that names
// the missing option otherwise.
func CheckSharedRAM(c *qmp.Client) error {
	ms, err := c.Memdevs()
	if err != nil {
		return fmt.Errorf("vm: listing memory backends: %w", err)
	}
	if len(ms) == 0 {
		return fmt.Errorf("%w: it has no memory backend objects; %s", ErrRAMNotShared, sharedRAMHint)
	}
	for _, m := range ms {
		switch {
		case !m.Share:
			return fmt.Errorf("%w: memory backend %q has share=off; %s", ErrRAMNotShared, m.ID, sharedRAMHint)
		case m.Type != "" && m.Type != "memory-backend-memfd" && m.Type != "memory-backend-file":
			return fmt.Errorf("%w: memory backend %q is a %s, which has no fd to pass; %s", ErrRAMNotShared, m.ID, m.Type, sharedRAMHint)
		}
	}
	return nil
}

// Attach connects to the VM's QMP socket, or to libvirt for a libvirt
// domain, and hot-plugs the vGPU (see AttachClient).
func Attach(ctx context.Context, cfg AttachConfig) error {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var (
		c   *qmp.Client
		err error
	)
	switch {
	case cfg.QMPSocket != "" && cfg.LibvirtDomain != "":
		return errors.New("vm: attach: give a QMP socket or a libvirt domain, not both")
	case cfg.LibvirtDomain != "":
		if cfg.Bus == "" {
			cfg.Bus = LibvirtHotplugPort
		}
		c, err = qmp.DialLibvirt(dctx, cfg.LibvirtSocket, cfg.LibvirtDomain, cfg.Logger)
	case cfg.QMPSocket != "":
		c, err = qmp.Dial(dctx, cfg.QMPSocket, cfg.Logger)
	default:
		return errors.New("vm: attach: no QMP socket: start QEMU with -qmp unix:PATH,server=on,wait=off and pass --qmp PATH (or --libvirt DOMAIN for a libvirt domain)")
	}
	if err != nil {
		return err
	}
	defer c.Close()
	return AttachClient(ctx, c, cfg)
}

// AttachClient hot-plugs a vhost-user-vsock device served by
// cfg.VhostUserSocket into the VM behind c: it checks that guest RAM is
// shareable, adds a client-mode socket chardev (chardev-add) and the
// vhost-user-vsock-pci device on the hot-plug port (device_add). On failure
// it removes what it added. The guest CID is the backend's to report (QEMU's
// vhost-user-vsock reads it from the backend's config space); it is not a
// device property.
func AttachClient(ctx context.Context, c *qmp.Client, cfg AttachConfig) (err error) {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	log = log.Named("attach")
	if cfg.VhostUserSocket == "" {
		return errors.New("vm: attach: no vhost-user socket: pass --vhost-user-socket PATH of a running vgpu backend")
	}
	sock, err := filepath.Abs(cfg.VhostUserSocket)
	if err != nil {
		return fmt.Errorf("vm: attach: %w", err)
	}
	id := cfg.ID
	if id == "" {
		id = "vgpu0"
	}
	bus := cfg.Bus
	if bus == "" {
		bus = HotplugPort
	}
	if err := CheckSharedRAM(c); err != nil {
		if cfg.LibvirtDomain != "" {
			return fmt.Errorf("%w (libvirt: %s)", err, LibvirtSharedRAMXML)
		}
		return err
	}
	var typ string
	if err := c.QomGet("/machine/peripheral/"+bus, "type", &typ); err != nil {
		if cfg.LibvirtDomain != "" {
			return fmt.Errorf("%w: no device %q (%v): give the domain %s (vgpu libvirt-xml --hotplug prints it)", ErrNoHotplugPort, bus, err, LibvirtHotplugPortXML)
		}
		return fmt.Errorf("%w: no device %q (%v): add -device pcie-root-port,id=%s,bus=pcie.0,chassis=200,slot=200 to the QEMU command line", ErrNoHotplugPort, bus, err, bus)
	}
	if err := c.ChardevAddSocket(id, sock); err != nil {
		return fmt.Errorf("vm: attach: connecting QEMU to the backend at %s: %w (is the vgpu backend listening there?)", sock, err)
	}
	defer func() {
		if err != nil {
			c.ChardevRemove(id)
		}
	}()
	if err := c.DeviceAdd("vhost-user-vsock-pci", id+"-dev", map[string]any{"chardev": id, "bus": bus}); err != nil {
		if strings.Contains(err.Error(), "is full") || strings.Contains(err.Error(), "in use") {
			return fmt.Errorf("%w: %s is taken (%v): detach the old device or add another pcie-root-port and pass its id", ErrNoHotplugPort, bus, err)
		}
		return fmt.Errorf("vm: attach: device_add vhost-user-vsock-pci: %w", err)
	}
	log.Info("vGPU attached", "device", id+"-dev", "bus", bus, "socket", sock)
	return nil
}
