// Package protocol defines vgpu's wire protocol, version 1: the frames the
// guest (library and kernel driver) and the host backend exchange.
//
// Go is the single source of truth, and each call is defined once: a row of
// the call registry, Ops (registry.go). `go generate ./protocol/...` writes
// from it the Op constants, the C header vgpu_protocol.h used by the guest
// library and the guest driver, docs/PROTOCOL.md, the backend's dispatch
// table and a golden frame per row; a test fails when any of them is stale,
// and the golden frames in testdata/ are checked from both Go and C. How to
// add a call: docs/ADDING_A_CALL.md.
//
// # Frames
//
// Every message is a frame: a 32-byte header, a payload padded to 8 bytes,
// and an optional list of guest-physical segments:
//
//	offset size field
//	0      4    magic       "VGPU" (0x55504756 little-endian)
//	4      1    major       protocol major version (1)
//	5      1    minor       protocol minor version
//	6      2    opcode      what the frame asks for (see registry.go)
//	8      4    flags       FlagReply, FlagSegments, ...
//	12     4    nsegs       number of 16-byte segments after the payload
//	16     8    request id  chosen by the sender; a reply carries the request's id
//	24     4    payload len bytes of payload (the padding is not counted)
//	28     4    status      in replies: the CUDA driver error number (CUresult), unchanged
//
// All integers are little-endian; payload structs have fixed layouts with
// explicit padding (every field naturally aligned, every struct a multiple of
// 8 bytes). A frame is self-contained: the same bytes can travel on a stream or
// sit in a ring slot.
//
// # Guest-physical segments
//
// A segment is {gpa u64, len u64}. In a VM only the guest kernel driver
// appends segments (FlagSegments set, nsegs > 0); the backend refuses frames
// with segments from connections whose source port is unprivileged. Payloads name
// guest memory with a BufRef: BufSegments refers to the i-th buffer; the
// segment list holds the buffers' segments in order and is split by the
// lengths the BufRefs declare (a segment never spans two buffers). When a
// call has more segments than fit in one frame, the driver sends the first
// frame with FlagMoreSegments and the rest in OpSegments frames carrying the
// same request id; the host executes the call when the last one arrives.
//
// # Host mode: shared memory
//
// Over a unix socket (host mode) there is no guest RAM. A backend that offers
// FeatureHostShare in its HELLO reply lets the library share memfds instead:
// OpHostShare carries one fd beside the frame (SCM_RIGHTS, in the sendmsg of
// the frame's first byte) and asks the backend to map it at a pseudo
// guest-physical range [Base, Base+Size) that the library chose (page-aligned,
// not overlapping another share). From then on the library names that memory
// with segments and OpGuestRegister exactly as the guest driver names guest
// RAM; OpHostUnshare ends a share. Fds that come with any other frame are
// closed unread. Without the feature (an older backend) data travels inline.
//
// # Sessions
//
// A connection is a session. Its first request is HELLO; anything before it
// is answered CUDA_ERROR_NOT_INITIALIZED. Replies carry the request's id and
// the call's CUresult; a reply with a non-zero status has no payload, a
// failed BATCH included (its status is the first failed call's error; with
// FlagNoReply, NOTIFY_ERROR names the failed call instead). The backend
// answers in order, and bounds what a connection makes it hold: once a
// frame's first byte has arrived the rest must follow within the frame
// timeout (30 s by default) or the connection ends; a client that does not
// read its replies past its bound is not read any more until it does (it
// must read replies and notifications to make progress). A host function
// (HOST_FUNC_LAUNCH) the guest does not finish (HOST_FUNC_DONE) within the
// host-function timeout (60 s by default) once its stream reached it counts
// as failed: the stream goes on and the guest gets NOTIFY_ERROR with
// CUDA_ERROR_TIMEOUT (909) naming the launch; a later HOST_FUNC_DONE for it
// gets CUDA_ERROR_INVALID_HANDLE.
//
// # Tracing
//
// A backend started with --trace (or VGPU_TRACE=1) stamps every request at
// its layer boundaries: first header byte read, whole frame read, execution
// start (after earlier frames), validation done, handler (translation and
// the device call) done, reply written or queued. GET_STATS carries the
// sums per layer for the session (traced, nanos_read, nanos_queued,
// nanos_validate, nanos_handler, nanos_reply; all zero without tracing);
// `vgpu bench calls` prints them per call beside the time the program saw,
// whose remainder is the library's and the transport's. Nothing of the
// trace travels in requests. The GET_STATS reply grew from 64 to 112 bytes
// with these fields: a library built before them copies the first 64 in
// host mode, and in a guest may get CUDA_ERROR_INVALID_VALUE from
// vgpuGetStats (its reply buffer is sized for 64): use the library of the
// backend's release.
//
// # Trust
//
// Decoding trusts nothing: every length, count and offset is bounds-checked,
// decoding never panics and never allocates more than the frame's own
// declared (and limit-checked) size.
package protocol

//go:generate go run ./internal/gen -root ..
