package protocol

import (
	"bytes"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to every decoder a guest can reach:
// ParseFrame, ReadFrame, CheckRequest, the batch iterator, payload decoding
// and segment splitting. They must never panic; what decodes must re-encode
// to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, g := range goldenFrames {
		f.Add(g.build())
	}
	f.Add([]byte{})
	f.Add(make([]byte, HeaderSize))
	lim := Limits{MaxPayload: 1 << 16, MaxSegments: 64}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, n, err := ParseFrame(b, lim)
		fr2, err2 := ReadFrame(bytes.NewReader(b), lim)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("ParseFrame err %v, ReadFrame err %v", err, err2)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(fr.Payload, fr2.Payload) || len(fr.Segs) != len(fr2.Segs) {
			t.Fatal("ParseFrame and ReadFrame disagree")
		}
		again := AppendFrame(nil, fr.Header, fr.Payload, fr.Segs)
		if fr.Flags&FlagMoreSegments == 0 || len(fr.Segs) > 0 {
			// Padding bytes may differ from the input; compare the meaningful parts.
			g, _, err := ParseFrame(again, lim)
			if err != nil || g.Header != fr.Header || !bytes.Equal(g.Payload, fr.Payload) {
				t.Fatalf("re-encode mismatch: %v", err)
			}
		}
		_ = n
		info, err := CheckRequest(&fr)
		if err != nil {
			return
		}
		var lens []uint64
		for i := range fr.Segs {
			lens = append(lens, fr.Segs[i].Len)
		}
		_, _ = SplitSegments(fr.Segs, lens)
		if info.Op == OpBatch {
			it, _, err := NewBatchIter(fr.Payload, lim, 128)
			if err == nil {
				for _, ok := it.Next(); ok; _, ok = it.Next() {
				}
			}
		}
		if info.Op == OpMemcpyHtoD {
			req, tail, err := Decode[MemcpyHtoDReq](fr.Payload)
			if err == nil {
				_, _ = InlineBytes(tail, req.Src)
			}
		}
	})
}
