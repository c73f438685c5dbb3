package image

import "fmt"

// Fatbin layout (fatbinary_section.h and observed nvcc output):
//
//	header: magic u32 (0xBA55ED50), version u16, headerSize u16, fatSize u64
//	entries, back to back, fatSize bytes in all:
//	  kind u16 (1 PTX, 2 ELF), version u16, headerSize u32 (64), payloadSize u64,
//	  compressedSize u32 @16, addrSize u32 @20, minor u16 @24, major u16 @26,
//	  arch u32 @28, nameOffset u32 @32, nameLen u32 @36, flags u64 @40,
//	  zero u64 @48, uncompressedSize u64 @56
//	  payload at entry+headerSize, payloadSize bytes (LZ4 block when
//	  flags&fatbinCompressed).
//
// Several fatbins may sit back to back (an .nv_fatbin section).
const (
	fatbinEntryPTX   = 1
	fatbinEntryELF   = 2
	fatbinCompressed = 0x2000
	fatbinHeaderSize = 16
	entryMinHeader   = 64
	maxFatbinNesting = 2
)

func (m *Module) addFatbin(b []byte, depth int) error {
	if depth > maxFatbinNesting {
		return fmt.Errorf("%w: fatbins nested too deep", ErrInvalid)
	}
	found := 0
	var ptxErr error
	var elfs, ptxs [][]byte
	for len(b) >= fatbinHeaderSize && le32(b) == fatbinMagic {
		hs := uint64(le16(b[6:]))
		fat := le64(b[8:])
		if hs < fatbinHeaderSize || hs > uint64(len(b)) || fat > uint64(len(b))-hs {
			return fmt.Errorf("%w: fatbin header size %d / body %d outside a %d-byte image", ErrInvalid, hs, fat, len(b))
		}
		body := b[hs : hs+fat]
		b = b[hs+fat:]
		for len(body) >= entryMinHeader {
			kind := le16(body)
			ehs := uint64(le32(body[4:]))
			size := le64(body[8:])
			if ehs < entryMinHeader || ehs > uint64(len(body)) || size > uint64(len(body))-ehs {
				return fmt.Errorf("%w: fatbin entry header %d / payload %d outside %d bytes", ErrInvalid, ehs, size, len(body))
			}
			payload := body[ehs : ehs+size]
			flags := le64(body[40:])
			if flags&fatbinCompressed != 0 {
				csize := uint64(le32(body[16:]))
				usize := le64(body[56:])
				// LZ4 expands at most 255:1: a larger claim is a lie.
				if csize > size || usize > MaxDecompressed || usize > 255*csize+64 {
					return fmt.Errorf("%w: compressed fatbin entry sizes %d/%d (payload %d)", ErrInvalid, csize, usize, size)
				}
				out, err := lz4Block(payload[:csize], int(usize))
				if err != nil {
					return err
				}
				payload = out
			}
			switch kind {
			case fatbinEntryELF:
				elfs = append(elfs, payload)
				m.Code = append(m.Code, Code{Arch: le32(body[28:])})
			case fatbinEntryPTX:
				ptxs = append(ptxs, payload)
				m.Code = append(m.Code, Code{PTX: true, Arch: le32(body[28:])})
			}
			found++
			body = body[ehs+size:]
		}
		// Trailing padding between fatbins is allowed; skip zero bytes up
		// to the next 8-byte boundary.
		for len(b) > 0 && len(b)%8 != 0 && b[0] == 0 {
			b = b[1:]
		}
	}
	if found == 0 {
		return fmt.Errorf("%w: fatbin with no entries", ErrInvalid)
	}
	for _, e := range elfs {
		if err := m.addCubin(e); err != nil {
			return err
		}
	}
	for _, p := range ptxs {
		if err := m.addPTX(trimNUL(p)); err != nil {
			ptxErr = err
		}
	}
	if len(elfs) == 0 && ptxErr != nil {
		return ptxErr
	}
	return nil
}

func trimNUL(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}

// lz4Block decodes one LZ4 block (the format nvcc's fatbinary uses for
// compressed entries) into exactly n bytes.
func lz4Block(src []byte, n int) ([]byte, error) {
	dst := make([]byte, 0, n)
	bad := func(what string) ([]byte, error) {
		return nil, fmt.Errorf("%w: compressed fatbin entry: %s at input byte %d", ErrInvalid, what, len(dst))
	}
	i := 0
	for i < len(src) {
		tok := src[i]
		i++
		lit := int(tok >> 4)
		if lit == 15 {
			for {
				if i >= len(src) {
					return bad("truncated literal length")
				}
				c := src[i]
				i++
				lit += int(c)
				if lit > n {
					return bad("literal run too long")
				}
				if c != 255 {
					break
				}
			}
		}
		if lit > len(src)-i || lit > n-len(dst) {
			return bad("literals overrun")
		}
		dst = append(dst, src[i:i+lit]...)
		i += lit
		if i == len(src) {
			break // last sequence has literals only
		}
		if i+2 > len(src) {
			return bad("truncated match offset")
		}
		off := int(src[i]) | int(src[i+1])<<8
		i += 2
		if off == 0 || off > len(dst) {
			return bad("match offset out of range")
		}
		ml := int(tok & 15)
		if ml == 15 {
			for {
				if i >= len(src) {
					return bad("truncated match length")
				}
				c := src[i]
				i++
				ml += int(c)
				if ml > n {
					return bad("match too long")
				}
				if c != 255 {
					break
				}
			}
		}
		ml += 4
		if ml > n-len(dst) {
			return bad("match overruns the declared size")
		}
		start := len(dst) - off
		for k := 0; k < ml; k++ { // byte by byte: matches may overlap
			dst = append(dst, dst[start+k])
		}
	}
	if len(dst) != n {
		return nil, fmt.Errorf("%w: compressed fatbin entry decodes to %d bytes, header says %d", ErrInvalid, len(dst), n)
	}
	return dst, nil
}
