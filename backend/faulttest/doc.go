// Package faulttest holds vgpu's reliability tests (docs/RELIABILITY.md):
// a guest can hurt only itself, and nothing is lost under load.
//
//   - attack_test.go: crafted hostile frames through real sessions of one
//     server (sim device, guest RAM in memfds laid out like q35 with its
//     holes); each gets its documented error, other VMs' data and handles are
//     untouched, device memory returns to baseline, and a well-behaved
//     session works afterwards.
//   - quota_test.go: --mem-limit per VM.
//   - exhaust_test.go: one attacker per resource a client can make the
//     backend hold (sessions, shared fds, mappings, objects, host-function
//     waits, unread replies): it gets OUT_OF_MEMORY (or its connection
//     closed) at its bound, another VM keeps working, and everything comes
//     back when it leaves.
//   - fuzz_test.go: the field fuzzer (package fieldfuzz) against the real
//     bin/vgpu serve --unix, both isolation modes.
//   - leak_test.go helpers: fd, mapping and goroutine counts of this process
//     (the backend) before and after.
//   - vm_test.go: the same from inside TCG guests (vgpu.ko, vhost-user,
//     virtio-vsock): SIGKILLed guest processes mid-copy and mid-launch, a
//     SIGKILLed QEMU while another VM runs a checksummed soak, crafted frames
//     from a root guest process, unprivileged ports, per-VM quotas. They boot
//     guests and skip without QEMU, a kernel, vgpu.ko, the guest libraries or
//     nvcc unless VGPU_REQUIRE_VM=1 (then they fail).
//   - worker_test.go, restart_test.go: the real bin/vgpu: a worker process
//     SIGKILLed under a running program; the backend SIGKILLed and
//     restarted under a running VM served through "vgpu front".
//
// Run: go test ./backend/faulttest/... (VGPU_SOAK=1m sets the soak length).
//
// The package has no non-test code: it only tests the backend's packages.
package faulttest
