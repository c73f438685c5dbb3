package protocol

import (
	"fmt"
	"unsafe"
)

// Decode copies the fixed part of a payload into a T and returns the rest
// (the tail). It fails if p is shorter than T; it never panics.
//
// Payload structs have no implicit padding and the wire is little-endian,
// so on a little-endian host (codec_le.go refuses to build elsewhere) the
// bytes are the struct.
func Decode[T any](p []byte) (T, []byte, error) {
	var v T
	n := int(unsafe.Sizeof(v))
	if len(p) < n {
		return v, nil, fmt.Errorf("%w: %T needs %d bytes, have %d", ErrPayload, v, n, len(p))
	}
	if n > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&v)), n), p[:n])
	}
	return v, p[n:], nil
}

// Append appends the encoding of *v to dst.
func Append[T any](dst []byte, v *T) []byte {
	n := int(unsafe.Sizeof(*v))
	if n == 0 {
		return dst
	}
	return append(dst, unsafe.Slice((*byte)(unsafe.Pointer(v)), n)...)
}

// Bytes returns the encoding of *v.
func Bytes[T any](v *T) []byte { return Append(nil, v) }

// SetString copies s into a fixed NUL-padded field, truncating if needed
// (the last byte stays NUL).
func SetString(dst []byte, s string) {
	clear(dst)
	if len(dst) == 0 {
		return
	}
	copy(dst[:len(dst)-1], s)
}

// GetString returns the text of a NUL-padded field.
func GetString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
