// Package pattern is a test mode of the backend for the guest driver's
// tests: it serves one transport.Conn speaking the vgpu protocol without a
// GPU or the session executor. Memory copies are checked against, or filled
// with, a deterministic byte pattern that the guest test program
// (guest-driver/tests/vgpu_guest_test.c) computes the same way, so a test
// proves that the guest-physical segments the driver sent name exactly the
// bytes of the user buffer, in order.
//
// The pattern: byte i of a buffer is byte i%8 (little-endian) of
// Word(seed, i/8), where Word(seed, w) = mix(seed ^ w*0x9E3779B97F4A7C15) and
// mix is the splitmix64 finalizer. The seed is the device address of the
// copy: MemcpyHtoDReq.Dst for host-to-device (verified), MemcpyDtoHReq.Src
// for device-to-host (written). Offsets count from the buffer's first byte.
//
// What the server answers:
//
//	HELLO            HelloReply with Options' limits, FeatureSegments
//	MEMCPY_HTOD      (BufSegments) 0 if every byte matches, else CUDA_ERROR_INVALID_VALUE
//	MEMCPY_DTOH      (BufSegments) fills the segments with the pattern; 0
//	GUEST_REGISTER   0 with a new region id; with RegisterMapped, DevPtr is
//	                 DevPtrBase + the number of segments (so a guest test can
//	                 see how contiguous its memory was)
//	GUEST_UNREGISTER 0 for a known region, else CUDA_ERROR_INVALID_HANDLE
//	PING, GOODBYE    0
//	anything else    CUDA_ERROR_NOT_SUPPORTED
//
// A copy whose Stream is StreamDelay is answered after Options.Delay (the
// guest's kill-mid-call and timeout tests); on StreamClose the server closes
// the connection instead of answering (a host gone mid-call); on
// StreamGarbage it answers with a header claiming a 4 GiB payload, then
// closes (a host the driver must not trust with sizes). A frame with FlagNoReply that
// fails is answered with an OpNotifyError notification instead. Segments
// on a connection from an unprivileged port are refused with
// CUDA_ERROR_NOT_PERMITTED.
//
// Trust: the guest is not trusted. Frames are decoded with the protocol
// package's limits, every segment goes through guestmem's bounds checks,
// and a protocol violation closes the connection.
package pattern

import "encoding/binary"

// Word returns the w-th 64-bit word of the pattern for seed.
func Word(seed, w uint64) uint64 {
	z := seed ^ (w * 0x9E3779B97F4A7C15)
	z ^= z >> 30
	z *= 0xbf58476d1ce4e5b9
	z ^= z >> 27
	z *= 0x94d049bb133111eb
	z ^= z >> 31
	return z
}

// Fill writes the pattern for seed into b, b[0] being byte off of the
// buffer.
func Fill(b []byte, seed, off uint64) {
	var w [8]byte
	for i := 0; i < len(b); {
		pos := off + uint64(i)
		binary.LittleEndian.PutUint64(w[:], Word(seed, pos/8))
		n := copy(b[i:], w[pos%8:])
		i += n
	}
}

// Check returns the index in b of the first byte that differs from the
// pattern for seed (b[0] being byte off of the buffer), or -1.
func Check(b []byte, seed, off uint64) int {
	var w [8]byte
	for i := 0; i < len(b); {
		pos := off + uint64(i)
		binary.LittleEndian.PutUint64(w[:], Word(seed, pos/8))
		chunk := w[pos%8:]
		if len(chunk) > len(b)-i {
			chunk = chunk[:len(b)-i]
		}
		for k, c := range chunk {
			if b[i+k] != c {
				return i + k
			}
		}
		i += len(chunk)
	}
	return -1
}
