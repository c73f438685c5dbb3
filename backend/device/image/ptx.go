package image

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

func looksLikePTX(b []byte) bool {
	if len(b) > 4096 {
		b = b[:4096]
	}
	return bytes.Contains(b, []byte(".version")) || bytes.Contains(b, []byte(".entry")) || bytes.Contains(b, []byte(".target"))
}

// stripComments removes // and /* */ comments.
func stripComments(s string) string {
	var sb strings.Builder
	sb.Grow(len(s))
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "//"):
			j := strings.IndexByte(s[i:], '\n')
			if j < 0 {
				return sb.String()
			}
			i += j
		case strings.HasPrefix(s[i:], "/*"):
			j := strings.Index(s[i+2:], "*/")
			if j < 0 {
				return sb.String()
			}
			i += j + 4
			sb.WriteByte(' ')
		default:
			sb.WriteByte(s[i])
			i++
		}
	}
	return sb.String()
}

// ptxTypeSize is the size of a PTX fundamental type.
func ptxTypeSize(t string) uint32 {
	switch t {
	case ".b8", ".u8", ".s8", ".pred":
		return 1
	case ".b16", ".u16", ".s16", ".f16", ".bf16":
		return 2
	case ".b32", ".u32", ".s32", ".f32", ".f16x2", ".bf16x2":
		return 4
	case ".b64", ".u64", ".s64", ".f64":
		return 8
	case ".b128":
		return 16
	}
	return 0
}

// decl is one PTX variable declaration: `[.align N] .type name[dims]`.
type decl struct {
	name  string
	size  uint64
	align uint64
}

func parseDecl(toks []string) (decl, error) {
	var d decl
	var elem uint32
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case t == ".align":
			if i+1 >= len(toks) {
				return d, fmt.Errorf("missing alignment")
			}
			a, err := strconv.ParseUint(toks[i+1], 0, 32)
			if err != nil || a == 0 || a&(a-1) != 0 {
				return d, fmt.Errorf("bad alignment %q", toks[i+1])
			}
			d.align = a
			i++
		case ptxTypeSize(t) != 0:
			elem = ptxTypeSize(t)
		case strings.HasPrefix(t, "."): // .ptr, .global, .const, .visible ...
		default:
			if d.name != "" {
				continue
			}
			name, dims, _ := strings.Cut(t, "[")
			d.name = name
			d.size = uint64(elem)
			for dims != "" {
				n, rest, ok := strings.Cut(dims, "]")
				if !ok {
					return d, fmt.Errorf("bad array %q", t)
				}
				if n == "" { // unsized extern array
					d.size = 0
					break
				}
				k, err := strconv.ParseUint(n, 0, 32)
				if err != nil || k == 0 || d.size > 1<<40/k {
					return d, fmt.Errorf("bad array size in %q", t)
				}
				d.size *= k
				dims = strings.TrimPrefix(rest, "[")
			}
		}
	}
	if d.name == "" || elem == 0 {
		return d, fmt.Errorf("declaration without name or type")
	}
	if d.align == 0 {
		d.align = uint64(elem)
	}
	return d, nil
}

func tokens(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool {
		return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == ','
	})
}

// addPTX finds `.entry name ( .param ... )` and module-scope `.global` /
// `.const` variables.
func (m *Module) addPTX(b []byte) error {
	if !looksLikePTX(b) {
		return fmt.Errorf("%w: PTX without .version/.target/.entry", ErrInvalid)
	}
	m.addSource("ptx")
	s := stripComments(string(b))
	depth := 0
	for i := 0; i < len(s); {
		switch s[i] {
		case '{':
			depth++
			i++
			continue
		case '}':
			depth--
			i++
			continue
		}
		if depth != 0 || s[i] != '.' {
			i++
			continue
		}
		// .version, .target, .address_size, .file end at the line's end.
		if word := s[i:min(len(s), i+14)]; strings.HasPrefix(word, ".version") || strings.HasPrefix(word, ".target") ||
			strings.HasPrefix(word, ".address_size") || strings.HasPrefix(word, ".file") {
			nl := strings.IndexByte(s[i:], '\n')
			if nl < 0 {
				break
			}
			i += nl
			continue
		}
		// A directive at module scope: read up to '{' or ';'.
		end := strings.IndexAny(s[i:], "{;")
		if end < 0 {
			end = len(s) - i
		}
		stmt := s[i : i+end]
		i += end
		toks := tokens(strings.NewReplacer("(", " ( ", ")", " ) ", "=", " = ").Replace(stmt))
		if err := m.ptxDirective(toks); err != nil {
			return fmt.Errorf("%w: PTX: %v", ErrInvalid, err)
		}
	}
	return nil
}

func (m *Module) ptxDirective(toks []string) error {
	k := 0
	for k < len(toks) && (toks[k] == ".visible" || toks[k] == ".weak" || toks[k] == ".extern") {
		if toks[k] == ".extern" {
			return nil
		}
		k++
	}
	if k >= len(toks) {
		return nil
	}
	switch toks[k] {
	case ".entry":
		if k+1 >= len(toks) {
			return fmt.Errorf(".entry without a name")
		}
		kern := &Kernel{Name: toks[k+1]}
		rest := toks[k+2:]
		if len(rest) > 0 && rest[0] == "(" {
			close := -1
			for j, t := range rest {
				if t == ")" {
					close = j
					break
				}
			}
			if close < 0 {
				return fmt.Errorf(".entry %s: unterminated parameter list", kern.Name)
			}
			var off uint64
			params := rest[1:close]
			for len(params) > 0 {
				if params[0] != ".param" {
					return fmt.Errorf(".entry %s: parameter starts with %q", kern.Name, params[0])
				}
				j := 1
				for j < len(params) && params[j] != ".param" {
					j++
				}
				d, err := parseDecl(params[1:j])
				if err != nil {
					return fmt.Errorf(".entry %s: %v", kern.Name, err)
				}
				off = (off + d.align - 1) &^ (d.align - 1)
				if off+d.size > 1<<20 {
					return fmt.Errorf(".entry %s: parameters too large", kern.Name)
				}
				kern.Params = append(kern.Params, Param{Offset: uint32(off), Size: uint32(d.size)})
				off += d.size
				params = params[j:]
			}
		}
		m.addKernel(kern)
	case ".global", ".const":
		var decl []string
		for _, t := range toks[k+1:] {
			if t == "=" {
				break
			}
			decl = append(decl, t)
		}
		d, err := parseDecl(decl)
		if err != nil {
			return fmt.Errorf("%s variable: %v", toks[k], err)
		}
		if d.size > 0 {
			// Initialisers are not evaluated: the variable starts zeroed.
			m.addGlobal(&Global{Name: d.name, Size: d.size})
		}
	}
	return nil
}
