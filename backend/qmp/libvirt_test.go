package qmp

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/digitalocean/go-qemu/qmp"
	"github.com/hashicorp/go-hclog"
)

// passthroughMonitor answers like libvirt's QEMU monitor passthrough: QEMU's
// reply, error replies included, comes back as data, never as an error.
type passthroughMonitor struct{ reply string }

func (m *passthroughMonitor) Connect() error    { return nil }
func (m *passthroughMonitor) Disconnect() error { return nil }
func (m *passthroughMonitor) Run([]byte) ([]byte, error) {
	return []byte(m.reply), nil
}
func (m *passthroughMonitor) Events(context.Context) (<-chan qmp.Event, error) {
	return nil, errors.New("no events over this monitor")
}

func TestRunErrorReplyAsData(t *testing.T) {
	c := newClient(&passthroughMonitor{reply: `{"id":"libvirt-9","error":{"class":"GenericError","desc":"Duplicate device ID 'vgpu0-dev'"}}`}, hclog.NewNullLogger())
	err := c.DeviceAdd("vhost-user-vsock-pci", "vgpu0-dev", nil)
	var ce *CommandError
	if !errors.As(err, &ce) || ce.Command != "device_add" || !strings.Contains(err.Error(), "Duplicate device ID") {
		t.Fatalf("err %v: want a device_add CommandError with QEMU's text", err)
	}
	var out []Memdev
	if err := c.Run("query-memdev", nil, &out); err == nil {
		t.Fatal("an error reply decoded as a result")
	}
}

func TestRunReturnAsData(t *testing.T) {
	c := newClient(&passthroughMonitor{reply: `{"return":[{"id":"pc.ram","size":1073741824,"share":true}],"id":"libvirt-7"}`}, hclog.NewNullLogger())
	var out []Memdev
	if err := c.Run("query-memdev", nil, &out); err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 || out[0].ID != "pc.ram" || !out[0].Share {
		t.Fatalf("got %+v", out)
	}
	// A monitor without events: WaitEvent ends at once instead of hanging.
	if _, _, err := c.WaitEvent(context.Background(), "DEVICE_DELETED", 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitEvent: %v, want ErrClosed", err)
	}
}
