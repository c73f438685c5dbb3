package protocol

// Host mode: shared-memory rings (FeatureShmRing).
//
// After HELLO accepted FeatureShmRing, a host-mode library may move the
// session off the socket onto two byte rings in a memfd it shares with the
// backend: OpRingSetup carries RingFDs file descriptors beside the frame
// (SCM_RIGHTS, in the sendmsg of its first byte), in this order:
//
//	0 the memfd: RingHeaderSize bytes of header, then the request ring
//	  (RingBytes), then the completion ring (RingBytes); sealed with
//	  F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL, exactly that long
//	1 eventfd the backend sleeps on for requests (the library rings it)
//	2 eventfd the backend sleeps on for completion-ring space
//	3 eventfd the library sleeps on for completions (the backend rings it)
//	4 eventfd the library sleeps on for request-ring space
//
// The eventfds are created non-blocking (EFD_NONBLOCK). The reply to a
// successful OpRingSetup is the first frame on the completion ring; a
// refusal comes on the socket and the session stays there. From the
// request after it on, every frame the library sends goes on the request
// ring and every frame the backend sends (replies, notifications) on the
// completion ring, in order: each ring is a byte stream carrying the same
// frames the socket would. The socket then carries only fd carriers: 8
// bytes, the request-ring position (little-endian uint64, the RingReqTail
// value before the frame was written) of the frame the fds beside them
// belong to, sent before that frame is written, and counted (the library
// adds 1 to the RingOffCarriers word after each, before writing the frame:
// the backend reads the socket for carriers only when that count changed);
// and its end (either side closing it) ends the session.
//
// Each ring is single-producer single-consumer with free-running uint64
// byte positions: the producer owns tail, the consumer head; bytes
// [head, tail) modulo RingBytes are unread; tail-head never exceeds
// RingBytes. A side that sees a position of the other side break that rule
// (or go backwards) ends the session. A consumer that found its ring empty
// may spin briefly; before it sleeps on its eventfd it sets its sleep word,
// then checks the ring again (both sequentially consistent); a producer
// that advanced tail and finds the peer's sleep word set writes 1 to the
// peer's eventfd. Waiting for space works the same with the wait words.
//
// Every header field is 8-byte aligned, on a 64-byte line of its own.
//
// A guest: rings in guest RAM (OpRingSetupGuest). The same header and
// rings, in pages vgpu.ko allocates for one open file of /dev/vgpu and
// maps into its process (mmap at VGPU_RING_MMAP_OFFSET). vgpu.ko sends
// OpRingSetupGuest on the file's stream, its segments naming the pages in
// order (the header page, the request ring's, the completion ring's;
// RingPageSize each, any guest-physical order: the backend reads them page
// by page through its guest-memory mapping, each checked to lie in guest
// RAM). Only the guest kernel can send segments, so a process cannot name
// another's memory. There are no eventfds: a doorbell to the backend is a
// RING_BELL frame (FlagNoReply) that vgpu.ko sends on the stream when the
// process asks (only when the backend's sleep or wait word is set), one to
// the process a NOTIFY_RING_BELL frame on the stream that vgpu.ko turns
// into a wake-up of the process waiting on it (sent only when the
// library's word is set). The reply to OpRingSetupGuest comes on the
// stream; the session then also takes frames from the request ring,
// answers them on the completion ring, and sends notifications on the
// stream, as before. Frames on the ring may not carry segments (the
// process writes them): calls with buffers go on the stream through
// vgpu.ko. The two paths join one order: the backend publishes in
// RingOffReqTaken how many request bytes the session took, and the library
// sends a frame on the stream only once that reached its request tail,
// and writes the ring after a stream call only once its reply came (the
// frame was taken). OpRingTeardown (vgpu.ko, before it frees the pages)
// ends the rings; the end of the stream does too.
const (
	RingMagic      = 0x47524756 // "VGRG" little-endian
	RingVersion    = 1
	RingHeaderSize = 4096
	RingMinBytes   = 64 << 10 // each ring: a power of two in [RingMinBytes, RingMaxBytes]
	RingMaxBytes   = 64 << 20
	RingFDs        = 5

	RingOffMagic      = 0   // uint32 RingMagic, uint32 RingVersion, uint64 RingBytes (library-written, read once)
	RingOffReqTail    = 64  // uint64, library
	RingOffReqHead    = 128 // uint64, backend
	RingOffCompTail   = 192 // uint64, backend
	RingOffCompHead   = 256 // uint64, library
	RingOffSrvSleep   = 320 // uint32, backend: its reader sleeps on eventfd 1
	RingOffSrvWait    = 384 // uint32, backend: its writer waits for completion space on eventfd 2
	RingOffCliSleep   = 448 // uint32, library: its reader sleeps on eventfd 3
	RingOffCliWait    = 512 // uint32, library: a writer waits for request space on eventfd 4
	RingOffCarriers   = 576 // uint64, library: fd carriers sent so far (see above)
	RingOffReqTaken   = 640 // uint64, backend (guest rings): request bytes the session took in order (see below)
	RingCarrierSize   = 8
	RingPageSize      = 4096 // a guest ring's page (the header is one)
	RingDefaultBytes  = 1 << 20
	RingDefaultSpinNs = 20000
)

// RingSetupReq moves a host-mode session onto shared-memory rings
// (OpRingSetup, with RingFDs fds beside it; the layout and rules are
// above).
type RingSetupReq struct {
	RingBytes uint64 // each ring's size: a power of two in [RingMinBytes, RingMaxBytes]
	Flags     uint64 // none defined: 0
}

// RingBell names a doorbell of guest rings (RingBellReq, RingBellNotify).
const (
	// RingBellRequests: to the backend, request bytes were written; to
	// the library, completion bytes were.
	RingBellRequests = 0
	// RingBellSpace: ring space was freed (the completion ring's, to the
	// backend; the request ring's, to the library).
	RingBellSpace = 1
	// RingBellBroken, to the library only: the backend ended the rings
	// because the process broke their rules (a position out of range, a
	// frame that is not valid); waits on them fail from now on, and the
	// session goes on on the stream until the file is closed.
	RingBellBroken = 2
)

// RingBellReq rings a doorbell of the backend's side of a guest's rings
// (OpRingBell, sent by vgpu.ko with FlagNoReply).
type RingBellReq struct {
	Bell uint32 // RingBellRequests or RingBellSpace
	Pad  uint32
}

// RingBellNotify rings the library's doorbell (OpNotifyRingBell).
type RingBellNotify struct {
	Bell uint32 // RingBellRequests, RingBellSpace or RingBellBroken
	Pad  uint32
}
