package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// fakeQEMU is an in-process QMP server: it greets, answers commands from
// replies (name -> "return" value, or an error when the value is an error)
// and sends an event after each command named in events.
type fakeQEMU struct {
	replies map[string]any
	events  map[string]string // command -> event to send after its reply
	got     chan map[string]any
}

func (f *fakeQEMU) serve(t *testing.T, ln net.Listener) {
	c, err := ln.Accept()
	if err != nil {
		return
	}
	defer c.Close()
	enc := json.NewEncoder(c)
	enc.Encode(map[string]any{"QMP": map[string]any{"version": map[string]any{"qemu": map[string]int{"major": 7, "minor": 2, "micro": 22}}, "capabilities": []string{}}})
	dec := json.NewDecoder(c) // QMP is a JSON stream, not lines
	for {
		var req map[string]any
		if err := dec.Decode(&req); err != nil {
			return
		}
		name, _ := req["execute"].(string)
		if name != "qmp_capabilities" {
			f.got <- req
		}
		r, ok := f.replies[name]
		switch {
		case name == "qmp_capabilities":
			enc.Encode(map[string]any{"return": map[string]any{}})
		case !ok:
			enc.Encode(map[string]any{"error": map[string]string{"class": "CommandNotFound", "desc": "The command " + name + " has not been found"}})
		default:
			if e, isErr := r.(error); isErr {
				enc.Encode(map[string]any{"error": map[string]string{"class": "GenericError", "desc": e.Error()}})
			} else {
				enc.Encode(map[string]any{"return": r})
			}
		}
		if ev := f.events[name]; ev != "" {
			enc.Encode(map[string]any{"event": ev, "data": map[string]any{"guest": false}, "timestamp": map[string]int{"seconds": 1, "microseconds": 2}})
		}
	}
}

// startFake listens after a delay signalled by ready, so Dial's retry is
// exercised.
func startFake(t *testing.T, f *fakeQEMU) (path string, listen func()) {
	path = filepath.Join(t.TempDir(), "qmp.sock")
	f.got = make(chan map[string]any, 16)
	return path, func() {
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go f.serve(t, ln)
	}
}

func TestClient(t *testing.T) {
	f := &fakeQEMU{
		replies: map[string]any{
			"query-status": map[string]any{"running": true, "status": "running"},
			"query-memdev": []map[string]any{{"id": "mem", "size": 1 << 30, "share": true, "merge": true}},
			"qom-get":      "memory-backend-memfd",
			"chardev-add":  map[string]any{},
			"device_add":   errors.New("Bus 'pcie.0' does not support hotplugging"),
			"quit":         map[string]any{},
		},
		events: map[string]string{"quit": "SHUTDOWN"},
	}
	path, listen := startFake(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type dialed struct {
		c   *Client
		err error
	}
	done := make(chan dialed, 1)
	go func() { c, err := Dial(ctx, path, nil); done <- dialed{c, err} }()
	listen() // the socket appears after Dial started retrying
	d := <-done
	if d.err != nil {
		t.Fatalf("Dial: %v", d.err)
	}
	c := d.c
	defer c.Close()
	if c.Version() != "7.2.22" {
		t.Errorf("version %q", c.Version())
	}
	st, err := c.Status()
	if err != nil || !st.Running || st.Status != "running" {
		t.Errorf("Status: %+v, %v", st, err)
	}
	<-f.got
	ms, err := c.Memdevs()
	if err != nil || len(ms) != 1 || !ms[0].Share || ms[0].Type != "memory-backend-memfd" || ms[0].Size != 1<<30 {
		t.Errorf("Memdevs: %+v, %v", ms, err)
	}
	<-f.got
	q := <-f.got
	if args, _ := q["arguments"].(map[string]any); args["path"] != "/objects/mem" || args["property"] != "type" {
		t.Errorf("qom-get arguments %v", q["arguments"])
	}
	if err := c.ChardevAddSocket("vgpu0", "/run/x.sock"); err != nil {
		t.Errorf("ChardevAddSocket: %v", err)
	}
	q = <-f.got
	b, _ := json.Marshal(q["arguments"])
	if want := `{"backend":{"data":{"addr":{"data":{"path":"/run/x.sock"},"type":"unix"},"server":false},"type":"socket"},"id":"vgpu0"}`; string(b) != want {
		t.Errorf("chardev-add arguments\n%s\nwant\n%s", b, want)
	}
	err = c.DeviceAdd("vhost-user-vsock-pci", "d", map[string]any{"chardev": "vgpu0"})
	var ce *CommandError
	if !errors.As(err, &ce) || ce.Command != "device_add" {
		t.Errorf("DeviceAdd: %v, want a CommandError", err)
	}
	<-f.got
	if err := c.Run("no-such-command", nil, nil); err == nil {
		t.Error("unknown command accepted")
	}
	<-f.got
	n := len(c.Events())
	if err := c.Quit(); err != nil {
		t.Errorf("Quit: %v", err)
	}
	e, _, err := c.WaitEvent(ctx, "SHUTDOWN", n)
	if err != nil || e.Event != "SHUTDOWN" {
		t.Errorf("WaitEvent: %+v, %v", e, err)
	}
}

func TestDialTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := Dial(ctx, filepath.Join(t.TempDir(), "none.sock"), nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial: %v, want a deadline error", err)
	}
}
