package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unsafe"
)

// Wire constants.
const (
	Magic       uint32 = 0x55504756 // "VGPU" little-endian
	Major       uint8  = 1
	Minor       uint8  = 0
	HeaderSize         = 32
	SegmentSize        = 16
	// Align is the alignment of payloads (and of sub-frames in a batch).
	Align = 8
)

// Flags of a frame header.
type Flags uint32

// Header flags. Numbers are wire values: never reuse one.
const (
	// FlagReply marks the answer to a request; it carries the request's id.
	FlagReply Flags = 1 << 0
	// FlagSegments says guest-physical segments follow the payload. Only the
	// guest kernel may set it.
	FlagSegments Flags = 1 << 1
	// FlagMoreSegments says the call's segment list continues in OpSegments
	// frames with the same request id.
	FlagMoreSegments Flags = 1 << 2
	// FlagNoReply asks the host not to answer (asynchronous calls); errors
	// surface later as a deferred error.
	FlagNoReply Flags = 1 << 3
	// FlagNotify marks a frame the host sends on its own (no request).
	FlagNotify Flags = 1 << 4
	// FlagOutput marks a reply that OpNotifyOutput frames preceded (the
	// device output flushed before this synchronising call returned). A
	// guest that reads notifications on another path than replies (the
	// kernel driver's notification queue) waits until it has written them
	// before it returns from the call. Host to guest only.
	FlagOutput Flags = 1 << 5

	knownFlags = FlagReply | FlagSegments | FlagMoreSegments | FlagNoReply | FlagNotify | FlagOutput
)

// Header is the fixed 32-byte frame header.
type Header struct {
	Magic      uint32
	Major      uint8
	Minor      uint8
	Opcode     Opcode
	Flags      Flags
	NumSegs    uint32
	RequestID  uint64
	PayloadLen uint32
	Status     int32
}

// Segment is one guest-physical range.
type Segment struct {
	GPA uint64
	Len uint64
}

// Frame is a decoded frame. Payload and Segs alias the buffer it was decoded
// from.
type Frame struct {
	Header
	Payload []byte
	Segs    []Segment
}

// Limits bound what a decoder accepts. The backend announces its limits in
// the HELLO reply.
type Limits struct {
	MaxPayload  uint32 // largest payload, bytes
	MaxSegments uint32 // most segments in one frame
}

// DefaultLimits are the backend's defaults.
var DefaultLimits = Limits{MaxPayload: 16 << 20, MaxSegments: 1 << 16}

// Errors returned by decoders. They wrap with details; test with errors.Is.
var (
	ErrShort        = errors.New("protocol: frame truncated")
	ErrMagic        = errors.New("protocol: bad magic")
	ErrVersion      = errors.New("protocol: unsupported protocol major version")
	ErrFlags        = errors.New("protocol: unknown or inconsistent flags")
	ErrTooLarge     = errors.New("protocol: frame exceeds limits")
	ErrPayload      = errors.New("protocol: malformed payload")
	ErrUnknownOp    = errors.New("protocol: unknown opcode")
	ErrSegmentRange = errors.New("protocol: segment range invalid")
)

// PadLen returns n rounded up to Align.
func PadLen(n uint32) uint64 { return (uint64(n) + Align - 1) &^ (Align - 1) }

// FrameLen is the encoded size of a frame with this header.
func (h *Header) FrameLen() uint64 {
	return HeaderSize + PadLen(h.PayloadLen) + uint64(h.NumSegs)*SegmentSize
}

// DecodeHeader decodes and checks a header against lim: magic, major
// version, flags, and sizes. It does not look at the opcode.
func DecodeHeader(b []byte, lim Limits) (Header, error) {
	var h Header
	if len(b) < HeaderSize {
		return h, fmt.Errorf("%w: %d header bytes", ErrShort, len(b))
	}
	le := binary.LittleEndian
	h.Magic = le.Uint32(b[0:])
	h.Major = b[4]
	h.Minor = b[5]
	h.Opcode = Opcode(le.Uint16(b[6:]))
	h.Flags = Flags(le.Uint32(b[8:]))
	h.NumSegs = le.Uint32(b[12:])
	h.RequestID = le.Uint64(b[16:])
	h.PayloadLen = le.Uint32(b[24:])
	h.Status = int32(le.Uint32(b[28:]))
	if h.Magic != Magic {
		return h, fmt.Errorf("%w: %#x", ErrMagic, h.Magic)
	}
	if h.Major != Major {
		return h, fmt.Errorf("%w: %d (this side speaks %d)", ErrVersion, h.Major, Major)
	}
	if h.Flags&^knownFlags != 0 {
		return h, fmt.Errorf("%w: %#x", ErrFlags, uint32(h.Flags))
	}
	if (h.NumSegs != 0) != (h.Flags&FlagSegments != 0) {
		return h, fmt.Errorf("%w: %d segments with flags %#x", ErrFlags, h.NumSegs, uint32(h.Flags))
	}
	if h.Flags&FlagMoreSegments != 0 && h.Flags&FlagSegments == 0 {
		return h, fmt.Errorf("%w: more-segments without segments", ErrFlags)
	}
	if h.PayloadLen > lim.MaxPayload {
		return h, fmt.Errorf("%w: payload %d > %d", ErrTooLarge, h.PayloadLen, lim.MaxPayload)
	}
	if h.NumSegs > lim.MaxSegments {
		return h, fmt.Errorf("%w: %d segments > %d", ErrTooLarge, h.NumSegs, lim.MaxSegments)
	}
	return h, nil
}

// PutHeader encodes h into b[:HeaderSize].
func PutHeader(b []byte, h *Header) {
	_ = b[HeaderSize-1]
	le := binary.LittleEndian
	le.PutUint32(b[0:], h.Magic)
	b[4] = h.Major
	b[5] = h.Minor
	le.PutUint16(b[6:], uint16(h.Opcode))
	le.PutUint32(b[8:], uint32(h.Flags))
	le.PutUint32(b[12:], h.NumSegs)
	le.PutUint64(b[16:], h.RequestID)
	le.PutUint32(b[24:], h.PayloadLen)
	le.PutUint32(b[28:], uint32(h.Status))
}

// NewHeader returns a header for op with the current version filled in.
func NewHeader(op Opcode, reqID uint64) Header {
	return Header{Magic: Magic, Major: Major, Minor: Minor, Opcode: op, RequestID: reqID}
}

// ParseFrame decodes one frame from the start of b and returns it with the
// number of bytes it used. The frame aliases b.
func ParseFrame(b []byte, lim Limits) (Frame, int, error) {
	h, err := DecodeHeader(b, lim)
	if err != nil {
		return Frame{}, 0, err
	}
	n := h.FrameLen()
	if uint64(len(b)) < n {
		return Frame{}, 0, fmt.Errorf("%w: have %d of %d bytes", ErrShort, len(b), n)
	}
	f := Frame{Header: h, Payload: b[HeaderSize : HeaderSize+int(h.PayloadLen)]}
	if h.NumSegs > 0 {
		f.Segs = decodeSegments(b[HeaderSize+int(PadLen(h.PayloadLen)) : n])
	}
	return f, int(n), nil
}

// decodeSegments returns the segment list in b. On this little-endian host
// (codec_le.go) the wire bytes are the []Segment, so an 8-byte aligned list
// is used in place, aliasing b like the rest of the frame: a 256 MiB copy of
// scattered pages carries 1 MiB of segments, which decoding into a new slice
// took ~0.2 ms to allocate and fill, on every call. Unaligned lists (not
// produced by AppendFrame into Go-allocated buffers) are copied.
func decodeSegments(b []byte) []Segment {
	var _ [unsafe.Sizeof(Segment{}) - SegmentSize]struct{} // Segment is exactly
	var _ [SegmentSize - unsafe.Sizeof(Segment{})]struct{} // its wire form
	n := len(b) / SegmentSize
	if n > 0 && uintptr(unsafe.Pointer(&b[0]))%unsafe.Alignof(Segment{}) == 0 {
		return unsafe.Slice((*Segment)(unsafe.Pointer(&b[0])), n)
	}
	segs := make([]Segment, n)
	for i := range segs {
		segs[i].GPA = binary.LittleEndian.Uint64(b[i*SegmentSize:])
		segs[i].Len = binary.LittleEndian.Uint64(b[i*SegmentSize+8:])
	}
	return segs
}

// ReadFrame reads one frame from r. It reads the header first, checks it
// against lim, and only then allocates exactly the frame's size.
func ReadFrame(r io.Reader, lim Limits) (Frame, error) {
	var hb [HeaderSize]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return Frame{}, err
	}
	h, err := DecodeHeader(hb[:], lim)
	if err != nil {
		return Frame{}, err
	}
	rest := make([]byte, h.FrameLen()-HeaderSize)
	if _, err := io.ReadFull(r, rest); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, fmt.Errorf("%w: %v", ErrShort, err)
	}
	f := Frame{Header: h, Payload: rest[:h.PayloadLen]}
	if h.NumSegs > 0 {
		f.Segs = decodeSegments(rest[PadLen(h.PayloadLen):])
	}
	return f, nil
}

// AppendFrame appends the encoding of a frame to dst. It sets PayloadLen,
// NumSegs and FlagSegments from payload and segs.
func AppendFrame(dst []byte, h Header, payload []byte, segs []Segment) []byte {
	h.PayloadLen = uint32(len(payload))
	h.NumSegs = uint32(len(segs))
	if len(segs) > 0 {
		h.Flags |= FlagSegments
	} else {
		h.Flags &^= FlagSegments | FlagMoreSegments
	}
	var hb [HeaderSize]byte
	PutHeader(hb[:], &h)
	dst = append(dst, hb[:]...)
	dst = append(dst, payload...)
	for i := uint64(len(payload)); i < PadLen(uint32(len(payload))); i++ {
		dst = append(dst, 0)
	}
	for _, s := range segs {
		dst = binary.LittleEndian.AppendUint64(dst, s.GPA)
		dst = binary.LittleEndian.AppendUint64(dst, s.Len)
	}
	return dst
}

// Reply builds the header of the reply to req.
func Reply(req *Header, status int32) Header {
	h := NewHeader(req.Opcode, req.RequestID)
	h.Flags = FlagReply
	h.Status = status
	return h
}
