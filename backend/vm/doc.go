// Package vm launches QEMU guests for vgpu: the test guest of
// vm-images/testguest run as `vgpu vm run -- COMMAND`, hot-plugging a vGPU
// (vhost-user-vsock) into a running VM as `vgpu attach`, and the QEMU options
// a user adds to their own command line (`vgpu qemu-args`).
//
// A launched VM has:
//
//	-machine q35,memory-backend=mem -object memory-backend-memfd,id=mem,share=on
//	    guest RAM in a shareable memfd, which vhost-user needs
//	-accel tcg -cpu max (or kvm with -cpu host), -nodefaults -display none -nic none
//	-qmp unix:<tmp>/qmp.sock       driven through backend/qmp
//	serial console on QEMU's stdout, parsed for the test guest's VGPU- lines
//	-virtfs hostroot (/, read-only) and one -virtfs per share (read-write)
//	-device pcie-root-port,id=vgpu-rp   a free PCIe slot for `vgpu attach`
//	-chardev socket,id=vgpu0,path=SOCK -device vhost-user-vsock-pci,chardev=vgpu0
//	    when Config.VGPUSocket is set
//
// `vgpu vm run --front PATH` serves the VM's vhost-user-vsock socket in the
// launcher itself (package front, as `vgpu front` does) and forwards it to
// the backend's front socket (`vgpu serve --front-socket PATH`), so the VM
// keeps its vGPU across backend restarts.
//
// Trust: the guest is not trusted; its console is parsed only for the
// testguest marker lines, and a guest that hangs is killed at the deadline.
package vm
