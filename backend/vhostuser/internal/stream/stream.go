// Package stream is the checkable byte stream that the QEMU transport test
// and its guest program (guestvsock) send each other: 8-byte words of a
// splitmix64 sequence, so either side can fill or check any piece of a
// stream from its seed and offset alone.
package stream

import "encoding/binary"

// word returns the 8-byte word w of the stream with the given seed.
func word(seed, w uint64) uint64 {
	z := seed*0x9e3779b97f4a7c15 + w*0xbf58476d1ce4e5b9 + 1
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Fill writes the stream's bytes [off, off+len(b)) into b (off and len(b)
// multiples of 8).
func Fill(b []byte, seed, off uint64) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], word(seed, (off+uint64(i))/8))
	}
}

// Check reports whether b holds the stream's bytes [off, off+len(b)).
func Check(b []byte, seed, off uint64) bool {
	for i := 0; i+8 <= len(b); i += 8 {
		if binary.LittleEndian.Uint64(b[i:]) != word(seed, (off+uint64(i))/8) {
			return false
		}
	}
	return true
}
