package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"go/format"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/vgpu-project/vgpu/protocol"
)

// Paths of the generated files, relative to the repository's root.
const (
	headerPath   = "protocol/vgpu_protocol.h"
	docPath      = "docs/PROTOCOL.md"
	opcodesPath  = "protocol/opcodes_gen.go"
	dispatchPath = "backend/session/dispatch_gen.go"
	goldenDir    = "protocol/testdata/golden/ops"
	cGoldenPath  = "protocol/ctest/ops_gen.h"
)

// Files returns every generated file, by path relative to the repository's
// root. It checks the registry first: a row that is incomplete stops the
// generator with what to fill in.
func Files() (map[string][]byte, error) {
	if err := CheckRegistry(protocol.Ops); err != nil {
		return nil, err
	}
	h, err := Generate()
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{headerPath: h, docPath: GenerateDoc()}
	if files[opcodesPath], err = generateOpcodes(); err != nil {
		return nil, err
	}
	if files[dispatchPath], err = generateDispatch(); err != nil {
		return nil, err
	}
	for _, op := range protocol.Ops {
		files[goldenDir+"/"+GoldenName(&op)+".bin"] = GoldenFrames(&op)
	}
	files[cGoldenPath] = generateCGolden()
	if files[stubsPath], err = generateCStubs(); err != nil {
		return nil, err
	}
	return files, nil
}

// CheckRegistry checks that every row says what each layer needs.
func CheckRegistry(ops []protocol.OpInfo) error {
	var errs []error
	bad := func(op *protocol.OpInfo, format string, a ...any) {
		errs = append(errs, fmt.Errorf("registry row %#04x %s: %s", uint16(op.Op), op.Name, fmt.Sprintf(format, a...)))
	}
	seen := map[protocol.Opcode]bool{}
	for i := range ops {
		op := &ops[i]
		if seen[op.Op] {
			bad(op, "opcode listed twice")
		}
		seen[op.Op] = true
		if op.Name == "" || op.Req == nil {
			bad(op, "needs a Name and a Req type")
		}
		switch op.Shape {
		case protocol.ShapeNotify:
			if op.Op.Area() != protocol.AreaNotify || op.Reply != nil || op.Handler != "" || op.Check != "" || op.Unchecked != "" {
				bad(op, "a notification lives in area 0x09 and has no reply, handler or validator")
			}
		case protocol.ShapeSync, protocol.ShapeAsync:
			if op.Reply == nil || op.Handler == "" {
				bad(op, "needs a Reply type and a Handler (an expression of package backend/session)")
			}
			if (op.Check == "") == (op.Unchecked == "") {
				bad(op, "needs exactly one of Check (a validator of backend/session) and Unchecked (why none is needed)")
			}
		default:
			bad(op, "needs a Shape (ShapeSync, ShapeAsync or ShapeNotify)")
		}
		if (op.Device == "") == (op.NoDevice == "") {
			bad(op, "needs exactly one of Device (a device.Context method) and NoDevice (why it drives none)")
		}
		if op.FD && (op.Batchable() || op.Segments) {
			bad(op, "a call that carries an fd travels alone, without segments")
		}
		serves := map[string]bool{}
		for _, s := range op.Symbols {
			serves[s] = true
		}
		for _, st := range op.Stubs {
			for _, s := range append([]string{st.Symbol}, st.Aliases...) {
				if !serves[s] {
					bad(op, "stub %s is not in the row's Symbols", s)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// Stale returns the generated files under root that differ from files, and
// golden frames that no row generates any more.
func Stale(root string, files map[string][]byte) ([]string, error) {
	var stale []string
	for _, p := range sortedKeys(files) {
		got, err := os.ReadFile(filepath.Join(root, p))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		if err != nil || !bytes.Equal(got, files[p]) {
			stale = append(stale, p)
		}
	}
	extra, err := orphans(root, files)
	if err != nil {
		return nil, err
	}
	for _, p := range extra {
		stale = append(stale, p+" (no row generates it: delete it)")
	}
	return stale, nil
}

// Write writes files under root and removes golden frames no row generates.
func Write(root string, files map[string][]byte) error {
	for _, p := range sortedKeys(files) {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if old, err := os.ReadFile(full); err == nil && bytes.Equal(old, files[p]) {
			continue
		}
		if err := os.WriteFile(full, files[p], 0o644); err != nil {
			return err
		}
	}
	extra, err := orphans(root, files)
	if err != nil {
		return err
	}
	for _, p := range extra {
		if err := os.Remove(filepath.Join(root, p)); err != nil {
			return err
		}
	}
	return nil
}

func orphans(root string, files map[string][]byte) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(root, goldenDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		p := goldenDir + "/" + e.Name()
		if _, ok := files[p]; !ok {
			out = append(out, p)
		}
	}
	return out, nil
}

func sortedKeys(m map[string][]byte) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

const goHeader = "// Code generated by protocol/internal/gen from protocol/registry.go; DO NOT EDIT.\n// Regenerate: go generate ./protocol/...\n\n"

// generateOpcodes writes the Op constants.
func generateOpcodes() ([]byte, error) {
	var w bytes.Buffer
	w.WriteString(goHeader)
	w.WriteString("package protocol\n\n// Opcodes: one per row of Ops (registry.go).\nconst (\n")
	area := -1
	for _, op := range protocol.Ops {
		if a := int(op.Op.Area()); a != area {
			if area >= 0 {
				w.WriteString("\n")
			}
			area = a
		}
		fmt.Fprintf(&w, "\t%s Opcode = 0x%04x\n", op.GoName(), uint16(op.Op))
	}
	w.WriteString(")\n")
	return format.Source(w.Bytes())
}

// generateDispatch writes the backend's dispatch and validator tables.
func generateDispatch() ([]byte, error) {
	var w bytes.Buffer
	w.WriteString(goHeader)
	w.WriteString("package session\n\nimport (\n\t\"github.com/vgpu-project/vgpu/backend/device\"\n\t\"github.com/vgpu-project/vgpu/protocol\"\n)\n\n")
	w.WriteString("// The handler and the validator of every row of protocol.Ops.\nfunc init() {\n")
	w.WriteString("\thandlers = map[protocol.Opcode]handler{\n")
	for _, op := range protocol.Ops {
		if op.Handler != "" {
			fmt.Fprintf(&w, "\t\tprotocol.%s: %s,\n", op.GoName(), op.Handler)
		}
	}
	w.WriteString("\t}\n\tvalidators = map[protocol.Opcode]validator{\n")
	for _, op := range protocol.Ops {
		switch {
		case op.Check != "":
			fmt.Fprintf(&w, "\t\tprotocol.%s: args(%s),\n", op.GoName(), op.Check)
		case op.Unchecked != "":
			fmt.Fprintf(&w, "\t\tprotocol.%s: none(%s),\n", op.GoName(), strconv.Quote(op.Unchecked))
		default:
			fmt.Fprintf(&w, "\t\tprotocol.%s: none(%s),\n", op.GoName(), strconv.Quote("host to guest only: no handler serves it"))
		}
	}
	w.WriteString("\t}\n}\n\n")
	// device is referenced by handler expressions such as
	// onStream(device.Context.StreamQuery, false); keep the import used
	// whatever the rows say.
	w.WriteString("var _ device.Context\n")
	return format.Source(w.Bytes())
}

// GoldenName is the file name (without .bin) of op's golden frames.
func GoldenName(op *protocol.OpInfo) string { return strings.ToLower(op.Name) }

// GoldenFrames returns op's golden frames: its request (for a
// notification, the notification) built from the row's Req value, then,
// for a call, its successful reply built from the row's Reply value.
// The request id is the opcode, so every frame is distinct.
func GoldenFrames(op *protocol.OpInfo) []byte {
	id := uint64(op.Op)
	h := protocol.NewHeader(op.Op, id)
	if op.Shape == protocol.ShapeNotify {
		h.Flags = protocol.FlagNotify
	}
	out := protocol.AppendFrame(nil, h, encode(op.Req), nil)
	if op.Shape != protocol.ShapeNotify {
		req := protocol.NewHeader(op.Op, id)
		out = protocol.AppendFrame(out, protocol.Reply(&req, 0), encode(op.Reply), nil)
	}
	return out
}

// generateCGolden writes the table protocol/ctest/golden.c checks the
// golden frames of every row against: the opcode and the sizes of its
// payloads as the C header declares them.
func generateCGolden() []byte {
	var w bytes.Buffer
	w.WriteString("/* Code generated by protocol/internal/gen from protocol/registry.go; DO NOT EDIT. */\n")
	w.WriteString("/* One entry per registry row: its golden frames (testdata/golden/ops/<file>.bin), */\n")
	w.WriteString("/* its opcode and the C sizes of its request and reply (-1: notification).      */\n")
	w.WriteString("static const struct op_golden {\n\tconst char *file;\n\tuint16_t opcode;\n\tsize_t req_size;\n\tlong reply_size;\n} op_goldens[] = {\n")
	for _, op := range protocol.Ops {
		reply := "-1"
		if op.Reply != nil {
			reply = "(long)" + cSizeof(op.Reply)
		}
		fmt.Fprintf(&w, "\t{ \"%s\", VGPU_OP_%s, %s, %s },\n", GoldenName(&op), op.Name, cSizeof(op.Req), reply)
	}
	w.WriteString("};\n")
	return w.Bytes()
}

func cSizeof(v any) string {
	if binary.Size(v) == 0 {
		return "0"
	}
	return fmt.Sprintf("sizeof(struct %s)", cTypeName(reflect.TypeOf(v)))
}

// encode is v's wire encoding (little-endian, the struct's fields in
// order: what protocol.Bytes writes, here computed independently of it).
func encode(v any) []byte {
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, v); err != nil {
		panic(fmt.Sprintf("gen: encoding %T: %v", v, err))
	}
	return b.Bytes()
}
