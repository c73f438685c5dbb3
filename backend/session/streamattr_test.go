package session_test

import (
	"math"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/protocol"
)

// Stream attributes are the device's, set and read through the session's
// streams (and its default stream); what is not a stream attribute, a
// value out of range or an access policy window outside the session's
// memory is refused.
func TestStreamAttributes(t *testing.T) { testStreamAttributes(t, opts{}) }

func testStreamAttributes(t *testing.T, o opts) {
	e := start(t, o)
	a, _ := must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{}, nil)
	b, _ := must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{Priority: -1}, nil)
	mem, _ := must[protocol.MemAllocReq, protocol.PtrReply](e, protocol.OpMemAlloc, protocol.MemAllocReq{Size: 1 << 20}, nil)
	get := func(s uint64, attr uint32) protocol.StreamAttrValue {
		t.Helper()
		v, _ := must[protocol.StreamAttrReq, protocol.StreamAttrValue](e, protocol.OpStreamGetAttribute, protocol.StreamAttrReq{Stream: s, Attr: attr}, nil)
		return v
	}
	set := func(s uint64, attr uint32, v protocol.StreamAttrValue) {
		t.Helper()
		must[protocol.StreamAttrReq, protocol.Empty](e, protocol.OpStreamSetAttribute, protocol.StreamAttrReq{Stream: s, Attr: attr, Value: v}, nil)
	}
	if p := int32(get(b.Handle, device.StreamAttrPriority).Value); p != -1 {
		t.Fatalf("priority of a stream created with -1: %d", p)
	}
	set(a.Handle, device.StreamAttrSyncPolicy, protocol.StreamAttrValue{Value: 4})
	if v := get(a.Handle, device.StreamAttrSyncPolicy).Value; v != 4 {
		t.Fatalf("synchronization policy %d after setting 4 (blocking sync)", v)
	}
	win := protocol.AccessPolicyWindow{Base: mem.Ptr + 4096, Bytes: 64 << 10, HitRatio: math.Float32bits(0.5), HitProp: 2, MissProp: 1}
	set(a.Handle, device.StreamAttrAccessPolicyWindow, protocol.StreamAttrValue{Window: win})
	if w := get(a.Handle, device.StreamAttrAccessPolicyWindow).Window; w != win {
		t.Fatalf("access policy window %+v, want %+v", w, win)
	}
	set(a.Handle, device.StreamAttrMemSyncDomain, protocol.StreamAttrValue{Value: 1})
	// Copied: b takes a's attributes.
	must[protocol.StreamCopyAttrReq, protocol.Empty](e, protocol.OpStreamCopyAttributes, protocol.StreamCopyAttrReq{Dst: b.Handle, Src: a.Handle}, nil)
	if v, w := get(b.Handle, device.StreamAttrSyncPolicy).Value, get(b.Handle, device.StreamAttrAccessPolicyWindow).Window; v != 4 || w != win {
		t.Fatalf("copied: policy %d, window %+v", v, w)
	}
	// The default stream has attributes too.
	set(0, device.StreamAttrPriority, protocol.StreamAttrValue{Value: uint32(0xffffffff)}) // -1
	get(0, device.StreamAttrPriority)
	// A window of 0 bytes turns the hint off.
	set(a.Handle, device.StreamAttrAccessPolicyWindow, protocol.StreamAttrValue{})

	nan := math.Float32bits(float32(math.NaN()))
	tests := []struct {
		name string
		op   protocol.Opcode
		req  []byte
		want device.Result
	}{
		{"a foreign stream", protocol.OpStreamSetAttribute, protocol.Bytes(&protocol.StreamAttrReq{Stream: 0x9999, Attr: 3, Value: protocol.StreamAttrValue{Value: 1}}), device.ErrInvalidHandle},
		{"get of a foreign stream", protocol.OpStreamGetAttribute, protocol.Bytes(&protocol.StreamAttrReq{Stream: 0x9999, Attr: 3}), device.ErrInvalidHandle},
		{"copy from a foreign stream", protocol.OpStreamCopyAttributes, protocol.Bytes(&protocol.StreamCopyAttrReq{Dst: a.Handle, Src: 0x9999}), device.ErrInvalidHandle},
		{"copy to a foreign stream", protocol.OpStreamCopyAttributes, protocol.Bytes(&protocol.StreamCopyAttrReq{Dst: 0x9999, Src: a.Handle}), device.ErrInvalidHandle},
		{"a launch attribute (cooperative)", protocol.OpStreamSetAttribute, protocol.Bytes(&protocol.StreamAttrReq{Stream: a.Handle, Attr: 2, Value: protocol.StreamAttrValue{Value: 1}}), device.ErrInvalidValue},
		{"attribute 0", protocol.OpStreamGetAttribute, protocol.Bytes(&protocol.StreamAttrReq{Stream: a.Handle}), device.ErrInvalidValue},
		{"attribute 2^32-1", protocol.OpStreamGetAttribute, protocol.Bytes(&protocol.StreamAttrReq{Stream: a.Handle, Attr: math.MaxUint32}), device.ErrInvalidValue},
		{"a get with a value", protocol.OpStreamGetAttribute, protocol.Bytes(&protocol.StreamAttrReq{Stream: a.Handle, Attr: 3, Value: protocol.StreamAttrValue{Value: 1}}), device.ErrInvalidValue},
		{"sync policy 0", protocol.OpStreamSetAttribute, protocol.Bytes(&protocol.StreamAttrReq{Stream: a.Handle, Attr: 3}), device.ErrInvalidValue},
		{"sync policy 5", protocol.OpStreamSetAttribute, protocol.Bytes(&protocol.StreamAttrReq{Stream: a.Handle, Attr: 3, Value: protocol.StreamAttrValue{Value: 5}}), device.ErrInvalidValue},
		{"sync domain 2", protocol.OpStreamSetAttribute, protocol.Bytes(&protocol.StreamAttrReq{Stream: a.Handle, Attr: 10, Value: protocol.StreamAttrValue{Value: 2}}), device.ErrInvalidValue},
		{"a domain map naming domain 200", protocol.OpStreamSetAttribute, protocol.Bytes(&protocol.StreamAttrReq{Stream: a.Handle, Attr: 9, Value: protocol.StreamAttrValue{Value: 200 << 8}}), device.ErrInvalidValue},
		{"a domain map of three bytes", protocol.OpStreamSetAttribute, protocol.Bytes(&protocol.StreamAttrReq{Stream: a.Handle, Attr: 9, Value: protocol.StreamAttrValue{Value: 0x10000}}), device.ErrInvalidValue},
		{"a window with a priority", protocol.OpStreamSetAttribute, protocol.Bytes(&protocol.StreamAttrReq{Stream: a.Handle, Attr: 8, Value: protocol.StreamAttrValue{Window: win}}), device.ErrInvalidValue},
		{"a window over foreign memory", protocol.OpStreamSetAttribute, protocol.Bytes(&protocol.StreamAttrReq{Stream: a.Handle, Attr: 1, Value: protocol.StreamAttrValue{Window: protocol.AccessPolicyWindow{Base: 0x1000, Bytes: 4096}}}), device.ErrInvalidValue},
		{"a window past its allocation", protocol.OpStreamSetAttribute, protocol.Bytes(&protocol.StreamAttrReq{Stream: a.Handle, Attr: 1, Value: protocol.StreamAttrValue{Window: protocol.AccessPolicyWindow{Base: mem.Ptr + 4096, Bytes: 1 << 20}}}), device.ErrInvalidValue},
		{"a window past the address space", protocol.OpStreamSetAttribute, protocol.Bytes(&protocol.StreamAttrReq{Stream: a.Handle, Attr: 1, Value: protocol.StreamAttrValue{Window: protocol.AccessPolicyWindow{Base: math.MaxUint64 - 10, Bytes: 4096}}}), device.ErrInvalidValue},
		{"a window over the device's largest", protocol.OpStreamSetAttribute, protocol.Bytes(&protocol.StreamAttrReq{Stream: a.Handle, Attr: 1, Value: protocol.StreamAttrValue{Window: protocol.AccessPolicyWindow{Base: mem.Ptr, Bytes: 1 << 40}}}), device.ErrInvalidValue},
		{"hit ratio NaN", protocol.OpStreamSetAttribute, protocol.Bytes(&protocol.StreamAttrReq{Stream: a.Handle, Attr: 1, Value: protocol.StreamAttrValue{Window: protocol.AccessPolicyWindow{Base: mem.Ptr, Bytes: 4096, HitRatio: nan}}}), device.ErrInvalidValue},
		{"hit ratio 2", protocol.OpStreamSetAttribute, protocol.Bytes(&protocol.StreamAttrReq{Stream: a.Handle, Attr: 1, Value: protocol.StreamAttrValue{Window: protocol.AccessPolicyWindow{Base: mem.Ptr, Bytes: 4096, HitRatio: math.Float32bits(2)}}}), device.ErrInvalidValue},
		{"hit property 3", protocol.OpStreamSetAttribute, protocol.Bytes(&protocol.StreamAttrReq{Stream: a.Handle, Attr: 1, Value: protocol.StreamAttrValue{Window: protocol.AccessPolicyWindow{Base: mem.Ptr, Bytes: 4096, HitProp: 3}}}), device.ErrInvalidValue},
		{"default stream of no device", protocol.OpStreamGetAttribute, protocol.Bytes(&protocol.StreamAttrReq{Device: 4, Attr: 3}), device.ErrInvalidDevice},
	}
	for _, tc := range tests {
		f, err := e.c.Call(tc.op, 0, tc.req, nil)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, tc.name, f.Status, tc.want)
	}
	e.ping()
}
