package fieldfuzz_test

import (
	"context"
	"net"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/backend/fieldfuzz"
	"github.com/vgpu-project/vgpu/backend/hostmode"
	"github.com/vgpu-project/vgpu/backend/server"
	"github.com/vgpu-project/vgpu/protocol"
)

// backend serves the sim device on a host-mode socket in this process, as
// "vgpu serve --device sim --unix PATH" does.
func backend(t testing.TB) (dial func() (net.Conn, error), panics func() (uint64, error)) {
	t.Helper()
	drv, err := sim.New(sim.Config{Devices: 1, MemBytes: 4 << 30})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{Driver: drv, Version: "fieldfuzz", Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Error, Output: testOutput{t}})})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "vgpu.sock")
	ln, err := hostmode.Listen(path, hostmode.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
		drv.Close()
	})
	return func() (net.Conn, error) { return net.Dial("unix", path) },
		func() (uint64, error) { return srv.Stats().Snapshot().Panics, nil }
}

// Every field of every opcode's request, set to every boundary value,
// alone and batched, against a real session on the sim device: every case
// answered, the session serving after each, no caught panic, the good
// client's bytes exact.
func TestFieldFuzz(t *testing.T) {
	dial, panics := backend(t)
	rep, err := fieldfuzz.Run(context.Background(), fieldfuzz.Config{Dial: dial, Panics: panics, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range protocol.Ops {
		if rep.Ops[info.Op] == 0 {
			t.Errorf("%v was never fuzzed", info.Op)
		}
	}
	t.Logf("%d cases, %d reconnects, %d good round trips, statuses %v", rep.Cases, rep.Reconnects, rep.GoodRounds, rep.Statuses)
}

// The seeds' encoding is their wire size (the payload structs have no
// implicit padding), for every opcode.
func TestSeedsAreWireSized(t *testing.T) {
	w := &fieldfuzz.World{Ptr: 0x7f0000000000, ParamBytes: 24}
	for i := range protocol.Ops {
		info := &protocol.Ops[i]
		p, _ := w.Seed(info)
		if len(p) < info.ReqSize() {
			t.Errorf("%v: seed of %d bytes, fixed part %d", info.Op, len(p), info.ReqSize())
		}
		if info.ReqTail == protocol.TailNone && len(p) != info.ReqSize() {
			t.Errorf("%v: seed of %d bytes, want %d", info.Op, len(p), info.ReqSize())
		}
		if n := len(fieldfuzz.FieldsOf(reflect.TypeOf(info.Req))); n == 0 && info.ReqSize() > 0 {
			t.Errorf("%v: no fields found", info.Op)
		}
	}
}

// testOutput sends the backend's error log to the test's log.
type testOutput struct{ t testing.TB }

func (o testOutput) Write(b []byte) (int, error) {
	o.t.Log(string(b))
	return len(b), nil
}

// FuzzFields is the same fuzzer driven by Go's: which opcode, which field,
// which value (a boundary value or any), alone or batched, two fields at
// once. scripts/fuzz.sh runs it in CI (bounded) and in make fuzz (long).
func FuzzFields(f *testing.F) {
	for op := range protocol.Ops {
		f.Add(uint16(op), uint16(0), uint64(0), true, false, uint16(1), uint64(1<<63))
	}
	dial, panics := backend(f)
	fz, err := fieldfuzz.Start(fieldfuzz.Config{Dial: dial, Panics: panics, GoodEvery: 200})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(fz.Close)
	f.Fuzz(func(t *testing.T, op, field uint16, v uint64, pick, batched bool, field2 uint16, v2 uint64) {
		c := fz.Case(int(op), int(field), v, pick, batched)
		if c.Op == protocol.OpGoodbye {
			return // ends the connection by design (TestFieldFuzz covers it)
		}
		fz.Also(&c, int(field2), v2)
		if err := fz.Send(c); err != nil {
			t.Fatal(err)
		}
	})
}
