package vsock

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// HeaderSize is the size of struct virtio_vsock_hdr (virtio 1.2, 5.10.6).
const HeaderSize = 44

// Packet types and operations (include/uapi/linux/virtio_vsock.h).
const (
	TypeStream    = 1 // VIRTIO_VSOCK_TYPE_STREAM
	TypeSeqpacket = 2 // VIRTIO_VSOCK_TYPE_SEQPACKET (not offered)

	OpInvalid       = 0
	OpRequest       = 1
	OpResponse      = 2
	OpRST           = 3
	OpShutdown      = 4
	OpRW            = 5
	OpCreditUpdate  = 6
	OpCreditRequest = 7

	ShutdownRcv  = 1 // VIRTIO_VSOCK_SHUTDOWN_RCV: the sender will receive no more
	ShutdownSend = 2 // VIRTIO_VSOCK_SHUTDOWN_SEND: the sender will send no more

	// MaxPayload is the largest payload the device accepts in one packet
	// (Linux's VIRTIO_VSOCK_MAX_PKT_BUF_SIZE) and puts in one rx buffer.
	MaxPayload = 64 << 10
)

var opNames = map[uint16]string{
	OpInvalid: "INVALID", OpRequest: "REQUEST", OpResponse: "RESPONSE", OpRST: "RST",
	OpShutdown: "SHUTDOWN", OpRW: "RW", OpCreditUpdate: "CREDIT_UPDATE", OpCreditRequest: "CREDIT_REQUEST",
}

// OpName names a packet operation for logs.
func OpName(op uint16) string {
	if n, ok := opNames[op]; ok {
		return n
	}
	return fmt.Sprintf("op(%d)", op)
}

// ErrShortHeader is returned for a packet shorter than HeaderSize.
var ErrShortHeader = errors.New("vsock: packet shorter than the 44-byte header")

// Header is struct virtio_vsock_hdr, all fields little endian on the wire.
type Header struct {
	SrcCID   uint64
	DstCID   uint64
	SrcPort  uint32
	DstPort  uint32
	Len      uint32
	Type     uint16
	Op       uint16
	Flags    uint32
	BufAlloc uint32
	FwdCnt   uint32
}

// Decode parses the header from b[:HeaderSize].
func (h *Header) Decode(b []byte) error {
	if len(b) < HeaderSize {
		return ErrShortHeader
	}
	le := binary.LittleEndian
	h.SrcCID = le.Uint64(b[0:])
	h.DstCID = le.Uint64(b[8:])
	h.SrcPort = le.Uint32(b[16:])
	h.DstPort = le.Uint32(b[20:])
	h.Len = le.Uint32(b[24:])
	h.Type = le.Uint16(b[28:])
	h.Op = le.Uint16(b[30:])
	h.Flags = le.Uint32(b[32:])
	h.BufAlloc = le.Uint32(b[36:])
	h.FwdCnt = le.Uint32(b[40:])
	return nil
}

// Encode writes the header into b[:HeaderSize].
func (h *Header) Encode(b []byte) {
	le := binary.LittleEndian
	_ = b[HeaderSize-1]
	le.PutUint64(b[0:], h.SrcCID)
	le.PutUint64(b[8:], h.DstCID)
	le.PutUint32(b[16:], h.SrcPort)
	le.PutUint32(b[20:], h.DstPort)
	le.PutUint32(b[24:], h.Len)
	le.PutUint16(b[28:], h.Type)
	le.PutUint16(b[30:], h.Op)
	le.PutUint32(b[32:], h.Flags)
	le.PutUint32(b[36:], h.BufAlloc)
	le.PutUint32(b[40:], h.FwdCnt)
}

func (h *Header) String() string {
	return fmt.Sprintf("%s %d:%d->%d:%d len=%d type=%d flags=%#x buf_alloc=%d fwd_cnt=%d",
		OpName(h.Op), h.SrcCID, h.SrcPort, h.DstCID, h.DstPort, h.Len, h.Type, h.Flags, h.BufAlloc, h.FwdCnt)
}

// gather copies bytes from the scattered buffers segs, starting skip bytes
// in, into dst, and returns how many it copied.
func gather(dst []byte, segs [][]byte, skip uint64) int {
	n := 0
	for _, s := range segs {
		if skip >= uint64(len(s)) {
			skip -= uint64(len(s))
			continue
		}
		n += copy(dst[n:], s[skip:])
		skip = 0
		if n == len(dst) {
			break
		}
	}
	return n
}

// scatter copies src into the scattered buffers segs starting skip bytes in
// and returns how many bytes it wrote.
func scatter(segs [][]byte, skip uint64, src []byte) int {
	n := 0
	for _, s := range segs {
		if skip >= uint64(len(s)) {
			skip -= uint64(len(s))
			continue
		}
		n += copy(s[skip:], src[n:])
		skip = 0
		if n == len(src) {
			break
		}
	}
	return n
}
