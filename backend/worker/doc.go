// Package worker runs GPU work in "vgpu worker" processes (the same
// binary, hidden subcommand), so that a broken CUDA context (a sticky
// error), a crash or a kill ends only the work of what the worker serves.
//
// Why processes: on the H100 (driver 580) a sticky error in one CUDA context
// poisons every context of its process: a sibling context's running kernel
// fails, its later calls fail, a context created afterwards cannot open
// (bench/results/2026-11-25-h100-probe). So "one CUDA context per guest
// process" takes one host process per guest process.
//
// The manager ("vgpu serve") keeps the transports and hands each
// connection to a worker over a control socket (a SOCK_SEQPACKET
// socketpair on the worker's fd 3; JSON messages with SCM_RIGHTS fds,
// package handoff). Two modes:
//
//   - PerProcess ("--isolate process", the default): every session (one
//     guest process; in host mode one client connection) gets its own
//     worker, taken from a pool of started ones (driver loaded, cuInit done,
//     a context per GPU created: Pool, "--pool", refilled as workers are
//     handed out). The worker serves that one session and exits when it
//     ends, which releases its context and device memory. Its fd 1 and 2
//     are pipes it reads itself (CaptureOutput): what the driver prints
//     there (device printf, asserts) is that guest process's and goes to it
//     (session.Config.Output). What a VM's processes share lives in the
//     manager, per VM: the device memory cap (a session.Account the
//     workers lease from) and the module image cache (sealed memfds);
//     the VM's process list (NVML) is gathered from its workers by the
//     manager when one asks (processes.go).
//   - PerVM ("--isolate vm"): one worker serves all of a VM's sessions and
//     stops after IdleTimeout without one. Its processes share a context:
//     one's sticky error ends the VM's work until the worker is replaced.
//
// A unix-socket connection (host mode, streams from "vgpu front") is handed
// to the worker as it is; a vsock stream the backend serves itself is
// copied over a socketpair by the manager. Guest RAM regions go over as
// memfds the worker maps. The worker reports its counters (server.Report)
// every second, when a session ends and when asked; the manager adds them
// up (Aggregate) for vgpu status and /metrics.
//
// When a worker dies, its sessions end (the guest sees an error, never a
// hang) and the manager records the exit. A worker whose context hits a
// sticky error, or whose session panicked (the session's recover boundary
// reports it the same way), says so ("poisoned"): a PerVM worker gets no
// new sessions and exits after its last; a PerProcess worker serves only
// the process that broke it anyway.
//
// Trust: control messages come from the manager or a worker, both this
// binary; each side checks them anyway (fd counts and kinds, sealed memfds
// and sizes for module images) and the manager answers a worker only about
// the VM it handed that worker. Guest bytes are not looked at here:
// sessions validate them.
package worker
