// Package qmp drives one QEMU instance through its QMP socket, or through
// libvirt's QEMU monitor passthrough for a libvirt domain (DialLibvirt), on
// top of github.com/digitalocean/go-qemu/qmp: connecting with a deadline, status,
// power-down and quit, event collection, and the few commands the launcher
// and `vgpu attach` need (chardev-add, device_add, memory-backend queries).
//
// Trust: the QMP peer is the QEMU we started or the one the operator named;
// replies are decoded into typed structs and never trusted to be well formed.
package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/digitalocean/go-qemu/qmp"
	"github.com/hashicorp/go-hclog"
)

// Event is a QMP event (re-exported from go-qemu).
type Event = qmp.Event

// Client is one QMP connection. Its methods may be called from several
// goroutines; commands are serialised.
type Client struct {
	mon     qmp.Monitor
	version string // QEMU's version, when known at connection time
	log     hclog.Logger

	mu      sync.Mutex
	events  []Event
	changed chan struct{} // closed and replaced when an event arrives
	closed  bool
}

// ErrClosed is returned by WaitEvent once the connection is gone.
var ErrClosed = errors.New("qmp: connection closed")

// Dial connects to the QMP unix socket at path, retrying until QEMU has
// created and opened it or ctx ends, and does the capabilities handshake.
func Dial(ctx context.Context, path string, log hclog.Logger) (*Client, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	var lastErr error
	for {
		mon, err := qmp.NewSocketMonitor("unix", path, time.Second)
		if err == nil {
			if err = mon.Connect(); err == nil {
				return newClient(mon, log), nil
			}
			mon.Disconnect()
		}
		lastErr = err
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("qmp: connecting to %s: %w (last error: %v): is QEMU running with -qmp unix:%s,server=on,wait=off?", path, ctx.Err(), lastErr, path)
		case <-t.C:
		}
	}
}

func newClient(mon qmp.Monitor, log hclog.Logger) *Client {
	c := &Client{mon: mon, log: log.Named("qmp"), changed: make(chan struct{})}
	if sm, ok := mon.(*qmp.SocketMonitor); ok && sm.Version != nil {
		c.version = sm.Version.String()
	}
	ch, err := mon.Events(context.Background())
	if err != nil {
		c.log.Debug("no events", "err", err)
		c.closed = true
		return c
	}
	go func() {
		for e := range ch {
			c.log.Debug("event", "name", e.Event, "data", e.Data)
			c.mu.Lock()
			c.events = append(c.events, e)
			close(c.changed)
			c.changed = make(chan struct{})
			c.mu.Unlock()
		}
		c.mu.Lock()
		c.closed = true
		close(c.changed)
		c.mu.Unlock()
	}()
	return c
}

// Version is the QEMU version the monitor reported, e.g. "7.2.22".
func (c *Client) Version() string { return c.version }

// Close closes the connection.
func (c *Client) Close() error { return c.mon.Disconnect() }

// Events returns the events received so far.
func (c *Client) Events() []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Event(nil), c.events...)
}

// WaitEvent waits for an event named name that arrived at or after index
// from (a count from Events), and returns it with its index.
func (c *Client) WaitEvent(ctx context.Context, name string, from int) (Event, int, error) {
	for {
		c.mu.Lock()
		for i := from; i < len(c.events); i++ {
			if c.events[i].Event == name {
				e := c.events[i]
				c.mu.Unlock()
				return e, i, nil
			}
		}
		from = len(c.events)
		ch, closed := c.changed, c.closed
		c.mu.Unlock()
		if closed {
			return Event{}, 0, fmt.Errorf("qmp: waiting for event %s: %w", name, ErrClosed)
		}
		select {
		case <-ctx.Done():
			return Event{}, 0, fmt.Errorf("qmp: waiting for event %s: %w", name, ctx.Err())
		case <-ch:
		}
	}
}

// Run executes one QMP command with args (nil for none) and decodes its
// "return" member into out (nil to ignore it).
func (c *Client) Run(cmd string, args any, out any) error {
	req, err := json.Marshal(qmp.Command{Execute: cmd, Args: args})
	if err != nil {
		return fmt.Errorf("qmp: %s: encoding arguments: %w", cmd, err)
	}
	c.log.Trace("run", "cmd", string(req))
	raw, err := c.mon.Run(req)
	if err != nil {
		return &CommandError{Command: cmd, Err: err}
	}
	// The socket monitor turns an error reply into err; libvirt's monitor
	// passthrough hands it back as the reply.
	var r struct {
		Return json.RawMessage `json:"return"`
		Error  *struct {
			Class string `json:"class"`
			Desc  string `json:"desc"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("qmp: %s: decoding reply: %w", cmd, err)
	}
	if r.Error != nil {
		return &CommandError{Command: cmd, Err: fmt.Errorf("%s: %s", r.Error.Class, r.Error.Desc)}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(r.Return, out); err != nil {
		return fmt.Errorf("qmp: %s: decoding reply %s: %w", cmd, r.Return, err)
	}
	return nil
}

// CommandError is a command QEMU refused (or a broken connection).
type CommandError struct {
	Command string
	Err     error
}

func (e *CommandError) Error() string { return "qmp: " + e.Command + ": " + e.Err.Error() }
func (e *CommandError) Unwrap() error { return e.Err }

// Status is query-status's reply.
type Status struct {
	Running bool   `json:"running"`
	Status  string `json:"status"` // running, paused, shutdown, prelaunch...
}

// Status runs query-status.
func (c *Client) Status() (Status, error) {
	var s Status
	err := c.Run("query-status", nil, &s)
	return s, err
}

// Powerdown asks the guest to power off (ACPI button, system_powerdown).
func (c *Client) Powerdown() error { return c.Run("system_powerdown", nil, nil) }

// Quit ends QEMU at once. The connection closing under the reply is not an
// error.
func (c *Client) Quit() error {
	err := c.Run("quit", nil, nil)
	var ne net.Error
	if err != nil && (errors.As(err, &ne) || errors.Is(err, net.ErrClosed)) {
		return nil
	}
	return err
}

// ChardevAddSocket adds a unix-socket chardev id that connects to path
// (client mode), as -chardev socket,id=ID,path=PATH does.
func (c *Client) ChardevAddSocket(id, path string) error {
	args := map[string]any{
		"id": id,
		"backend": map[string]any{
			"type": "socket",
			"data": map[string]any{
				"addr":   map[string]any{"type": "unix", "data": map[string]any{"path": path}},
				"server": false,
			},
		},
	}
	return c.Run("chardev-add", args, nil)
}

// ChardevRemove removes chardev id.
func (c *Client) ChardevRemove(id string) error {
	return c.Run("chardev-remove", map[string]any{"id": id}, nil)
}

// DeviceAdd runs device_add with driver, id and the other properties.
func (c *Client) DeviceAdd(driver, id string, props map[string]any) error {
	args := map[string]any{"driver": driver, "id": id}
	for k, v := range props {
		args[k] = v
	}
	return c.Run("device_add", args, nil)
}

// DeviceDel runs device_del (the guest must release the device; watch for
// the DEVICE_DELETED event).
func (c *Client) DeviceDel(id string) error {
	return c.Run("device_del", map[string]any{"id": id}, nil)
}

// Memdev is one entry of query-memdev, with its QOM type added.
type Memdev struct {
	ID    string `json:"id"`
	Size  uint64 `json:"size"`
	Share bool   `json:"share"`
	Type  string `json:"-"` // memory-backend-memfd, -file, -ram
}

// Memdevs lists the memory backends (query-memdev) and their types.
func (c *Client) Memdevs() ([]Memdev, error) {
	var ms []Memdev
	if err := c.Run("query-memdev", nil, &ms); err != nil {
		return nil, err
	}
	for i := range ms {
		if ms[i].ID == "" {
			continue
		}
		var t string
		if err := c.Run("qom-get", map[string]any{"path": "/objects/" + ms[i].ID, "property": "type"}, &t); err == nil {
			ms[i].Type = t
		}
	}
	return ms, nil
}

// QomGet reads one QOM property into out.
func (c *Client) QomGet(path, property string, out any) error {
	return c.Run("qom-get", map[string]any{"path": path, "property": property}, out)
}
