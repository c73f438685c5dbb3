package session_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/protocol"
)

// memOutput is a DeviceOutput in memory: what the sim's test kernels
// print (its two streams) until the session drains it.
type memOutput struct {
	mu  sync.Mutex
	buf [3]bytes.Buffer // by protocol.Output*
}

type memStream struct {
	o      *memOutput
	stream uint32
}

func (w memStream) Write(p []byte) (int, error) {
	w.o.mu.Lock()
	defer w.o.mu.Unlock()
	return w.o.buf[w.stream].Write(p)
}

func (o *memOutput) Drain(emit func(uint32, []byte)) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	any := false
	for _, st := range []uint32{protocol.OutputStdout, protocol.OutputStderr} {
		if o.buf[st].Len() > 0 {
			emit(st, o.buf[st].Bytes())
			o.buf[st].Reset()
			any = true
		}
	}
	return any
}

// probePTX declares the sim's printf and assert test kernels.
const probePTX = `
.version 7.0
.target sm_52
.address_size 64
.visible .entry vgpu_printf_probe(.param .u32 tag) { ret; }
.visible .entry vgpu_fault_assert(.param .u32 x) { ret; }
`

// TestDeviceOutput: with FeatureDeviceOutput, what the process's device
// printed reaches the guest as NOTIFY_OUTPUT frames before the reply of the
// synchronising call after it (marked FlagOutput), split into chunks that fit
// the guest driver's buffer, stdout and stderr apart; without the feature
// the guest gets none of it.
func TestDeviceOutput(t *testing.T) {
	for _, asks := range []bool{true, false} {
		out := &memOutput{}
		drv, err := sim.New(sim.Config{MemBytes: 1 << 30, Stdout: memStream{out, protocol.OutputStdout}, Stderr: memStream{out, protocol.OutputStderr}})
		if err != nil {
			t.Fatal(err)
		}
		e := start(t, opts{drv: drv, output: out})
		feat := protocol.FeatureBatch
		if asks {
			feat |= protocol.FeatureDeviceOutput
		}
		hello, _ := must[protocol.HelloReq, protocol.HelloReply](e, protocol.OpHello, protocol.HelloReq{Major: 1, Features: feat}, nil)
		if got := hello.Features&protocol.FeatureDeviceOutput != 0; got != asks {
			t.Fatalf("asked %v, offered %v", asks, got)
		}
		img := []byte(probePTX)
		mod, _ := must[protocol.ModuleLoadReq, protocol.ModuleLoadReply](e, protocol.OpModuleLoad,
			protocol.ModuleLoadReq{Image: protocol.BufRef{Kind: protocol.BufInline, Len: uint64(len(img))}}, img)
		fn := func(name string) uint64 {
			r, _ := must[protocol.NameReq, protocol.FunctionReply](e, protocol.OpModuleGetFunction, protocol.NameReq{Module: mod.Module, NameLen: uint32(len(name))}, []byte(name))
			return r.Func
		}
		probe, assert := fn("vgpu_printf_probe"), fn("vgpu_fault_assert")
		// 2 x 64 threads: 128 lines, ~5.6 KB: two chunks.
		launchNoReply := func(fn uint64, arg byte) {
			launch := protocol.LaunchReq{Func: fn, GridX: 2, GridY: 1, GridZ: 1, BlockX: 64, BlockY: 1, BlockZ: 1, ParamSize: 4}
			h := protocol.NewHeader(protocol.OpLaunchKernel, e.c.ID())
			h.Flags |= protocol.FlagNoReply
			if err := e.c.Send(protocol.AppendFrame(nil, h, append(protocol.Bytes(&launch), arg, 0, 0, 0), nil)); err != nil {
				t.Fatal(err)
			}
		}
		launchNoReply(probe, 7)
		launchNoReply(assert, 1)
		sync, err := e.c.Call(protocol.OpDeviceSynchronize, 0, protocol.Bytes(&protocol.DeviceReq{}), nil)
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr strings.Builder
		frames, finals := 0, 0
	drain:
		for {
			select {
			case n := <-e.c.Notes:
				if n.Opcode != protocol.OpNotifyOutput {
					continue
				}
				p, tail, err := protocol.Decode[protocol.OutputNotify](n.Payload)
				if err != nil || int(p.Len) != len(tail) || len(n.Payload) > protocol.MaxOutputChunk+16 {
					t.Fatalf("output frame %+v (%d bytes after it): %v", p, len(tail), err)
				}
				frames++
				if n.RequestID != sync.RequestID {
					t.Fatalf("output frame for request %d before the reply to %d", n.RequestID, sync.RequestID)
				}
				if p.Flags&protocol.OutputFinal != 0 {
					finals++
				}
				map[uint32]*strings.Builder{protocol.OutputStdout: &stdout, protocol.OutputStderr: &stderr}[p.Stream].Write(tail)
			default: // the client queues notifications before it hands over the reply that follows them
				break drain
			}
		}
		if !asks {
			if frames != 0 || sync.Flags&protocol.FlagOutput != 0 {
				t.Fatalf("a guest that did not ask got %d output frames (reply flags %#x)", frames, sync.Flags)
			}
			e.close()
			continue
		}
		if sync.Flags&protocol.FlagOutput == 0 || finals != 1 || frames < 3 {
			t.Fatalf("reply flags %#x, %d frames, %d final: want FlagOutput, one final frame, stdout in two chunks", sync.Flags, frames, finals)
		}
		if n := strings.Count(stdout.String(), "vgpu printf probe: tag 7 block "); n != 128 {
			t.Fatalf("%d probe lines on stdout, want 128:\n%s", n, stdout.String())
		}
		if !strings.Contains(stderr.String(), "Assertion `x == 0` failed") {
			t.Fatalf("stderr %q: want the assertion", stderr.String())
		}
		e.close()
	}
}
