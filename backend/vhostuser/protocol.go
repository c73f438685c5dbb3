package vhostuser

import (
	"encoding/binary"
	"fmt"
)

// Front-end request types (QEMU docs/interop/vhost-user.rst, "Front-end
// message types"). Numbers are wire values and are never reused.
const (
	reqGetFeatures         = 1
	reqSetFeatures         = 2
	reqSetOwner            = 3
	reqResetOwner          = 4
	reqSetMemTable         = 5
	reqSetLogBase          = 6
	reqSetLogFD            = 7
	reqSetVringNum         = 8
	reqSetVringAddr        = 9
	reqSetVringBase        = 10
	reqGetVringBase        = 11
	reqSetVringKick        = 12
	reqSetVringCall        = 13
	reqSetVringErr         = 14
	reqGetProtocolFeatures = 15
	reqSetProtocolFeatures = 16
	reqGetQueueNum         = 17
	reqSetVringEnable      = 18
	reqSendRARP            = 19
	reqNetSetMTU           = 20
	reqSetSlaveReqFD       = 21
	reqIOTLBMsg            = 22
	reqSetVringEndian      = 23
	reqGetConfig           = 24
	reqSetConfig           = 25
	reqGetMaxMemSlots      = 36
)

// Header flags.
const (
	flagVersionMask = 0x3
	flagVersion     = 0x1
	flagReply       = 1 << 2
	flagNeedReply   = 1 << 3
)

// Feature bits.
const (
	// FeatureProtocolFeatures is VHOST_USER_F_PROTOCOL_FEATURES.
	FeatureProtocolFeatures = 30

	protoMQ       = 0 // VHOST_USER_PROTOCOL_F_MQ
	protoReplyAck = 3 // VHOST_USER_PROTOCOL_F_REPLY_ACK
	protoConfig   = 9 // VHOST_USER_PROTOCOL_F_CONFIG
	protoFeatures = 1<<protoMQ | 1<<protoReplyAck | 1<<protoConfig
)

const (
	headerSize = 12
	// maxPayload bounds any request body we accept: the largest is
	// SET_MEM_TABLE (8 + 8 regions * 32 bytes) or GET_CONFIG (12 + 256).
	maxPayload = 4096
	// maxRegions is VHOST_MEMORY_BASELINE_NREGIONS.
	maxRegions = 8
	// maxConfig is the largest config space a front-end may ask for.
	maxConfig = 256
	// vringNoFD is set in a KICK/CALL/ERR payload when no fd is passed.
	vringNoFD    = 1 << 8
	vringIdxMask = 0xff
)

// header is the 12-byte message header (all little endian).
type header struct {
	Request uint32
	Flags   uint32
	Size    uint32
}

func (h *header) decode(b []byte) {
	h.Request = binary.LittleEndian.Uint32(b[0:])
	h.Flags = binary.LittleEndian.Uint32(b[4:])
	h.Size = binary.LittleEndian.Uint32(b[8:])
}

func (h *header) encode(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], h.Request)
	binary.LittleEndian.PutUint32(b[4:], h.Flags)
	binary.LittleEndian.PutUint32(b[8:], h.Size)
}

// validHeader checks the header layer: version and direction.
func (h *header) valid() error {
	if h.Flags&flagVersionMask != flagVersion {
		return fmt.Errorf("vhost-user: message %d has protocol version %d, want 1", h.Request, h.Flags&flagVersionMask)
	}
	if h.Flags&flagReply != 0 {
		return fmt.Errorf("vhost-user: front-end sent a reply (message %d)", h.Request)
	}
	if h.Size > maxPayload {
		return fmt.Errorf("vhost-user: message %d body of %d bytes exceeds %d", h.Request, h.Size, maxPayload)
	}
	return nil
}

// vringState is struct vhost_vring_state.
type vringState struct{ Index, Num uint32 }

func decodeState(b []byte) vringState {
	return vringState{binary.LittleEndian.Uint32(b[0:]), binary.LittleEndian.Uint32(b[4:])}
}

// vringAddr is struct vhost_vring_addr.
type vringAddr struct {
	Index, Flags           uint32
	Desc, Used, Avail, Log uint64
}

func decodeAddr(b []byte) vringAddr {
	le := binary.LittleEndian
	return vringAddr{Index: le.Uint32(b[0:]), Flags: le.Uint32(b[4:]), Desc: le.Uint64(b[8:]), Used: le.Uint64(b[16:]), Avail: le.Uint64(b[24:]), Log: le.Uint64(b[32:])}
}

// memRegion is struct vhost_user_memory_region.
type memRegion struct{ GuestPhys, Size, UserAddr, MmapOffset uint64 }

func decodeMemTable(b []byte) ([]memRegion, error) {
	n := binary.LittleEndian.Uint32(b[0:])
	if n == 0 || n > maxRegions {
		return nil, fmt.Errorf("vhost-user: memory table with %d regions (want 1..%d)", n, maxRegions)
	}
	if uint64(len(b)) != 8+32*uint64(n) {
		return nil, fmt.Errorf("vhost-user: memory table of %d regions is %d bytes, want %d", n, len(b), 8+32*n)
	}
	rs := make([]memRegion, n)
	for i := range rs {
		r := b[8+32*i:]
		le := binary.LittleEndian
		rs[i] = memRegion{le.Uint64(r[0:]), le.Uint64(r[8:]), le.Uint64(r[16:]), le.Uint64(r[24:])}
	}
	return rs, nil
}
