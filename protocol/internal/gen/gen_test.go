package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/protocol"
)

// Every row's golden frames parse, pass the request checks and carry the
// payload sizes of the row's types.
func TestGoldenFramesParse(t *testing.T) {
	for i := range protocol.Ops {
		op := &protocol.Ops[i]
		t.Run(op.Name, func(t *testing.T) {
			b := GoldenFrames(op)
			f, n, err := protocol.ParseFrame(b, protocol.DefaultLimits)
			if err != nil {
				t.Fatal(err)
			}
			if f.Opcode != op.Op || len(f.Payload) != op.ReqSize() {
				t.Fatalf("request: opcode %v, %d payload bytes (want %v, %d)", f.Opcode, len(f.Payload), op.Op, op.ReqSize())
			}
			if op.Shape == protocol.ShapeNotify {
				if f.Flags != protocol.FlagNotify || n != len(b) {
					t.Fatalf("notification: flags %#x, %d of %d bytes", f.Flags, n, len(b))
				}
				return
			}
			if _, err := protocol.CheckRequest(&f); err != nil {
				t.Fatalf("CheckRequest: %v", err)
			}
			r, m, err := protocol.ParseFrame(b[n:], protocol.DefaultLimits)
			if err != nil || n+m != len(b) {
				t.Fatalf("reply: %v (%d+%d of %d bytes)", err, n, m, len(b))
			}
			if r.Flags&protocol.FlagReply == 0 || r.RequestID != f.RequestID || len(r.Payload) != op.ReplySize() {
				t.Fatalf("reply: flags %#x, id %d, %d payload bytes (want a reply to %d, %d bytes)", r.Flags, r.RequestID, len(r.Payload), f.RequestID, op.ReplySize())
			}
		})
	}
}

// Every symbol a row serves is one the guest library implements: a
// `registry` row of its table where the registry generates it (Stubs), a
// `hand` row otherwise. The registry cannot name an entry point that
// answers NOT_SUPPORTED, and a table cannot claim a generated entry point
// the registry does not write.
func TestSymbolsServed(t *testing.T) {
	kind := map[string]string{}
	for _, lib := range []string{"libcuda.so.1", "libnvidia-ml.so.1"} {
		f, err := os.Open(filepath.Join("..", "..", "..", "guest-lib", "tables", lib+".tbl"))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			w := strings.Fields(sc.Text())
			if len(w) >= 3 && !strings.HasPrefix(w[0], "#") {
				kind[w[0]] = w[2]
			}
		}
		f.Close()
	}
	generated := map[string]bool{}
	for _, op := range protocol.Ops {
		for _, st := range op.Stubs {
			for _, s := range append([]string{st.Symbol}, st.Aliases...) {
				generated[s] = true
			}
		}
	}
	for _, op := range protocol.Ops {
		for _, s := range op.Symbols {
			want := "hand"
			if generated[s] {
				want = "registry"
			}
			if kind[s] != want {
				t.Errorf("%s serves %s: guest-lib/tables says %q, want %q", op.Name, s, kind[s], want)
			}
		}
	}
	for s, k := range kind {
		if k == "registry" && !generated[s] {
			t.Errorf("guest-lib/tables marks %s `registry`, but no row of protocol/registry.go generates it", s)
		}
	}
}

// CheckRegistry refuses a row that leaves a layer undecided.
func TestCheckRegistry(t *testing.T) {
	good := protocol.OpInfo{Op: 0x0a01, Name: "X", Req: protocol.Empty{}, Reply: protocol.Empty{}, Shape: protocol.ShapeSync,
		Device: "Synchronize", Handler: "do(noop)", Unchecked: "empty"}
	tests := []struct {
		name string
		edit func(*protocol.OpInfo)
		ok   bool
	}{
		{"good", func(*protocol.OpInfo) {}, true},
		{"no shape", func(o *protocol.OpInfo) { o.Shape = 0 }, false},
		{"no handler", func(o *protocol.OpInfo) { o.Handler = "" }, false},
		{"no validator decision", func(o *protocol.OpInfo) { o.Unchecked = "" }, false},
		{"both validator and reason", func(o *protocol.OpInfo) { o.Check = "checkX" }, false},
		{"no device decision", func(o *protocol.OpInfo) { o.Device = "" }, false},
		{"device and reason", func(o *protocol.OpInfo) { o.NoDevice = "why" }, false},
		{"notify outside area 9", func(o *protocol.OpInfo) {
			o.Shape = protocol.ShapeNotify
			o.Reply = nil
			o.Handler = ""
			o.Unchecked = ""
		}, false},
		{"fd in a batch", func(o *protocol.OpInfo) { o.Shape = protocol.ShapeAsync; o.FD = true }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			row := good
			tc.edit(&row)
			err := CheckRegistry([]protocol.OpInfo{row})
			if (err == nil) != tc.ok {
				t.Fatalf("CheckRegistry: %v (want ok %v)", err, tc.ok)
			}
		})
	}
	dup := []protocol.OpInfo{good, good}
	if CheckRegistry(dup) == nil {
		t.Fatal("a duplicate opcode passed")
	}
}
