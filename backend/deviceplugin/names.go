package deviceplugin

// The names a VM pod, the device plugin and the KubeVirt hook share.
const (
	// ResourceName is the extended resource a VM asks for: in KubeVirt,
	// spec.domain.resources.limits["vgpu-project.io/vgpu"]: "1" (KubeVirt
	// copies the VMI's limits to the virt-launcher pod's compute container).
	ResourceName = "vgpu-project.io/vgpu"
	// ContainerDir is where the allocated vGPU's folder appears in the
	// container that asked for it; ContainerSocket is the vhost-user socket
	// in it, which QEMU connects to.
	ContainerDir    = "/var/run/vgpu"
	ContainerSocket = ContainerDir + "/vgpu.sock"
	// EnvSocket and EnvDevice name, in that container's environment, the
	// socket and the allocated device.
	EnvSocket = "VGPU_VHOST_USER_SOCKET"
	EnvDevice = "VGPU_DEVICE_ID"
)
