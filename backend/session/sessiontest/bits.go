package sessiontest

import (
	"encoding/binary"
	"math"
)

func putU64(b []byte, v uint64) { binary.LittleEndian.PutUint64(b, v) }
func putU32(b []byte, v uint32) { binary.LittleEndian.PutUint32(b, v) }
func f32bits(f float32) uint32  { return math.Float32bits(f) }
