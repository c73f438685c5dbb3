// Package handoff passes one VM's guest memory and its guest streams from
// one process to another over a control socket: a unix SOCK_SEQPACKET
// connection carrying one JSON Message per record, with file descriptors
// attached (SCM_RIGHTS).
//
// Two pairs of processes use it:
//
//   - "vgpu serve" (the manager, --isolate process or vm) and its "vgpu
//     worker" processes (package worker): a socketpair on the worker's fd 3;
//   - "vgpu front" (package front), which keeps a VM's vhost-user-vsock
//     device alive across backend restarts, and "vgpu serve --front-socket"
//     (the backend), which it dials.
//
// Messages: "hello" (front -> backend: VM name and guest CID), "memory"
// (guest RAM regions, one memfd each, plus their layout), "session" (one
// guest stream: one end of a SOCK_STREAM socketpair, with the guest's CID
// and source port), "poisoned" (worker -> manager: sticky CUDA error), and
// between a manager and its workers: "ready", "session-end", "report"
// (counters), "lease"/"leased"/"unlease" (the VM's memory cap, shared by its
// workers), "module-get"/"module-put" (the VM's module images, as sealed
// memfds) and "list-processes"/"own-processes" (the VM's guest processes
// on a device, gathered from its workers).
//
// Trust: Recv checks the framing (record size, truncated records or fd
// lists, fd counts) and nothing else; the receiver validates the body.
// Map checks a memory message as if it came from an untrusted peer (fd
// count, regular files large enough for the layout, non-overlapping
// regions, optionally memfds sealed against shrinking so that a peer cannot
// truncate guest RAM under the receiver's mappings); NewConn checks that a
// session fd is a unix stream socket. Guest bytes on the streams are not
// looked at here: sessions validate them.
package handoff
