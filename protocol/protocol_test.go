package protocol

import (
	"bytes"
	"errors"
	"os/exec"
	"reflect"
	"testing"
)

// Every file generated from the call registry (the C header, the Op
// constants, docs/PROTOCOL.md, the backend's dispatch table, the golden
// frames and their C table) must be what the generator writes now.
func TestGeneratedNotStale(t *testing.T) {
	out, err := exec.Command("go", "run", "./internal/gen", "-root", "..", "-check").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// Payload structs: naturally aligned, explicit padding, size a multiple of 8.
func TestPayloadLayouts(t *testing.T) {
	for _, op := range Ops {
		for _, v := range []any{op.Req, op.Reply} {
			if v == nil {
				continue
			}
			typ := reflect.TypeOf(v)
			if typ.Size()%Align != 0 {
				t.Errorf("%s: %s is %d bytes, not a multiple of %d", op.Name, typ.Name(), typ.Size(), Align)
			}
			var off uintptr
			for i := 0; i < typ.NumField(); i++ {
				f := typ.Field(i)
				if f.Offset != off {
					t.Errorf("%s.%s: implicit padding", typ.Name(), f.Name)
				}
				off = f.Offset + f.Type.Size()
			}
		}
	}
}

func TestDecodeHeaderErrors(t *testing.T) {
	good := helloReq()
	mutate := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"short", good[:10], ErrShort},
		{"magic", mutate(func(b []byte) { b[0] ^= 0xff }), ErrMagic},
		{"major", mutate(func(b []byte) { b[4] = 9 }), ErrVersion},
		{"unknown flag", mutate(func(b []byte) { b[11] = 0x80 }), ErrFlags},
		{"segments without flag", mutate(func(b []byte) { b[12] = 1 }), ErrFlags},
		{"flag without segments", mutate(func(b []byte) { b[8] = byte(FlagSegments) }), ErrFlags},
		{"more without segments", mutate(func(b []byte) { b[8] = byte(FlagMoreSegments) }), ErrFlags},
		{"huge payload", mutate(func(b []byte) { b[27] = 0xff }), ErrTooLarge},
		{"huge segment count", mutate(func(b []byte) { b[8] = byte(FlagSegments); b[15] = 0xff }), ErrTooLarge},
		{"truncated payload", good[:len(good)-8], ErrShort},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ParseFrame(tt.in, DefaultLimits)
			if !errors.Is(err, tt.want) {
				t.Fatalf("ParseFrame = %v, want %v", err, tt.want)
			}
			_, err = ReadFrame(bytes.NewReader(tt.in), DefaultLimits)
			if err == nil {
				t.Fatal("ReadFrame accepted a bad frame")
			}
		})
	}
}

func TestCheckRequest(t *testing.T) {
	tests := []struct {
		name  string
		frame []byte
		want  error
	}{
		{"unknown opcode", AppendFrame(nil, NewHeader(0x7777, 1), nil, nil), ErrUnknownOp},
		{"short payload", AppendFrame(nil, NewHeader(OpMemAlloc, 1), make([]byte, 8), nil), ErrPayload},
		{"tail on fixed op", AppendFrame(nil, NewHeader(OpMemAlloc, 1), make([]byte, 24), nil), ErrPayload},
		{"segments on op without", AppendFrame(nil, NewHeader(OpMemAlloc, 1), make([]byte, 16), []Segment{{1, 1}}), ErrFlags},
		{"ok", AppendFrame(nil, NewHeader(OpMemAlloc, 1), make([]byte, 16), nil), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, _, err := ParseFrame(tt.frame, DefaultLimits)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := CheckRequest(&f); !errors.Is(err, tt.want) {
				t.Fatalf("CheckRequest = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestBatch(t *testing.T) {
	f, _, err := ParseFrame(batchTwo(), DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	it, n, err := NewBatchIter(f.Payload, DefaultLimits, DefaultMaxBatch)
	if err != nil || n != 2 {
		t.Fatalf("NewBatchIter: n=%d err=%v", n, err)
	}
	var ops []Opcode
	for sub, ok := it.Next(); ok; sub, ok = it.Next() {
		ops = append(ops, sub.Opcode)
	}
	if it.Err() != nil || !reflect.DeepEqual(ops, []Opcode{OpMemset, OpEventRecord}) {
		t.Fatalf("ops %v err %v", ops, it.Err())
	}
	// Too many calls, and a non-batchable call inside.
	if _, _, err := NewBatchIter(f.Payload, DefaultLimits, 1); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("count limit: %v", err)
	}
	bad := AppendBatchCall(Bytes(&BatchReq{Count: 1}), NewHeader(OpMemAlloc, 9), make([]byte, 16))
	it, _, _ = NewBatchIter(bad, DefaultLimits, DefaultMaxBatch)
	if _, ok := it.Next(); ok || !errors.Is(it.Err(), ErrPayload) {
		t.Fatalf("non-batchable call accepted: %v", it.Err())
	}
}

func TestSplitSegments(t *testing.T) {
	segs := []Segment{{0x1000, 4096}, {0x3000, 100}, {0x9000, 50}}
	tests := []struct {
		name string
		lens []uint64
		ok   bool
	}{
		{"exact", []uint64{4196, 50}, true},
		{"one buffer", []uint64{4246}, true},
		{"short", []uint64{4096}, false},
		{"segment spans buffers", []uint64{4000, 246}, false},
		{"too long", []uint64{5000}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := SplitSegments(segs, tt.lens)
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v", err)
			}
		})
	}
	if _, err := SplitSegments([]Segment{{^uint64(0) - 10, 100}}, []uint64{100}); err == nil {
		t.Fatal("wrap-around segment accepted")
	}
}

func TestInlineBytes(t *testing.T) {
	tail := []byte("hello world")
	if b, err := InlineBytes(tail, BufRef{Kind: BufInline, Offset: 6, Len: 5}); err != nil || string(b) != "world" {
		t.Fatalf("got %q %v", b, err)
	}
	for _, ref := range []BufRef{
		{Kind: BufInline, Offset: 6, Len: 6},
		{Kind: BufInline, Offset: 1 << 63, Len: 1 << 63},
		{Kind: BufSegments, Len: 1},
	} {
		if _, err := InlineBytes(tail, ref); err == nil {
			t.Errorf("accepted %+v", ref)
		}
	}
}

// Slot and Lookup find every opcode of the table at its own index, and
// nothing else: not an area's number past its last opcode, not an area
// without opcodes, not the number of one area's opcode in another area.
func TestSlot(t *testing.T) {
	for i := range Ops {
		if got := Slot(Ops[i].Op); got != i {
			t.Fatalf("Slot(%v) = %d, want %d", Ops[i].Op, got, i)
		}
		if info, ok := Lookup(Ops[i].Op); !ok || info != &Ops[i] {
			t.Fatalf("Lookup(%v) = %v, %v", Ops[i].Op, info, ok)
		}
	}
	for _, op := range []Opcode{0, 0x1101, 0xffff, 0x00ff, OpHostFuncDone | 0xf0, OpHostFuncDone&0xff | 0xfe00} {
		if i := Slot(op); i >= 0 && Ops[i].Op != op {
			t.Fatalf("Slot(%#04x) = %d, which is %v", uint16(op), i, Ops[i].Op)
		} else if i < 0 {
			if _, ok := Lookup(op); ok {
				t.Fatalf("Lookup(%#04x) found an entry Slot did not", uint16(op))
			}
		}
	}
	if Slot(0x1101) != -1 || Slot(0xffff) != -1 {
		t.Fatal("opcodes outside the table have a slot")
	}
}
