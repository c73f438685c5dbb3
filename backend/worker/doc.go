// Package worker runs each VM's GPU work in its own OS process, so that a
// broken CUDA context (a sticky error) or a crash ends only that VM's work.
//
// The manager ("vgpu serve --isolate vm") keeps the transport: it accepts
// guest connections and, per VM, starts "vgpu worker" (the same binary,
// hidden subcommand) with a control socket (a SOCK_SEQPACKET socketpair,
// fd 3). For each connection it sends the worker a session message with one
// end of a new stream socketpair (SCM_RIGHTS) and proxies the guest's bytes
// to it; before the first session of a VM, and whenever the VM's memory
// table changes, it sends the guest RAM regions' memfds, which the worker
// maps itself. The worker holds its own CUDA context and runs ordinary
// sessions (package session) on those streams.
//
// When a worker dies, the manager closes that VM's guest connections (the
// guest sees an error, never a hang), logs the exit status, and the next
// connection starts a fresh worker. A worker whose context hits a sticky
// error reports it; the manager sends new sessions to a fresh worker and
// the broken one exits when its last session ends.
//
// Trust: control messages come only from the manager (a socketpair it
// created); the worker checks them anyway and refuses malformed ones. Guest
// bytes are proxied unchanged; sessions validate them.
package worker
