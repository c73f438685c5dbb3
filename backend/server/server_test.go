package server_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/backend/hostmode"
	"github.com/vgpu-project/vgpu/backend/server"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/protocol"
)

// TestHostModeEndToEnd serves a sim device on a unix socket (as
// "vgpu serve --device sim --unix PATH" does) and talks to it like the
// guest library in host mode, with --gpus and --mem-limit in effect.
func TestHostModeEndToEnd(t *testing.T) {
	drv, err := sim.New(sim.Config{Devices: 2, MemBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Driver: drv, GPUs: []int{1}, MemLimit: 1 << 20, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "vgpu.sock")
	ln, err := hostmode.Listen(path, hostmode.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	statusPath := filepath.Join(dir, "status.sock")
	sl, err := server.ListenStatus(statusPath)
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeStatus(ctx, sl)

	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c := sessiontest.NewClient(conn)
	st, hello, _, err := sessiontest.Do[protocol.HelloReq, protocol.HelloReply](c, protocol.OpHello, &protocol.HelloReq{Major: 1, Features: ^uint64(0)}, nil)
	if err != nil || st != 0 || hello.DeviceCount != 1 || hello.Features&protocol.FeatureSegments != 0 || hello.Features&protocol.FeatureInline == 0 {
		t.Fatalf("hello over the unix socket: %v %d %+v", err, st, hello)
	}
	_, info, _, _ := sessiontest.Do[protocol.DeviceReq, protocol.DeviceInfo](c, protocol.OpDeviceGetInfo, &protocol.DeviceReq{}, nil)
	if info.Attrs[33] != 0x11 || info.TotalMem != 1<<20 { // host device 1; capped
		t.Fatalf("guest device 0 should be host device 1 with a 1 MiB cap: bus %#x mem %d", info.Attrs[33], info.TotalMem)
	}
	st, _, _, _ = sessiontest.Do[protocol.MemAllocReq, protocol.PtrReply](c, protocol.OpMemAlloc, &protocol.MemAllocReq{Size: 2 << 20}, nil)
	if device.Result(st) != device.ErrOutOfMemory {
		t.Fatalf("allocation over --mem-limit: %v", device.Result(st))
	}
	st, p, _, _ := sessiontest.Do[protocol.MemAllocReq, protocol.PtrReply](c, protocol.OpMemAlloc, &protocol.MemAllocReq{Size: 4096}, nil)
	if st != 0 {
		t.Fatal(device.Result(st))
	}
	seg := []protocol.Segment{{GPA: 0, Len: 4096}}
	hreq := protocol.MemcpyHtoDReq{Dst: p.Ptr, Src: protocol.BufRef{Kind: protocol.BufSegments, Len: 4096}}
	f, err := c.Call(protocol.OpMemcpyHtoD, 0, protocol.Bytes(&hreq), seg)
	if err != nil || device.Result(f.Status) != device.ErrInvalidValue {
		t.Fatalf("segments in host mode outside shared memory: %v %v", err, device.Result(f.Status))
	}
	status, err := server.ReadStatus(statusPath, 5e9)
	if err != nil {
		t.Fatal(err)
	}
	if len(status.Sessions) != 1 || len(status.VMs) != 1 || status.VMs[0].MemUsed != 4096 || status.Stats.Ops["MEM_ALLOC"].Calls != 2 {
		t.Fatalf("status %+v", status)
	}
	c.Close()
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if s := srv.Status(); s.Devices[0].Allocations != 0 {
		t.Fatalf("allocations left after the client went away: %+v", s.Devices[0])
	}
}
