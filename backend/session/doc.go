// Package session serves one guest connection: it reads protocol frames,
// validates them, executes them on a device.Context, and answers.
//
// # Primer
//
// A guest (the CUDA library through the guest kernel driver, or a host-mode
// client over a unix socket) opens a stream and says HELLO. Every later frame
// is a request; the session answers each with a reply carrying the same
// request id and the CUresult of the call in the header's status, unless the
// request says FlagNoReply (then a failure is reported later as an
// OpNotifyError notification). The session also sends notifications on its
// own: OpNotifyHostFunc when a stream reaches a guest host function.
//
// Frames are handled in order by one executor goroutine (stream order is call
// order); a reader goroutine feeds it and itself answers OpHostFuncDone, so
// a guest can finish a host function while the executor waits on the stream
// that runs it. One writer goroutine writes every reply and notification.
// On the fast path (an idle session, see queues.go) the reader runs the
// frame itself and writes its reply directly; order is the same. Frames
// that arrive on another path (Submit) join the same order and are
// answered on their own ReplySink.
//
// # Validation, in layers
//
// Header (magic, version, flags, sizes against Limits), then size (the
// opcode table's fixed part, CheckRequest), then segments (only from a
// privileged source port on a connection that has guest memory), then body
// (every BufRef, every guest-physical range through guestmem), then state:
// every handle and every device-pointer range must belong to this session —
// its own allocations, registered regions and module globals. A foreign or
// freed pointer is CUDA_ERROR_INVALID_VALUE, an unknown handle
// CUDA_ERROR_INVALID_HANDLE, an unknown opcode CUDA_ERROR_NOT_SUPPORTED;
// the session keeps serving. A frame whose header cannot be trusted (bad
// magic or version) ends the connection after an error reply.
//
// # Threat model
//
// The guest is untrusted: it may send any bytes. It can hurt only itself: it
// cannot name device memory it did not allocate, guest memory outside its
// VM's RAM, or another session's handles. What the session cannot check is
// what a kernel does with the pointers in its parameter block; kernels of
// sessions that share one CUDA context (one backend process) share an
// address space, which is why each VM's GPU work can run in its own worker
// process. Everything a session created is released when its connection
// ends, however it ends.
//
// # Adding a call
//
// Add a row to the call registry (protocol/registry.go) naming the handler
// and the validator, write them (the handler with the shape helpers in
// dispatch.go: reply, do, ...; the validator in validate_table.go) and run
// go generate ./protocol/..., which writes dispatch_gen.go. The recipe is
// docs/ADDING_A_CALL.md. A missing entry answers CUDA_ERROR_NOT_SUPPORTED
// and logs the opcode number.
package session
