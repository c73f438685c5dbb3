package protocol

import (
	"fmt"
	"reflect"
	"strings"
)

// Opcode says what a frame asks for. The high byte is the area; numbers are
// wire values: explicit, never reused, never set by position.
type Opcode uint16

// Areas (high byte of an opcode).
const (
	AreaSession  = 0x00
	AreaDevice   = 0x01
	AreaMemory   = 0x02
	AreaModule   = 0x03
	AreaLaunch   = 0x04
	AreaStream   = 0x05
	AreaEvent    = 0x06
	AreaGraph    = 0x07 // reserved: host-side graphs
	AreaHostFunc = 0x08
	AreaNotify   = 0x09
	AreaLibrary  = 0x0a // reserved: cuBLAS/cuDNN by handle
)

// Tail says what may follow a payload's fixed part.
type Tail uint8

// Tail kinds.
const (
	TailNone  Tail = iota // nothing; longer payloads are refused
	TailBytes             // opaque bytes whose length the fixed part declares
)

// OpInfo is one row of the call registry (registry.go): everything every
// layer needs to know about one opcode. The generator
// (protocol/internal/gen) writes the Op constants, the C header's opcodes,
// docs/PROTOCOL.md, the backend's dispatch table and a golden frame from it.
type OpInfo struct {
	Op   Opcode
	Name string // C name suffix: VGPU_OP_<Name>
	// Go is the Go constant's suffix (Op<Go>) where the CamelCase of Name
	// does not spell it (MEMCPY_HTOD: MemcpyHtoD); empty otherwise.
	Go        string
	Req       any // request payload (fixed part); its field values are the golden frame's
	ReqTail   Tail
	Reply     any // reply payload (fixed part); nil for notifications
	ReplyTail Tail
	Shape     Shape
	// Segments: may carry guest-physical segments.
	Segments bool
	// FD: carries file descriptors beside the frame (host mode's unix
	// socket, SCM_RIGHTS in the sendmsg of the frame's first byte): one
	// (HOST_SHARE) or RingFDs (RING_SETUP).
	FD bool

	// Symbols are the guest library entry points (CUDA driver API, NVML,
	// vgpu's own) that send this opcode; each is a `hand` row of its
	// library's table in guest-lib/tables (a test checks).
	Symbols []string
	// Device is the device.Context method the handler drives (every
	// device, sim and cuda, implements it: a test checks); NoDevice says
	// why a call drives none (the session answers it itself).
	Device   string
	NoDevice string
	// Handler is the backend's handler (a Go expression in package
	// backend/session, usually a shape helper around a function:
	// reply(memAlloc), do(memFree)). Notifications have none.
	Handler string
	// Check is the validator of the request's arguments (a function of
	// backend/session: func(*Session, *call, *Req) error), run before the
	// handler; Unchecked says why a call needs none. Exactly one is set,
	// except on notifications (host to guest: nothing to check).
	Check     string
	Unchecked string
	// Stubs are guest library entry points generated from the row
	// (guest-lib/src/cuda/calls_gen.c): driver functions whose arguments
	// map one to one onto the request's fields and whose results come
	// from the reply's. Their rows in guest-lib/tables say `registry`.
	Stubs []CStub
}

// CStub is a generated guest entry point: `CUresult Symbol(Params...)`.
// It checks its pointers, fills the request from its In parameters, sends
// it (ShapeSync: waits for the reply; ShapeAsync: queues it) and writes
// the reply's fields through its Out parameters.
type CStub struct {
	Symbol  string
	Aliases []string // more exported names of the same function (_ptsz)
	Params  []CParam
}

// CParam is one parameter of a generated entry point.
type CParam struct {
	C     string // its C declaration: "CUgraph hGraph"
	Field string // the request field it fills, or the reply field it receives
	Kind  ParamKind
}

// ParamKind says how a generated entry point passes a parameter.
type ParamKind uint8

// Parameter kinds.
const (
	// InValue: an integer, copied into the request field.
	InValue ParamKind = iota + 1
	// InHandle: an opaque handle the backend gave out (a graph, an
	// executable graph), the session's handle itself; NULL is
	// CUDA_ERROR_INVALID_HANDLE.
	InHandle
	// InStream: a CUstream; the legacy and per-thread streams and NULL are
	// the guest's default stream (0).
	InStream
	// OutHandle: a pointer that receives a handle from the reply; NULL is
	// CUDA_ERROR_INVALID_VALUE.
	OutHandle
	// OutValue: a pointer that receives an integer from the reply; NULL is
	// CUDA_ERROR_INVALID_VALUE.
	OutValue
)

// Shape says how a call travels.
type Shape uint8

// Shapes.
const (
	// ShapeSync: the guest sends the request and waits for its reply.
	ShapeSync Shape = iota + 1
	// ShapeAsync: stream-ordered or cheap; the guest queues it (it may
	// travel inside BATCH, with no guest-physical segments) and learns of
	// a failure at the next synchronous call or from NOTIFY_ERROR.
	ShapeAsync
	// ShapeNotify: host to guest, unasked (FlagNotify); no reply.
	ShapeNotify
)

func (s Shape) String() string {
	switch s {
	case ShapeSync:
		return "sync"
	case ShapeAsync:
		return "async"
	case ShapeNotify:
		return "notify"
	}
	return fmt.Sprintf("Shape(%d)", uint8(s))
}

// Batchable says the call may appear inside OpBatch.
func (i *OpInfo) Batchable() bool { return i.Shape == ShapeAsync }

// GoName is the Go constant's name: Op<Go>, or Op<CamelCase of Name>.
func (i *OpInfo) GoName() string {
	if i.Go != "" {
		return "Op" + i.Go
	}
	var b strings.Builder
	b.WriteString("Op")
	for _, w := range strings.Split(i.Name, "_") {
		if w == "" {
			continue
		}
		b.WriteString(w[:1])
		b.WriteString(strings.ToLower(w[1:]))
	}
	return b.String()
}

// opSlots finds an opcode's index in Ops without hashing: by its area
// (high byte), then its number within the area (low byte); -1 is no
// opcode. Looked up for every frame (validation, batches, statistics).
var opSlots = func() (t [256][]int16) {
	for i := range Ops {
		a, n := Ops[i].Op>>8, int(Ops[i].Op&0xff)
		for len(t[a]) <= n {
			t[a] = append(t[a], -1)
		}
		if t[a][n] >= 0 {
			panic(fmt.Sprintf("protocol: opcode %#04x listed twice", uint16(Ops[i].Op)))
		}
		t[a][n] = int16(i)
	}
	return t
}()

// Slot returns op's index in Ops, or -1 when op is not an opcode of the
// table.
func Slot(op Opcode) int {
	if s := opSlots[op>>8]; int(op&0xff) < len(s) {
		return int(s[op&0xff])
	}
	return -1
}

// Lookup returns the table entry for op.
func Lookup(op Opcode) (*OpInfo, bool) {
	if i := Slot(op); i >= 0 {
		return &Ops[i], true
	}
	return nil, false
}

// String returns the opcode's name, or its number if unknown.
func (op Opcode) String() string {
	if info, ok := Lookup(op); ok {
		return info.Name
	}
	return fmt.Sprintf("OP_%#04x", uint16(op))
}

// Area returns the opcode's area (high byte).
func (op Opcode) Area() uint8 { return uint8(op >> 8) }

// ReqSize and ReplySize are the sizes of the fixed parts.
func (i *OpInfo) ReqSize() int { return sizeOf(i.Req) }

// ReplySize is the size of the reply's fixed part (0 for notifications).
func (i *OpInfo) ReplySize() int { return sizeOf(i.Reply) }

func sizeOf(v any) int {
	if v == nil {
		return 0
	}
	return int(reflect.TypeOf(v).Size())
}

// CheckRequest checks a request frame's payload size and segment use against
// the opcode table: the fixed part must be present, and a payload longer
// than it only for opcodes with a tail.
func CheckRequest(f *Frame) (*OpInfo, error) {
	info, ok := Lookup(f.Opcode)
	if !ok {
		return nil, fmt.Errorf("%w: %#04x", ErrUnknownOp, uint16(f.Opcode))
	}
	n := info.ReqSize()
	if len(f.Payload) < n {
		return info, fmt.Errorf("%w: %s payload is %d bytes, want %d", ErrPayload, info.Name, len(f.Payload), n)
	}
	if len(f.Payload) > n && info.ReqTail == TailNone {
		return info, fmt.Errorf("%w: %s payload is %d bytes, want %d", ErrPayload, info.Name, len(f.Payload), n)
	}
	if f.NumSegs > 0 && !info.Segments {
		return info, fmt.Errorf("%w: %s does not take guest-physical segments", ErrFlags, info.Name)
	}
	return info, nil
}
