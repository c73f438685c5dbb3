package metrics

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/server"
	"github.com/vgpu-project/vgpu/backend/session"
)

type fakeSource struct{}

func (fakeSource) Status() server.Status {
	return server.Status{
		DeviceKind: "sim",
		Devices:    []server.DeviceStatus{{Name: "gpu0", MemTotal: 100, MemUsedByVGPU: 42, Launches: 7}},
		VMs:        []server.VMStatus{{VM: "vm-a", Sessions: 1, MemUsed: 42, MemLimit: 64}},
		Stats:      session.Snapshot{Ops: map[string]session.OpStats{"MEM_ALLOC": {Calls: 3, Errors: 1, Nanos: 3000}}, ActiveSessions: 1},
	}
}

func TestEndpoint(t *testing.T) {
	s, err := Listen("127.0.0.1:0", fakeSource{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resp, err := http.Get("http://" + s.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`vgpu_calls_total{op="MEM_ALLOC"} 3`, `vgpu_call_errors_total{op="MEM_ALLOC"} 1`,
		`vgpu_device_memory_used_bytes{gpu="0",name="gpu0"} 42`, `vgpu_vm_memory_limit_bytes{vm="vm-a"} 64`, `vgpu_sessions 1`, `vgpu_device_kind_info{kind="sim"} 1`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// A scraper that keeps its connection open without asking anything more
// does not keep it (and its fd in the backend) for ever (issue 20, item 7).
func TestIdleConnectionsClosed(t *testing.T) {
	old := IdleTimeout
	IdleTimeout = 100 * time.Millisecond
	defer func() { IdleTimeout = old }()
	s, err := Listen("127.0.0.1:0", fakeSource{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle keep-alive connection: read %v, want EOF (closed by the server)", err)
	}
}
