// Package vhostuser is the back-end side of the vhost-user protocol (QEMU
// docs/interop/vhost-user.rst) on a unix socket, one socket per VM. QEMU
// connects as the front-end with
//
//	-chardev socket,id=vg,path=SOCK -device vhost-user-vsock-pci,chardev=vg
//
// and hands over the guest memory table (one memfd per region, mapped with
// package guestmem), the vrings (addresses, sizes, bases) and their kick and
// call eventfds. The Server turns them into virtq.Queues and starts a
// Backend (package vsock's Device) once every ring is set up.
//
// Trust: QEMU is trusted as far as the host process boundary goes, but its
// messages are still validated in layers (header: version and direction;
// size: exact body size per request; fds: exactly the fds the request
// carries; body: ranges and alignment; state: no ring changes while the
// device runs). A violation that a reply can express is refused (REPLY_ACK
// answers 1); one that cannot (a request that needs a reply) ends the
// connection. Guest-controlled data (ring contents) is never read here.
//
// Lifecycle: Serve handles one QEMU connection at a time. When QEMU
// disconnects (exit, kill, crash) the device is stopped, its connections
// are reset and the memory is unmapped; a reconnecting QEMU starts afresh.
// GET_VRING_BASE (the guest driver stopped the device) resets connections
// too. SET_MEM_TABLE while running pauses the device and restarts it over
// the new table without losing connections.
package vhostuser
