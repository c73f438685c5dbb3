// Package fieldfuzz is a structure-aware fuzzer of the vgpu protocol: it
// takes a valid request of every opcode of protocol.Ops (a new opcode is
// covered as soon as it is in the table), mutates each field of its fixed
// part with boundary values (0, 1, 2^31, 2^32-1, 2^63, 2^64-1, sizes near
// the protocol's limits, the handles and pointers of the session and their
// neighbours), alone and inside a BATCH where the opcode is batchable, and
// sends each case to a real backend while a second, well-behaved client
// keeps doing checked round trips. The backend must answer every case,
// keep serving, count no caught panic and keep the good client's bytes
// exact.
//
// Run it in-process (TestFieldFuzz, FuzzFields: a session of the sim device
// behind a host-mode socket, in CI) or against a running backend:
// "vgpu fuzz --unix PATH" (scripts/gpu-fuzz.sh runs it against --device
// cuda on the GPU machine).
package fieldfuzz

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"reflect"
	"strings"

	"github.com/vgpu-project/vgpu/protocol"
)

// Field is one integer field of a request's fixed part (nested structs and
// arrays are flattened: "Src.Len", "Hash[0]").
type Field struct {
	Name   string
	Offset int
	Size   int // 1, 2, 4 or 8 bytes
}

// FieldsOf lists t's integer fields in wire order.
func FieldsOf(t reflect.Type) []Field {
	var out []Field
	var walk func(t reflect.Type, off int, name string)
	walk = func(t reflect.Type, off int, name string) {
		switch t.Kind() {
		case reflect.Struct:
			for i := 0; i < t.NumField(); i++ {
				f := t.Field(i)
				n := f.Name
				if name != "" {
					n = name + "." + n
				}
				walk(f.Type, off+int(f.Offset), n)
			}
		case reflect.Array:
			// The first and last elements (a hash, a name): enough to see
			// the array is not trusted.
			sz := int(t.Elem().Size())
			walk(t.Elem(), off, name+"[0]")
			if t.Len() > 1 {
				walk(t.Elem(), off+(t.Len()-1)*sz, name+"["+itoa(t.Len()-1)+"]")
			}
		case reflect.Uint8, reflect.Int8, reflect.Uint16, reflect.Int16, reflect.Uint32, reflect.Int32, reflect.Uint64, reflect.Int64, reflect.Float32:
			out = append(out, Field{Name: name, Offset: off, Size: int(t.Size())})
		}
	}
	walk(t, 0, "")
	return out
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// put writes v (truncated) into p at f.
func put(p []byte, f Field, v uint64) {
	for i := 0; i < f.Size; i++ {
		p[f.Offset+i] = byte(v >> (8 * i))
	}
}

// World names what a fuzzing session holds; seeds refer to it.
type World struct {
	Ptr, Ptr2  uint64 // device allocations of WorldBytes each
	Stream     uint64
	Event      uint64
	Event2     uint64
	Module     uint64
	Func       uint64
	ParamBytes uint32
	Region     uint64 // a registered region of WorldBytes at SegBase (0: none)
	// SegBase is guest(-physical) memory segments may name: a host-mode
	// share (or guest RAM); 0 when the connection has none.
	SegBase    uint64
	ShareBase  uint64 // the host-mode share at SegBase (0: none)
	CallbackID uint64 // next host-function id
}

// WorldBytes is the size of the world's allocations and region.
const WorldBytes = 64 << 10

// PTX is the module the world loads: one kernel with a 24-byte parameter
// block (what the sim device and a real driver both accept).
const PTX = `.version 8.0
.target sm_90
.address_size 64

.visible .global .align 4 .u32 counter;

.visible .entry saxpy(
	.param .u32 saxpy_param_0,
	.param .f32 saxpy_param_1,
	.param .u64 saxpy_param_2,
	.param .u64 saxpy_param_3
)
{
	ret;
}
`

// handleFor picks the world object a "Handle" field of op names.
func (w *World) handleFor(op protocol.Opcode) uint64 {
	switch {
	case op.Area() == protocol.AreaStream:
		return w.Stream
	case op.Area() == protocol.AreaEvent:
		return w.Event
	case op == protocol.OpFuncGetAttributes:
		return w.Func
	case op.Area() == protocol.AreaModule:
		return w.Module
	case op.Area() == protocol.AreaMemory:
		return w.Region
	}
	return 0
}

// Seed returns a valid request of info's opcode in w: its payload (fixed
// part and tail) and segments. Opcodes it knows get their proper form;
// any other opcode gets its fields filled by name (Device, Stream, Event,
// Module, Func, Handle, Ptr/Dst/Src, Size/Count/Len, ...), so a new opcode
// is fuzzed from the day it is added to protocol.Ops.
func (w *World) Seed(info *protocol.OpInfo) ([]byte, []protocol.Segment) {
	t := reflect.TypeOf(info.Req)
	v := reflect.New(t).Elem()
	var tail []byte
	var segs []protocol.Segment
	set := func(name string, x uint64) {
		f := v.FieldByName(name)
		if !f.IsValid() || !f.CanSet() {
			return
		}
		switch f.Kind() {
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(x)
		case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			f.SetInt(int64(x))
		}
	}
	// By name: what a new opcode gets too.
	for i := 0; i < t.NumField(); i++ {
		switch n := t.Field(i).Name; {
		case n == "Stream":
			set(n, w.Stream)
		case n == "Event" || n == "Start":
			set(n, w.Event)
		case n == "End":
			set(n, w.Event2)
		case n == "Module":
			set(n, w.Module)
		case n == "Func":
			set(n, w.Func)
		case n == "Handle":
			set(n, w.handleFor(info.Op))
		case n == "Ptr" || n == "Dst" || n == "Src":
			set(n, w.Ptr)
		case n == "Size" || n == "Count" || n == "Len":
			set(n, 64)
		case n == "ElemSize":
			set(n, 1)
		case strings.HasPrefix(n, "Grid") || strings.HasPrefix(n, "Block"):
			set(n, 1)
		case n == "CallbackID":
			set(n, w.CallbackID)
		}
	}
	inline := func(n uint64) protocol.BufRef { return protocol.BufRef{Kind: protocol.BufInline, Len: n} }
	switch info.Op {
	case protocol.OpHello:
		set("Major", uint64(protocol.Major))
		set("Role", uint64(protocol.RoleLibrary))
		set("Features", ^uint64(0))
	case protocol.OpBatch:
		set("Count", 1)
		ms := protocol.MemsetReq{Dst: w.Ptr, Count: 64, ElemSize: 1, Value: 7, Flags: protocol.CopyAsync}
		tail = protocol.AppendBatchCall(nil, protocol.NewHeader(protocol.OpMemset, 1), protocol.Bytes(&ms))
	case protocol.OpSetOption:
		set("Key", uint64(protocol.OptionCopyEngine))
		set("Value", protocol.EngineAuto)
	case protocol.OpDeviceSetLimit, protocol.OpDeviceGetLimit:
		set("Limit", 0)
		set("Value", 1024)
	case protocol.OpMemAlloc:
		set("Size", 4096)
	case protocol.OpMemFree:
		set("Ptr", w.Ptr2)
	case protocol.OpMemcpyHtoD:
		r := protocol.MemcpyHtoDReq{Dst: w.Ptr, Stream: 0, Src: inline(64)}
		if w.SegBase != 0 {
			r.Src = protocol.BufRef{Kind: protocol.BufSegments, Len: 8192}
			segs = []protocol.Segment{{GPA: w.SegBase, Len: 4096}, {GPA: w.SegBase + 8192, Len: 4096}}
		}
		v.Set(reflect.ValueOf(r))
		if w.SegBase == 0 {
			tail = make([]byte, 64)
		}
	case protocol.OpMemcpyDtoH:
		r := protocol.MemcpyDtoHReq{Src: w.Ptr, Dst: inline(64)}
		if w.Region != 0 {
			r.Dst = protocol.BufRef{Kind: protocol.BufRegion, Region: w.Region, Offset: 4096, Len: 4096}
		}
		v.Set(reflect.ValueOf(r))
	case protocol.OpMemcpyDtoD:
		set("Dst", w.Ptr2)
	case protocol.OpMemset:
		set("Value", 0x5a)
	case protocol.OpGuestRegister:
		if w.SegBase != 0 {
			set("Flags", uint64(protocol.RegisterMapped))
			set("Size", 8192)
			segs = []protocol.Segment{{GPA: w.SegBase + 16384, Len: 8192}}
		}
	case protocol.OpHostShare:
		set("Base", w.ShareBase+WorldBytes*4)
		set("Size", 4096)
	case protocol.OpHostUnshare:
		set("Base", w.ShareBase)
	case protocol.OpModuleLoad:
		img := []byte(PTX)
		set("Kind", uint64(protocol.ImagePTX))
		v.FieldByName("Hash").Set(reflect.ValueOf(sha256.Sum256(img)))
		v.FieldByName("Image").Set(reflect.ValueOf(inline(uint64(len(img)))))
		tail = img
	case protocol.OpModuleGetFunction, protocol.OpModuleGetGlobal:
		name := "saxpy"
		if info.Op == protocol.OpModuleGetGlobal {
			name = "counter"
		}
		set("NameLen", uint64(len(name)))
		tail = []byte(name)
	case protocol.OpFuncSetAttribute:
		set("Attr", 8)
		set("Value", 1024)
	case protocol.OpOccupancyMaxBlocks:
		set("BlockSize", 128)
		set("DynSmem", 1024)
	case protocol.OpLaunchKernel:
		set("BlockX", 32)
		set("ParamSize", uint64(w.ParamBytes))
		tail = make([]byte, w.ParamBytes)
	case protocol.OpStreamCreate:
		set("Flags", 1)
		set("Priority", ^uint64(0))
	case protocol.OpStreamSynchronize, protocol.OpStreamQuery, protocol.OpEventSynchronize, protocol.OpEventQuery:
	case protocol.OpEventCreate:
		set("Flags", 2)
	case protocol.OpHostFuncDone:
		set("CallbackID", 1<<62) // nothing pending: refused, harmlessly
	}
	payload := reflect.New(t)
	payload.Elem().Set(v)
	fixed := reflectBytes(payload)
	if info.ReqTail == protocol.TailBytes && tail == nil {
		tail = make([]byte, 8)
	}
	return append(fixed, tail...), segs
}

// reflectBytes returns the wire bytes of *T (p is a reflect.Value of *T):
// the payload structs are little-endian integers with explicit padding,
// so their binary encoding is their wire form (TestSeedsAreWireSized).
func reflectBytes(p reflect.Value) []byte {
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, p.Interface()); err != nil {
		panic(fmt.Sprintf("fieldfuzz: %v is not a plain payload struct: %v", p.Elem().Type(), err))
	}
	return b.Bytes()
}

// Values are the boundary values a field of size bytes is set to, with
// the world's own values and their neighbours (a handle of another kind,
// one past a pointer's allocation) and sizes near lim.
func Values(size int, w *World, lim protocol.Limits) []uint64 {
	vs := []uint64{0, 1, 2, 3, 7, 8, 0x7f, 0x80, 0xff}
	if size >= 2 {
		vs = append(vs, 0x7fff, 0x8000, 0xffff, 4095, 4096, 4097)
	}
	if size >= 4 {
		vs = append(vs, 1<<31-1, 1<<31, 1<<32-1,
			uint64(lim.MaxPayload)-1, uint64(lim.MaxPayload), uint64(lim.MaxPayload)+1,
			uint64(lim.MaxSegments)-1, uint64(lim.MaxSegments), uint64(lim.MaxSegments)+1,
			protocol.MaxParamBytes, protocol.MaxParamBytes+1, uint64(w.ParamBytes)+1)
	}
	if size >= 8 {
		vs = append(vs, 1<<32, 1<<40, 1<<62, 1<<63, 1<<63+1, 1<<64-1, 1<<64-4096, 0xfffffffffffffc00,
			w.Ptr, w.Ptr+1, w.Ptr+WorldBytes-1, w.Ptr+WorldBytes, w.Ptr-1, w.Ptr2,
			w.Stream, w.Event, w.Module, w.Func, w.Region, w.Stream+1, w.SegBase, w.SegBase+WorldBytes, w.SegBase-1)
	}
	mask := ^uint64(0)
	if size < 8 {
		mask = 1<<(8*size) - 1
	}
	seen := map[uint64]bool{}
	out := vs[:0:0]
	for _, v := range vs {
		v &= mask
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// Case is one request to send.
type Case struct {
	Op      protocol.Opcode // the opcode mutated (inside a BATCH when Batched)
	Field   string          // "" for the seed itself
	Value   uint64
	Batched bool
	Flags   protocol.Flags // header flags of the frame sent
	Payload []byte
	Segs    []protocol.Segment
}

// FrameOp is the opcode of the frame sent (OpBatch for a batched case).
func (c Case) FrameOp() protocol.Opcode {
	if c.Batched {
		return protocol.OpBatch
	}
	return c.Op
}

func (c Case) String() string {
	s := c.Op.String()
	if c.Batched {
		s = "BATCH[" + s + "]"
	}
	if c.Field != "" {
		s += "." + c.Field + "=" + hex(c.Value)
	}
	return s
}

func hex(v uint64) string {
	const d = "0123456789abcdef"
	if v == 0 {
		return "0x0"
	}
	var b []byte
	for ; v > 0; v >>= 4 {
		b = append([]byte{d[v&15]}, b...)
	}
	return "0x" + string(b)
}

// Destroys reports opcodes whose valid form ends world objects (the world
// is rebuilt after they succeed).
func Destroys(op protocol.Opcode) bool {
	switch op {
	case protocol.OpMemFree, protocol.OpGuestUnregister, protocol.OpHostUnshare, protocol.OpModuleUnload,
		protocol.OpStreamDestroy, protocol.OpEventDestroy, protocol.OpDeviceReset, protocol.OpGoodbye:
		return true
	}
	return false
}

// Cases returns every case for w: each opcode's seed, then every field of
// it set to every value; batchable opcodes also inside a BATCH; and the
// header flags guests may not set.
func Cases(w *World, lim protocol.Limits) []Case {
	var out []Case
	for i := range protocol.Ops {
		info := &protocol.Ops[i]
		out = append(out, OpCases(w, lim, info)...)
	}
	return out
}

// OpCases are one opcode's cases.
func OpCases(w *World, lim protocol.Limits, info *protocol.OpInfo) []Case {
	seed, segs := w.Seed(info)
	var out []Case
	out = append(out, Case{Op: info.Op, Payload: seed, Segs: segs})
	for _, f := range FieldsOf(reflect.TypeOf(info.Req)) {
		for _, v := range Values(f.Size, w, lim) {
			p := append([]byte(nil), seed...)
			put(p, f, v)
			out = append(out, Case{Op: info.Op, Field: f.Name, Value: v, Payload: p, Segs: segs})
			if info.Batchable() && segs == nil {
				sub := protocol.AppendBatchCall(nil, protocol.NewHeader(info.Op, 1), p)
				b := append(protocol.Bytes(&protocol.BatchReq{Count: 1}), sub...)
				out = append(out, Case{Op: info.Op, Field: f.Name, Value: v, Batched: true, Payload: b})
			}
		}
	}
	for _, fl := range []protocol.Flags{protocol.FlagReply, protocol.FlagNotify, protocol.FlagNoReply, 1 << 30} {
		out = append(out, Case{Op: info.Op, Field: "header.flags", Value: uint64(fl), Flags: fl, Payload: seed, Segs: segs})
	}
	return out
}
