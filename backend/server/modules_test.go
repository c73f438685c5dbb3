package server_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/backend/server"
	"github.com/vgpu-project/vgpu/backend/session"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/backend/transport"
	"github.com/vgpu-project/vgpu/protocol"
)

// vmClient opens a session of VM vm on srv.
func vmClient(t *testing.T, ctx context.Context, srv *server.Server, vm string) *sessiontest.Client {
	t.Helper()
	bc, gc := sessiontest.Pipe(3, 1000, nil)
	bc.Name = vm
	done := make(chan struct{})
	go func() { _ = srv.ServeConn(ctx, bc); close(done) }()
	c := sessiontest.NewClient(gc)
	t.Cleanup(func() { c.Close(); <-done })
	return c
}

// load sends a module image (nil: by hash only) and returns the status and
// the reply.
func load(t *testing.T, c *sessiontest.Client, img []byte, hash [32]byte) (device.Result, protocol.ModuleLoadReply) {
	t.Helper()
	req := protocol.ModuleLoadReq{Hash: hash}
	if img != nil {
		req.Image = protocol.BufRef{Kind: protocol.BufInline, Len: uint64(len(img))}
	}
	st, rep, _, err := sessiontest.Do[protocol.ModuleLoadReq, protocol.ModuleLoadReply](c, protocol.OpModuleLoad, &req, img)
	if err != nil {
		t.Fatal(err)
	}
	return device.Result(st), rep
}

// ptxImage is a distinct valid PTX image per n.
func ptxImage(n int) []byte {
	return []byte(fmt.Sprintf("// image %d\n%s", n, sessiontest.FillPTX))
}

// TestModuleCachePerVM: a VM's module images are its own. Another VM
// cannot load them by hash (so it cannot learn that they were loaded), an
// image the device refused is never cached, the cache outlives the VM's
// sessions (programs run one after another), and a VM that fills its cache
// evicts only its own images.
func TestModuleCachePerVM(t *testing.T) {
	drv, err := sim.New(sim.Config{Devices: 1, MemBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	one := uint64(len(ptxImage(0)))
	srv, err := server.New(server.Config{Driver: drv, ModuleCacheBytes: 3 * one, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	img := ptxImage(0)
	h := sha256.Sum256(img)
	a := vmClient(t, ctx, srv, "a")
	if st, rep := load(t, a, img, h); st != 0 || rep.Cached != 0 {
		t.Fatalf("VM a's first load: %v cached=%d", st, rep.Cached)
	}
	a.Close()
	// A later program of VM a (a new session) finds it by hash.
	a2 := vmClient(t, ctx, srv, "a")
	if st, rep := load(t, a2, nil, h); st != 0 || rep.Cached != 1 {
		t.Fatalf("VM a, next program, by hash: %v cached=%d", st, rep.Cached)
	}
	// VM b does not: it learns nothing about VM a's images.
	b := vmClient(t, ctx, srv, "b")
	if st, _ := load(t, b, nil, h); st != device.ErrNotFound {
		t.Fatalf("VM b loading VM a's image by hash: %v, want CUDA_ERROR_NOT_FOUND", st)
	}
	// Garbage the device refuses is not cached.
	junk := []byte("this is not a module image\x00")
	if st, _ := load(t, a2, junk, sha256.Sum256(junk)); st == 0 {
		t.Fatal("a junk image loaded")
	}
	if st, _ := load(t, a2, nil, sha256.Sum256(junk)); st != device.ErrNotFound {
		t.Fatalf("the refused junk image by hash: %v, want CUDA_ERROR_NOT_FOUND", st)
	}
	// VM b's own image, then VM a fills its cache many times over.
	bimg := ptxImage(100)
	if st, _ := load(t, b, bimg, sha256.Sum256(bimg)); st != 0 {
		t.Fatalf("VM b's load: %v", st)
	}
	for i := 1; i <= 10; i++ {
		x := ptxImage(i)
		if st, _ := load(t, a2, x, sha256.Sum256(x)); st != 0 {
			t.Fatalf("VM a's load %d: %v", i, st)
		}
	}
	if st, rep := load(t, b, nil, sha256.Sum256(bimg)); st != 0 || rep.Cached != 1 {
		t.Fatalf("VM b's image after VM a filled its own cache: %v", st)
	}
	if st, _ := load(t, a2, nil, h); st != device.ErrNotFound {
		t.Fatalf("VM a's oldest image after it loaded 10 more into a 3-image cache: %v, want evicted", st)
	}
	if st, _ := load(t, a2, nil, sha256.Sum256(ptxImage(10))); st != 0 {
		t.Fatalf("VM a's newest image: %v", st)
	}
}

// TestStatusAddsWorkers: a manager's Status adds what its workers report
// (server.Config.Aggregate): their counters to its own, their devices
// (it holds none), their VMs' memory.
func TestStatusAddsWorkers(t *testing.T) {
	drv, err := sim.New(sim.Config{Devices: 1, MemBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	var agg server.Aggregate
	agg.Stats.Ops = map[string]session.OpStats{"MEM_ALLOC": {Calls: 5, Errors: 1}}
	agg.Stats.BadFrames, agg.Stats.Panics, agg.Stats.TotalSessions = 2, 1, 7
	agg.Devices = []server.DeviceStatus{{GuestOrdinal: 0, Name: "from a worker", MemUsedByVGPU: 4096, Launches: 9}}
	agg.VMMem = map[string]uint64{"vm-w": 4096}
	release := make(chan struct{})
	srv, err := server.New(server.Config{Driver: drv, Version: "test",
		Dispatch: func(ctx context.Context, _ transport.Conn, _ uint64) error {
			<-release
			return nil
		},
		Aggregate: func() server.Aggregate { return agg }})
	if err != nil {
		t.Fatal(err)
	}
	bc, gc := sessiontest.Pipe(3, 1000, nil)
	bc.Name = "vm-w"
	done := make(chan struct{})
	go func() { _ = srv.ServeConn(context.Background(), bc); close(done) }()
	defer func() { close(release); gc.Close(); <-done }()
	var st server.Status
	testwait.For(t, 10*time.Second, "the session listed", func() bool { st = srv.Status(); return len(st.Sessions) == 1 })
	if st.Stats.Ops["MEM_ALLOC"].Calls != 5 || st.Stats.BadFrames != 2 || st.Stats.Panics != 1 || st.Stats.TotalSessions != 7 {
		t.Fatalf("counters %+v", st.Stats)
	}
	if len(st.Devices) != 1 || st.Devices[0].Name != "from a worker" || st.Devices[0].Launches != 9 {
		t.Fatalf("devices %+v", st.Devices)
	}
	if len(st.VMs) != 1 || st.VMs[0].MemUsed != 4096 || st.VMs[0].Sessions != 1 {
		t.Fatalf("VMs %+v", st.VMs)
	}
}
