// Package front keeps a VM's vGPU device alive while the GPU backend
// restarts.
//
// QEMU 7.2's vhost-user-vsock-pci cannot reconnect to a vhost-user backend
// that went away (docs/RELIABILITY.md), so the process that QEMU talks to
// must outlive the GPU backend. "vgpu front" (Front) is that process, one
// per VM: it serves the VM's vhost-user-vsock socket with packages
// vhostuser and vsock, exactly as "vgpu serve --vhost-user-socket" does,
// holds the guest RAM mappings and the virtqueues, and has no GPU code. It
// dials the backend's front socket ("vgpu serve --front-socket PATH",
// Listener here) and hands it, with package handoff:
//
//   - a hello message (the VM's name and guest CID);
//   - the guest RAM memory table (memfds + layout), before the first
//     stream and again whenever QEMU changes it;
//   - each guest connection to the vGPU port: one end of a new stream
//     socketpair plus the guest's CID and source port; the front copies
//     bytes between the guest's vsock connection and its end.
//
// When the backend goes away (the control socket ends: a crash, kill -9, a
// restart), the front closes every forwarded guest connection (the guest
// library gets an error, never a hang), stops listening on the vGPU port
// (new guest connections are reset) and dials again with backoff. Once a
// backend answers it re-sends the memory table with the next stream, and
// new guest programs work. QEMU never notices.
//
// Trust. The front trusts the backend it dials (the socket path is its
// configuration) and, like "vgpu serve", nothing from the guest: the vsock
// device refuses unprivileged guest ports and malformed rings; guest bytes
// are forwarded unchanged for the backend's sessions to validate. The
// backend trusts a front less than itself: Listener checks every message
// (framing, op, fd counts, the hello's VM name, memfds sealed and large
// enough for the layout, stream fds being unix stream sockets) and drops a
// front that sends anything else, with a log line; other fronts are not
// affected. A front can only reach its own VM's guest memory (it hands it
// over) and its VM's device-memory quota (per VM name, which must be
// unique among connected fronts).
package front
