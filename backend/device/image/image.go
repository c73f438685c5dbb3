// Package image reads CUDA module images — PTX text, cubin (ELF) and fatbin
// containers — far enough to list their kernels with parameter layouts and
// their global variables. The sim device uses it to stand in for
// cuModuleLoadData; the cuda device uses it when the driver lacks
// cuFuncGetParamInfo (drivers before CUDA 12.4).
//
// Trust: images come from guests. Every offset and length is bounds-checked;
// parsing never panics and never allocates more than a small multiple of the
// image's size (LZ4 output is capped by the fatbin entry's declared size,
// itself capped by MaxDecompressed).
package image

import (
	"errors"
	"fmt"
)

// Param is one kernel parameter: its offset and size in the parameter block.
type Param struct {
	Offset uint32
	Size   uint32
}

// Kernel is one entry point.
type Kernel struct {
	Name   string
	Params []Param
}

// Global is one module-scope variable (__device__ or __constant__).
type Global struct {
	Name string
	Size uint64
	Init []byte // initial bytes, if the image has them (nil: zero)
}

// Module is what a parsed image holds. Kernels and globals are keyed by
// (mangled) name.
type Module struct {
	Kernels map[string]*Kernel
	Globals map[string]*Global
	// Sources says which kinds of images contributed ("ptx", "cubin").
	Sources []string
	// Code lists a fatbin's entries: what each is built for. Empty for a
	// bare cubin or PTX text, which name no architecture the way a
	// fatbin's entry headers do.
	Code []Code
}

// Code is one fatbin entry: machine code (SASS in an ELF cubin) for one
// architecture, or PTX for a virtual one.
type Code struct {
	PTX  bool
	Arch uint32 // major*10 + minor, as nvcc's sm_XY / compute_XY
}

// RunsOn says whether a device of compute capability major.minor can run
// the image, as the driver decides it (CUDA's compatibility rules): SASS
// built for sm_XY runs on X.Z with Z >= Y, the same major only; PTX for
// compute_XY is compiled for any device of capability X.Y or later. An
// image with no entry list (bare cubin or PTX) is left to the loader.
func (m *Module) RunsOn(major, minor int) bool {
	if len(m.Code) == 0 {
		return true
	}
	dev := uint32(major*10 + minor)
	for _, c := range m.Code {
		if c.PTX && c.Arch <= dev {
			return true
		}
		if !c.PTX && c.Arch/10 == uint32(major) && c.Arch <= dev {
			return true
		}
	}
	return false
}

// Kinds of images (the protocol's ImageAuto/Fatbin/Cubin/PTX values).
const (
	KindAuto   = 0
	KindFatbin = 1
	KindCubin  = 2
	KindPTX    = 3
)

// MaxDecompressed bounds a fatbin entry's decompressed size.
const MaxDecompressed = 1 << 30

// ErrInvalid is wrapped by every parse error.
var ErrInvalid = errors.New("image: invalid module image")

const (
	fatbinMagic = 0xBA55ED50
	elfMagic    = "\x7fELF"
)

// Parse reads an image of the given kind (KindAuto: detect).
func Parse(b []byte, kind uint32) (*Module, error) {
	m := &Module{Kernels: map[string]*Kernel{}, Globals: map[string]*Global{}}
	if kind == KindAuto {
		kind = Detect(b)
	}
	var err error
	switch kind {
	case KindFatbin:
		err = m.addFatbin(b, 0)
	case KindCubin:
		err = m.addCubin(b)
	case KindPTX:
		err = m.addPTX(b)
	default:
		return nil, fmt.Errorf("%w: not a fatbin, cubin or PTX image (first bytes % x)", ErrInvalid, head(b))
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Detect guesses an image's kind from its first bytes.
func Detect(b []byte) uint32 {
	switch {
	case len(b) >= 4 && le32(b) == fatbinMagic:
		return KindFatbin
	case len(b) >= 4 && string(b[:4]) == elfMagic:
		return KindCubin
	case looksLikePTX(b):
		return KindPTX
	}
	return KindAuto
}

func head(b []byte) []byte {
	if len(b) > 8 {
		return b[:8]
	}
	return b
}

// merge adds k unless a kernel of that name is already known (cubin
// layouts, parsed first, win over PTX).
func (m *Module) addKernel(k *Kernel) {
	if _, ok := m.Kernels[k.Name]; !ok {
		m.Kernels[k.Name] = k
	}
}

func (m *Module) addGlobal(g *Global) {
	if old, ok := m.Globals[g.Name]; !ok || (old.Init == nil && g.Init != nil) {
		m.Globals[g.Name] = g
	}
}

func (m *Module) addSource(s string) {
	for _, x := range m.Sources {
		if x == s {
			return
		}
	}
	m.Sources = append(m.Sources, s)
}

func le16(b []byte) uint16 { return uint16(b[0]) | uint16(b[1])<<8 }
func le32(b []byte) uint32 { return uint32(le16(b)) | uint32(le16(b[2:]))<<16 }
func le64(b []byte) uint64 { return uint64(le32(b)) | uint64(le32(b[4:]))<<32 }
