package qmp

import (
	"context"
	"fmt"
	"net"

	"github.com/digitalocean/go-qemu/qmp"
	"github.com/hashicorp/go-hclog"
)

// DefaultLibvirtSocket is libvirtd's read-write socket for qemu:///system.
const DefaultLibvirtSocket = "/run/libvirt/libvirt-sock"

// DialLibvirt connects to libvirtd on its unix socket (empty: the system
// daemon's) and returns a Client whose commands reach domain's QEMU through
// libvirt's monitor passthrough (what "virsh qemu-monitor-command" does).
// libvirt marks the domain "tainted: custom-monitor"; devices added this way
// are not in the domain's XML (they go away when the domain stops).
func DialLibvirt(ctx context.Context, socket, domain string, log hclog.Logger) (*Client, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if socket == "" {
		socket = DefaultLibvirtSocket
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("qmp: connecting to libvirtd at %s (is libvirtd running, and may this user use it?): %w", socket, err)
	}
	mon := qmp.NewLibvirtRPCMonitor(domain, conn)
	if err := mon.Connect(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("qmp: libvirt handshake on %s: %w", socket, err)
	}
	c := newClient(mon, log)
	var v struct {
		QEMU struct{ Major, Minor, Micro int } `json:"qemu"`
	}
	if err := c.Run("query-version", nil, &v); err != nil {
		c.Close()
		return nil, fmt.Errorf("qmp: libvirt domain %q: %w (virsh list --all shows the running domains)", domain, err)
	}
	c.version = fmt.Sprintf("%d.%d.%d", v.QEMU.Major, v.QEMU.Minor, v.QEMU.Micro)
	return c, nil
}
