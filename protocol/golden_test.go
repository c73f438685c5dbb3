package protocol

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden frames in testdata/golden")

// goldenFrame is one frame whose bytes are pinned in testdata/golden/<name>.bin.
// protocol/ctest/golden.c builds the same frames through vgpu_protocol.h.
type goldenFrame struct {
	name  string
	build func() []byte
}

func helloReq() []byte {
	p := HelloReq{Major: 1, Minor: 0, Role: RoleLibrary, Features: FeatureBatch | FeatureInline, PID: 4242}
	SetString(p.ClientVersion[:], "vgpu-lib 0.1")
	return AppendFrame(nil, NewHeader(OpHello, 1), Bytes(&p), nil)
}

func helloReply() []byte {
	p := HelloReply{Major: 1, Minor: 0, DeviceCount: 1, Features: FeatureBatch | FeatureInline,
		MaxPayload: DefaultLimits.MaxPayload, MaxSegments: DefaultLimits.MaxSegments, MaxBatch: DefaultMaxBatch, SessionID: 7}
	SetString(p.BackendVersion[:], "vgpu 0.1")
	SetString(p.DeviceKind[:], "sim")
	req := NewHeader(OpHello, 1)
	return AppendFrame(nil, Reply(&req, 0), Bytes(&p), nil)
}

func memcpyHtoDSegments() []byte {
	p := MemcpyHtoDReq{Dst: 0x7f0000001000, Src: BufRef{Kind: BufSegments, Index: 0, Len: 12288}}
	segs := []Segment{{GPA: 0x100000, Len: 4096}, {GPA: 0x200000, Len: 8192}}
	return AppendFrame(nil, NewHeader(OpMemcpyHtoD, 2), Bytes(&p), segs)
}

func memcpyHtoDInline() []byte {
	p := MemcpyHtoDReq{Dst: 0x7f0000002000, Src: BufRef{Kind: BufInline, Offset: 0, Len: 5}}
	payload := append(Bytes(&p), 'h', 'e', 'l', 'l', 'o')
	return AppendFrame(nil, NewHeader(OpMemcpyHtoD, 3), payload, nil)
}

func launchKernel() []byte {
	p := LaunchReq{Func: 0x10, Stream: 0, GridX: 1, GridY: 1, GridZ: 1, BlockX: 32, BlockY: 1, BlockZ: 1, ParamSize: 12}
	payload := Bytes(&p)
	payload = append(payload, 0x00, 0x10, 0, 0, 0x7f, 0, 0, 0) // u64 pointer 0x7f00001000
	payload = append(payload, 32, 0, 0, 0)                     // int n = 32
	return AppendFrame(nil, NewHeader(OpLaunchKernel, 4), payload, nil)
}

func batchTwo() []byte {
	b := BatchReq{Count: 2}
	payload := Bytes(&b)
	ms := MemsetReq{Dst: 0x7f0000003000, Count: 64, Value: 0xab, ElemSize: 1, Flags: CopyAsync}
	payload = AppendBatchCall(payload, NewHeader(OpMemset, 6), Bytes(&ms))
	er := EventRecordReq{Event: 3, Stream: 0}
	payload = AppendBatchCall(payload, NewHeader(OpEventRecord, 7), Bytes(&er))
	return AppendFrame(nil, NewHeader(OpBatch, 5), payload, nil)
}

func errorReply() []byte {
	req := NewHeader(OpMemFree, 8)
	return AppendFrame(nil, Reply(&req, 1 /* CUDA_ERROR_INVALID_VALUE */), nil, nil)
}

func notifyHostFunc() []byte {
	p := HostFuncNotify{CallbackID: 99, Stream: 0x20}
	h := NewHeader(OpNotifyHostFunc, 0)
	h.Flags = FlagNotify
	return AppendFrame(nil, h, Bytes(&p), nil)
}

// hostShare is a host-mode share of a 2 MiB memfd at pseudo-GPA 1 TiB (the
// fd itself travels beside the frame, SCM_RIGHTS).
func hostShare() []byte {
	p := HostShareReq{Base: 1 << 40, Size: 2 << 20}
	return AppendFrame(nil, NewHeader(OpHostShare, 9), Bytes(&p), nil)
}

// guestRegisterHostMapped registers that share, mapped: the host-mode
// library's own segment list (one segment: the share is contiguous).
func guestRegisterHostMapped() []byte {
	p := GuestRegisterReq{Flags: RegisterMapped, Size: 2 << 20}
	return AppendFrame(nil, NewHeader(OpGuestRegister, 10), Bytes(&p), []Segment{{GPA: 1 << 40, Len: 2 << 20}})
}

// deviceGetProcessesReply lists two guest processes of the VM on device 0.
func deviceGetProcessesReply() []byte {
	p := ProcessListReply{Count: 2, Total: 2}
	payload := Bytes(&p)
	for _, e := range []ProcessInfo{{PID: 812, UsedMemory: 1 << 30}, {PID: 4242, UsedMemory: 512 << 20}} {
		payload = append(payload, Bytes(&e)...)
	}
	req := NewHeader(OpDeviceGetProcesses, 11)
	return AppendFrame(nil, Reply(&req, 0), payload, nil)
}

// deviceGetMonitorReply: utilization, power and the SM clock read; no fan.
func deviceGetMonitorReply() []byte {
	p := DeviceMonitor{Valid: MonitorUtilization | MonitorPower | MonitorClock<<1 | MonitorMaxClock<<1,
		GPUUtil: 87, MemUtil: 40, PowerMilliwatts: 215000, Clocks: [MonitorClocks]uint32{1: 1755}, MaxClocks: [MonitorClocks]uint32{1: 1980}}
	req := NewHeader(OpDeviceGetMonitor, 12)
	return AppendFrame(nil, Reply(&req, 0), Bytes(&p), nil)
}

// notifyOutput is one line of device printf output, the whole flush.
func notifyOutput() []byte {
	text := "vgpu printf probe: tag 7 block 0 thread 0\n"
	p := OutputNotify{Stream: OutputStdout, Flags: OutputFinal, Len: uint32(len(text))}
	h := NewHeader(OpNotifyOutput, 11) // the request whose reply follows
	h.Flags = FlagNotify
	return AppendFrame(nil, h, append(Bytes(&p), text...), nil)
}

// syncReplyOutput is the reply that follows a flush of device output.
func syncReplyOutput() []byte {
	req := NewHeader(OpDeviceSynchronize, 11)
	h := Reply(&req, 0)
	h.Flags |= FlagOutput
	return AppendFrame(nil, h, nil, nil)
}

var goldenFrames = []goldenFrame{
	{"hello_req", helloReq},
	{"hello_reply", helloReply},
	{"memcpy_htod_segments", memcpyHtoDSegments},
	{"memcpy_htod_inline", memcpyHtoDInline},
	{"launch_kernel", launchKernel},
	{"batch_two", batchTwo},
	{"error_reply", errorReply},
	{"notify_host_func", notifyHostFunc},
	{"host_share", hostShare},
	{"guest_register_host_mapped", guestRegisterHostMapped},
	{"device_get_processes_reply", deviceGetProcessesReply},
	{"device_get_monitor_reply", deviceGetMonitorReply},
	{"notify_output", notifyOutput},
	{"sync_reply_output", syncReplyOutput},
}

func TestGoldenFrames(t *testing.T) {
	for _, g := range goldenFrames {
		t.Run(g.name, func(t *testing.T) {
			got := g.build()
			path := filepath.Join("testdata", "golden", g.name+".bin")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./protocol -run TestGoldenFrames -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("encoding of %s changed:\n got %x\nwant %x", g.name, got, want)
			}
			// decode, re-encode, compare.
			f, n, err := ParseFrame(want, DefaultLimits)
			if err != nil || n != len(want) {
				t.Fatalf("ParseFrame: n=%d err=%v", n, err)
			}
			again := AppendFrame(nil, f.Header, f.Payload, f.Segs)
			if !bytes.Equal(again, want) {
				t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, want)
			}
			if f.Flags&(FlagReply|FlagNotify) == 0 {
				if _, err := CheckRequest(&f); err != nil {
					t.Fatalf("CheckRequest: %v", err)
				}
			}
			if _, err := ReadFrame(bytes.NewReader(want), DefaultLimits); err != nil {
				t.Fatalf("ReadFrame: %v", err)
			}
		})
	}
}

// Every opcode in the table has a name, payload types the generator accepts,
// and a distinct number inside a known area.
func TestOpcodeTable(t *testing.T) {
	names := map[string]bool{}
	for _, op := range Ops {
		if op.Name == "" || names[op.Name] {
			t.Errorf("opcode %#04x: empty or duplicate name %q", uint16(op.Op), op.Name)
		}
		names[op.Name] = true
		if op.Op.Area() > AreaLibrary {
			t.Errorf("%s: area %#x unknown", op.Name, op.Op.Area())
		}
		if op.Req == nil {
			t.Errorf("%s: no request type", op.Name)
		}
		if op.Op.Area() != AreaNotify && op.Reply == nil {
			t.Errorf("%s: no reply type", op.Name)
		}
		if op.Batchable() && op.Segments && op.Op != OpMemcpyHtoD && op.Op != OpMemcpyDtoH {
			t.Errorf("%s: batchable calls cannot carry segments", op.Name)
		}
		if op.FD && (op.Batchable() || op.Segments) {
			t.Errorf("%s: a call that carries an fd travels alone, without segments", op.Name)
		}
	}
}
