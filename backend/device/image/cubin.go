package image

import (
	"bytes"
	"debug/elf"
	"fmt"
	"sort"
	"strings"
)

// .nv.info attribute encoding: each entry is format u8, attribute u8, then
// a value whose shape the format gives (cuobjdump -elf prints these).
const (
	eifmtNVal = 0x01 // no value (the u16 slot is still there, zero)
	eifmtBVal = 0x02 // u8 value in a u16 slot
	eifmtHVal = 0x03 // u16 value
	eifmtSVal = 0x04 // u16 size, then size bytes

	eiattrKParamInfo     = 0x17
	eiattrCBankParamSize = 0x19

	stoCUDAEntry = 0x10 // st_other bit of kernel entry symbols
)

func (m *Module) addCubin(b []byte) (err error) {
	// debug/elf has panicked on hostile input in past Go releases; an image
	// from a guest must never take the backend down.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: cubin: ELF parser failed: %v", ErrInvalid, r)
		}
	}()
	// CUDA ELF puts the CUDA ABI version in e_version, which debug/elf
	// refuses: parse a copy with e_version set to EV_CURRENT.
	if len(b) >= 24 {
		b = append([]byte(nil), b...)
		b[20], b[21], b[22], b[23] = 1, 0, 0, 0
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("%w: cubin: %v", ErrInvalid, err)
	}
	m.addSource("cubin")
	syms, _ := f.Symbols()
	entries := map[string]bool{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Other&stoCUDAEntry != 0 {
			entries[s.Name] = true
		}
	}
	for _, sec := range f.Sections {
		name, ok := strings.CutPrefix(sec.Name, ".nv.info.")
		if !ok || sec.Type == elf.SHT_NOBITS || sec.Size > uint64(len(b)) {
			continue
		}
		data, err := sec.Data()
		if err != nil {
			return fmt.Errorf("%w: cubin section %s: %v", ErrInvalid, sec.Name, err)
		}
		params, err := parseNVInfo(data)
		if err != nil {
			return fmt.Errorf("%w: cubin section %s: %v", ErrInvalid, sec.Name, err)
		}
		m.addKernel(&Kernel{Name: name, Params: params})
		delete(entries, name)
	}
	for name := range entries { // entry with no .nv.info: no parameters
		m.addKernel(&Kernel{Name: name})
	}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_OBJECT || int(s.Section) <= 0 || int(s.Section) >= len(f.Sections) {
			continue
		}
		sec := f.Sections[s.Section]
		if !strings.HasPrefix(sec.Name, ".nv.global") && !(strings.HasPrefix(sec.Name, ".nv.constant") && sec.Name != ".nv.constant0" && !strings.HasPrefix(sec.Name, ".nv.constant0.")) {
			continue
		}
		g := &Global{Name: s.Name, Size: s.Size}
		if sec.Type != elf.SHT_NOBITS && s.Size <= sec.Size && s.Value <= sec.Size-s.Size {
			if data, err := sec.Data(); err == nil && uint64(len(data)) >= s.Value+s.Size {
				g.Init = append([]byte(nil), data[s.Value:s.Value+s.Size]...)
			}
		}
		m.addGlobal(g)
	}
	return nil
}

// parseNVInfo returns the parameter layout from a .nv.info.<kernel>
// section's EIATTR_KPARAM_INFO entries (sorted by ordinal).
func parseNVInfo(d []byte) ([]Param, error) {
	type ord struct {
		ordinal uint16
		p       Param
	}
	var ps []ord
	cbankSize := -1
	for len(d) >= 2 {
		format, attr := d[0], d[1]
		d = d[2:]
		switch format {
		case eifmtNVal, eifmtBVal, eifmtHVal:
			if len(d) < 2 {
				return nil, fmt.Errorf("attribute %#x truncated", attr)
			}
			if attr == eiattrCBankParamSize {
				cbankSize = int(le16(d))
			}
			d = d[2:]
		case eifmtSVal:
			if len(d) < 2 {
				return nil, fmt.Errorf("attribute %#x truncated", attr)
			}
			n := int(le16(d))
			d = d[2:]
			if n > len(d) {
				return nil, fmt.Errorf("attribute %#x: %d value bytes, %d left", attr, n, len(d))
			}
			v := d[:n]
			d = d[n:]
			if attr == eiattrKParamInfo {
				if n < 12 {
					return nil, fmt.Errorf("KPARAM_INFO of %d bytes", n)
				}
				// index u32, ordinal u16, offset u16, then
				// size<<18 | cbank<<12 | space<<8 | logAlign.
				ps = append(ps, ord{le16(v[4:]), Param{Offset: uint32(le16(v[6:])), Size: le32(v[8:]) >> 18}})
			}
		default:
			return nil, fmt.Errorf("unknown attribute format %#x", format)
		}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].ordinal < ps[j].ordinal })
	out := make([]Param, 0, len(ps))
	for i, p := range ps {
		if int(p.ordinal) != i {
			return nil, fmt.Errorf("KPARAM_INFO ordinals not 0..%d", len(ps)-1)
		}
		out = append(out, p.p)
	}
	if cbankSize >= 0 && len(out) > 0 {
		last := out[len(out)-1]
		if int(last.Offset+last.Size) > cbankSize {
			return nil, fmt.Errorf("parameters end at %d, beyond CBANK_PARAM_SIZE %d", last.Offset+last.Size, cbankSize)
		}
	}
	return out, nil
}
