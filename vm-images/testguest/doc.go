// Package testguest builds the test guest: a stock Debian kernel and a small
// initramfs (busybox, the virtio/vsock/9p modules, optional extra modules such
// as vgpu.ko) whose /init mounts the host's root filesystem read-only over
// virtio-9p, chroots into it, runs one command and reports its exit status on
// the serial console.
//
// The package owns both sides of the guest contract: the init script
// (init.sh), the kernel command line that carries the job (JobCmdline) and the
// console lines the launcher parses (ParseLine). Images are cached by the hash
// of everything that goes into them.
//
// Inside the guest (see init.sh):
//
//	/            host root, read-only (9p tag "hostroot", cache=loose)
//	/proc /sys /dev /dev/pts /dev/shm   the guest's own
//	/tmp /run    guest tmpfs (host /tmp is hidden)
//	share paths  each Share is a second 9p export mounted read-write at its
//	             guest path (default: the same path as on the host), so a
//	             host folder under /tmp stays reachable at the same path.
//
// Trust: the job and the image are built by the host; the guest trusts both.
// The host trusts nothing the guest prints except the exit-status line, and
// that only as a number.
package testguest
