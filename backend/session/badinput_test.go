package session_test

import (
	"encoding/binary"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// badCase is a request the session must refuse with want and survive.
type badCase struct {
	name  string
	port  uint32 // guest source port (default 1023: privileged)
	noMem bool   // connection without guest memory
	// frame builds the raw request bytes; p is a live 4 KiB allocation,
	// freed a freed one, foreign memory of the device the session never
	// allocated.
	frame func(id uint64, p, freed, foreign uint64) []byte
	want  device.Result
}

func req[T any](op protocol.Opcode, id uint64, v T, tail []byte, segs []protocol.Segment) []byte {
	return protocol.AppendFrame(nil, protocol.NewHeader(op, id), append(protocol.Bytes(&v), tail...), segs)
}

func htodSegs(dst uint64, segs ...protocol.Segment) func(id, p, freed, foreign uint64) []byte {
	return func(id, p, freed, foreign uint64) []byte {
		var n uint64
		for _, s := range segs {
			n += s.Len
		}
		if dst == 0 {
			dst = p
		}
		return req(protocol.OpMemcpyHtoD, id, protocol.MemcpyHtoDReq{Dst: dst, Src: protocol.BufRef{Kind: protocol.BufSegments, Len: n}}, nil, segs)
	}
}

func inlineTo(pick func(p, freed, foreign uint64) uint64, n int) func(id, p, freed, foreign uint64) []byte {
	return func(id, p, freed, foreign uint64) []byte {
		return req(protocol.OpMemcpyHtoD, id, protocol.MemcpyHtoDReq{Dst: pick(p, freed, foreign), Src: protocol.BufRef{Kind: protocol.BufInline, Len: uint64(n)}}, make([]byte, n), nil)
	}
}

var badCases = []badCase{
	{name: "gpa outside guest RAM", frame: htodSegs(0, protocol.Segment{GPA: 1 << 40, Len: 4096}), want: device.ErrInvalidValue},
	{name: "gpa range crossing the end of a region", frame: htodSegs(0, protocol.Segment{GPA: 1<<20 - 2048, Len: 4096}), want: device.ErrInvalidValue},
	{name: "gpa wrap-around", frame: htodSegs(0, protocol.Segment{GPA: ^uint64(0) - 4095 + 2048, Len: 4096}), want: device.ErrInvalidValue},
	{name: "segments shorter than the buffer", frame: func(id, p, _, _ uint64) []byte {
		return req(protocol.OpMemcpyHtoD, id, protocol.MemcpyHtoDReq{Dst: p, Src: protocol.BufRef{Kind: protocol.BufSegments, Len: 8192}}, nil, []protocol.Segment{{GPA: 0, Len: 4096}})
	}, want: device.ErrInvalidValue},
	{name: "empty segment", frame: htodSegs(0, protocol.Segment{GPA: 0, Len: 0}, protocol.Segment{GPA: 0, Len: 16}), want: device.ErrInvalidValue},
	{name: "segments from an unprivileged port", port: 40000, frame: htodSegs(0, protocol.Segment{GPA: 0, Len: 4096}), want: device.ErrNotPermitted},
	{name: "segments without guest memory", noMem: true, frame: htodSegs(0, protocol.Segment{GPA: 0, Len: 4096}), want: device.ErrNotSupported},
	{name: "segments on an opcode that takes none", frame: func(id, _, _, _ uint64) []byte {
		return req(protocol.OpPing, id, protocol.Empty{}, nil, []protocol.Segment{{GPA: 0, Len: 4096}})
	}, want: device.ErrInvalidValue},
	{name: "foreign device pointer", frame: inlineTo(func(_, _, f uint64) uint64 { return f }, 16), want: device.ErrInvalidValue},
	{name: "freed device pointer", frame: inlineTo(func(_, fr, _ uint64) uint64 { return fr }, 16), want: device.ErrInvalidValue},
	{name: "copy past the end of an allocation", frame: inlineTo(func(p, _, _ uint64) uint64 { return p + 4000 }, 200), want: device.ErrInvalidValue},
	{name: "device pointer arithmetic wraps", frame: func(id, p, _, _ uint64) []byte {
		return req(protocol.OpMemcpyDtoD, id, protocol.MemcpyDtoDReq{Dst: p, Src: p + 16, Size: ^uint64(0) - 8}, nil, nil)
	}, want: device.ErrInvalidValue},
	{name: "memset pitch overflow", frame: func(id, p, _, _ uint64) []byte {
		return req(protocol.OpMemset, id, protocol.MemsetReq{Dst: p, Count: 16, ElemSize: 1, Height: 1 << 40, Pitch: 1 << 40}, nil, nil)
	}, want: device.ErrInvalidValue},
	{name: "free of an interior pointer", frame: func(id, p, _, _ uint64) []byte {
		return req(protocol.OpMemFree, id, protocol.PtrReq{Ptr: p + 8}, nil, nil)
	}, want: device.ErrInvalidValue},
	{name: "unknown stream", frame: func(id, _, _, _ uint64) []byte {
		return req(protocol.OpStreamSynchronize, id, protocol.HandleReq{Handle: 0x9999}, nil, nil)
	}, want: device.ErrInvalidHandle},
	{name: "unknown event", frame: func(id, _, _, _ uint64) []byte {
		return req(protocol.OpEventRecord, id, protocol.EventRecordReq{Event: 0x1001}, nil, nil)
	}, want: device.ErrInvalidHandle},
	{name: "unknown function", frame: func(id, _, _, _ uint64) []byte {
		return req(protocol.OpLaunchKernel, id, protocol.LaunchReq{Func: 42, GridX: 1, GridY: 1, GridZ: 1, BlockX: 1, BlockY: 1, BlockZ: 1}, nil, nil)
	}, want: device.ErrInvalidHandle},
	{name: "unknown module", frame: func(id, _, _, _ uint64) []byte {
		return req(protocol.OpModuleGetFunction, id, protocol.NameReq{Module: 7, NameLen: 1}, []byte("f"), nil)
	}, want: device.ErrInvalidHandle},
	{name: "unknown region", frame: func(id, p, _, _ uint64) []byte {
		return req(protocol.OpMemcpyHtoD, id, protocol.MemcpyHtoDReq{Dst: p, Src: protocol.BufRef{Kind: protocol.BufRegion, Region: 5, Len: 1}}, nil, nil)
	}, want: device.ErrInvalidHandle},
	{name: "bad device ordinal", frame: func(id, _, _, _ uint64) []byte {
		return req(protocol.OpMemAlloc, id, protocol.MemAllocReq{Device: 9, Size: 16}, nil, nil)
	}, want: device.ErrInvalidDevice},
	{name: "inline buffer outside the tail", frame: func(id, p, _, _ uint64) []byte {
		return req(protocol.OpMemcpyHtoD, id, protocol.MemcpyHtoDReq{Dst: p, Src: protocol.BufRef{Kind: protocol.BufInline, Offset: 8, Len: 16}}, make([]byte, 16), nil)
	}, want: device.ErrInvalidValue},
	{name: "inline DtoH beyond the payload limit", frame: func(id, p, _, _ uint64) []byte {
		return req(protocol.OpMemcpyDtoH, id, protocol.MemcpyDtoHReq{Src: p, Dst: protocol.BufRef{Kind: protocol.BufInline, Len: 1 << 40}}, nil, nil)
	}, want: device.ErrInvalidValue},
	{name: "name longer than the tail", frame: func(id, _, _, _ uint64) []byte {
		return req(protocol.OpModuleGetGlobal, id, protocol.NameReq{Module: 0x1001, NameLen: 100}, []byte("x"), nil)
	}, want: device.ErrInvalidValue}, // arguments are checked before handles (validators)
	{name: "garbage module image", frame: func(id, _, _, _ uint64) []byte {
		img := []byte("\x7fELF this is not a cubin")
		return req(protocol.OpModuleLoad, id, protocol.ModuleLoadReq{Image: protocol.BufRef{Kind: protocol.BufInline, Len: uint64(len(img))}}, img, nil)
	}, want: device.ErrInvalidImage},
	{name: "truncated payload", frame: func(id, _, _, _ uint64) []byte {
		return protocol.AppendFrame(nil, protocol.NewHeader(protocol.OpMemAlloc, id), make([]byte, 8), nil)
	}, want: device.ErrInvalidValue},
	{name: "payload longer than an opcode without a tail", frame: func(id, _, _, _ uint64) []byte {
		return protocol.AppendFrame(nil, protocol.NewHeader(protocol.OpMemAlloc, id), make([]byte, 24), nil)
	}, want: device.ErrInvalidValue},
	{name: "unknown opcode", frame: func(id, _, _, _ uint64) []byte {
		return protocol.AppendFrame(nil, protocol.NewHeader(0x0bad, id), nil, nil)
	}, want: device.ErrNotSupported},
	{name: "reply flag from the guest", frame: func(id, _, _, _ uint64) []byte {
		h := protocol.NewHeader(protocol.OpPing, id)
		h.Flags = protocol.FlagReply
		return protocol.AppendFrame(nil, h, nil, nil)
	}, want: device.ErrInvalidValue},
	{name: "oversize frame", frame: func(id, _, _, _ uint64) []byte {
		h := protocol.NewHeader(protocol.OpMemcpyHtoD, id)
		b := protocol.AppendFrame(nil, h, make([]byte, 2<<20), nil) // the test limit is 1 MiB
		return b
	}, want: device.ErrInvalidValue},
	{name: "unknown flags", frame: func(id, _, _, _ uint64) []byte {
		b := protocol.AppendFrame(nil, protocol.NewHeader(protocol.OpPing, id), make([]byte, 8), nil)
		binary.LittleEndian.PutUint32(b[8:], 1<<20)
		return b
	}, want: device.ErrInvalidValue},
	{name: "segments frame with no call open", frame: func(id, _, _, _ uint64) []byte {
		return req(protocol.OpSegments, id, protocol.Empty{}, nil, []protocol.Segment{{GPA: 0, Len: 4096}})
	}, want: device.ErrInvalidValue},
	{name: "malformed batch", frame: func(id, _, _, _ uint64) []byte {
		return req(protocol.OpBatch, id, protocol.BatchReq{Count: 3}, make([]byte, 40), nil)
	}, want: device.ErrInvalidValue},
	{name: "unbatchable call in a batch", frame: func(id, _, _, _ uint64) []byte {
		sub := protocol.AppendBatchCall(nil, protocol.NewHeader(protocol.OpMemAlloc, id+1), protocol.Bytes(&protocol.MemAllocReq{Size: 1}))
		return req(protocol.OpBatch, id, protocol.BatchReq{Count: 1}, sub, nil)
	}, want: device.ErrInvalidValue},
	{name: "malformed batch-sync", frame: func(id, _, _, _ uint64) []byte {
		return req(protocol.OpBatchSync, id, protocol.BatchReq{Count: 3}, make([]byte, 40), nil)
	}, want: device.ErrInvalidValue},
	{name: "batch-sync of no calls", frame: func(id, _, _, _ uint64) []byte {
		return req(protocol.OpBatchSync, id, protocol.BatchReq{}, nil, nil)
	}, want: device.ErrInvalidValue},
	{name: "batch-sync whose count hides its last call", frame: func(id, p, _, _ uint64) []byte {
		sub := protocol.AppendBatchCall(nil, protocol.NewHeader(protocol.OpMemset, id+1), protocol.Bytes(&protocol.MemsetReq{Dst: p, Count: 1, ElemSize: 1}))
		sub = protocol.AppendBatchCall(sub, protocol.NewHeader(protocol.OpMemGetInfo, id+2), protocol.Bytes(&protocol.DeviceReq{}))
		return req(protocol.OpBatchSync, id, protocol.BatchReq{Count: 1}, sub, nil)
	}, want: device.ErrInvalidValue},
	{name: "unbatchable call queued in a batch-sync", frame: func(id, _, _, _ uint64) []byte {
		sub := protocol.AppendBatchCall(nil, protocol.NewHeader(protocol.OpMemAlloc, id+1), protocol.Bytes(&protocol.MemAllocReq{Size: 1}))
		sub = protocol.AppendBatchCall(sub, protocol.NewHeader(protocol.OpMemGetInfo, id+2), protocol.Bytes(&protocol.DeviceReq{}))
		return req(protocol.OpBatchSync, id, protocol.BatchReq{Count: 2}, sub, nil)
	}, want: device.ErrInvalidValue},
	{name: "session call last in a batch-sync", frame: func(id, _, _, _ uint64) []byte {
		sub := protocol.AppendBatchCall(nil, protocol.NewHeader(protocol.OpBatchSync, id+1), protocol.Bytes(&protocol.BatchReq{}))
		return req(protocol.OpBatchSync, id, protocol.BatchReq{Count: 1}, sub, nil)
	}, want: device.ErrInvalidValue},
	{name: "no-reply call last in a batch-sync", frame: func(id, _, _, _ uint64) []byte {
		h := protocol.NewHeader(protocol.OpMemGetInfo, id+1)
		h.Flags = protocol.FlagNoReply
		sub := protocol.AppendBatchCall(nil, h, protocol.Bytes(&protocol.DeviceReq{}))
		return req(protocol.OpBatchSync, id, protocol.BatchReq{Count: 1}, sub, nil)
	}, want: device.ErrInvalidValue},
}

func TestBadInput(t *testing.T) {
	for _, tc := range badCases {
		t.Run(tc.name, func(t *testing.T) {
			port := tc.port
			if port == 0 {
				port = 1023
			}
			e := start(t, opts{port: port, mem: !tc.noMem, limits: protocol.Limits{MaxPayload: 1 << 20, MaxSegments: 1024}})
			p := e.alloc(4096)
			freed := e.alloc(4096)
			must[protocol.PtrReq, protocol.Empty](e, protocol.OpMemFree, protocol.PtrReq{Ptr: freed}, nil)
			ctx, _ := e.drv.Context(0)
			foreign, err := ctx.MemAlloc(4096)
			if err != nil {
				t.Fatal(err)
			}
			id := e.c.ID()
			ch := e.c.Expect(id)
			if err := e.c.Send(tc.frame(id, p, freed, uint64(foreign))); err != nil {
				t.Fatal(err)
			}
			f, err := waitReply(ch)
			if err != nil {
				t.Fatalf("no reply: %v", err)
			}
			status := device.Result(f.Status)
			if f.Opcode == protocol.OpBatch && f.Status == 0 {
				rep, _, _ := protocol.Decode[protocol.BatchReply](f.Payload)
				status = device.Result(rep.FirstError)
			}
			if status != tc.want {
				t.Fatalf("status %v, want %v", status, tc.want)
			}
			e.ping() // still serving
			if got := e.htod(p, []byte("ok")); got != 0 {
				t.Fatalf("valid copy after the bad request: %v", device.Result(got))
			}
		})
	}
}

func TestBadMagicClosesConnection(t *testing.T) {
	e := start(t, opts{})
	b := protocol.AppendFrame(nil, protocol.NewHeader(protocol.OpPing, 1), nil, nil)
	b[0] ^= 0xff
	ch := e.c.Expect(1)
	if err := e.c.Send(b); err != nil {
		t.Fatal(err)
	}
	f, err := waitReply(ch)
	if err != nil || device.Result(f.Status) != device.ErrInvalidValue {
		t.Fatalf("bad magic: %v %v", err, device.Result(f.Status))
	}
	<-e.c.Done() // the backend hangs up: the stream cannot be resynchronised
}

// TestHandlersCoverOps: every request opcode of the protocol table is served.
func TestHandlersCoverOps(t *testing.T) {
	e := start(t, opts{})
	for _, info := range protocol.Ops {
		if info.Op.Area() == protocol.AreaNotify || info.Op == protocol.OpGoodbye {
			continue
		}
		f, err := e.c.Call(info.Op, 0, make([]byte, info.ReqSize()), nil)
		if err != nil {
			t.Fatalf("%v: %v", info.Op, err)
		}
		// The host-share and ring calls answer 801 on a connection that
		// cannot share memory (this one); backend/hostmode's tests serve them.
		if info.Op == protocol.OpHostShare || info.Op == protocol.OpHostUnshare || info.Op == protocol.OpRingSetup {
			continue
		}
		// SET_OPTION's key 0 and MEM_SET_ACCESS's flags 0 (no access) are
		// requests the handlers answer 801 themselves.
		if device.Result(f.Status) == device.ErrNotSupported && info.Op != protocol.OpSetOption && info.Op != protocol.OpMemSetAccess {
			t.Errorf("%v (%#04x) has no handler", info.Op, uint16(info.Op))
		}
	}
	e.ping()
}
