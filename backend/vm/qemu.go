package vm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// HotplugPort is the id of the PCIe root port the launcher adds for
// hot-plugging a vGPU (device_add ...,bus=vgpu-rp).
const HotplugPort = "vgpu-rp"

// LibvirtHotplugPort is that port's QEMU id in a libvirt domain, where it is
// a controller with the user alias "ua-vgpu-rp" (package domainxml adds it);
// LibvirtHotplugPortXML and LibvirtSharedRAMXML are what such a domain needs,
// for error messages.
const (
	LibvirtHotplugPort    = "ua-" + HotplugPort
	LibvirtHotplugPortXML = `<controller type='pci' model='pcie-root-port'><alias name='ua-vgpu-rp'/></controller>`
	LibvirtSharedRAMXML   = `<memoryBacking><source type='memfd'/><access mode='shared'/></memoryBacking>`
)

// Defaults for Config.
const (
	DefaultMem  = "2G"
	DefaultCPUs = 2
)

// ParseSize parses a QEMU-style memory size ("2G", "512M", "1024" in MiB)
// into bytes.
func ParseSize(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("vm: empty memory size: want e.g. 2G or 512M")
	}
	mult := uint64(1 << 20)
	switch s[len(s)-1] {
	case 'k', 'K':
		mult = 1 << 10
	case 'm', 'M':
		mult = 1 << 20
	case 'g', 'G':
		mult = 1 << 30
	case 't', 'T':
		mult = 1 << 40
	}
	if s[len(s)-1] > '9' {
		s = s[:len(s)-1]
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 || n > (1<<50)/mult {
		return 0, fmt.Errorf("vm: bad memory size %q: want e.g. 2G or 512M", s)
	}
	b := n * mult
	if b%(1<<20) != 0 {
		return 0, fmt.Errorf("vm: memory size %q is not a whole number of MiB", s)
	}
	return b, nil
}

// MemoryArgs returns the options that give a q35 guest mem bytes of shareable
// RAM (memory-backend-memfd, share=on), as vhost-user devices need.
func MemoryArgs(mem uint64) []string {
	mib := mem >> 20
	return []string{
		"-machine", "q35,memory-backend=mem",
		"-m", fmt.Sprintf("%dM", mib),
		"-object", fmt.Sprintf("memory-backend-memfd,id=mem,size=%dM,share=on", mib),
	}
}

// VGPUArgs returns the options that connect a vhost-user-vsock device (the
// vGPU transport) to the backend listening on socket.
func VGPUArgs(socket string) []string {
	return []string{
		"-chardev", "socket,id=vgpu0,path=" + qemuEscape(socket),
		"-device", "vhost-user-vsock-pci,chardev=vgpu0,id=vgpu0-dev",
	}
}

// HotplugPortArgs returns the PCIe root port that `vgpu attach` plugs into.
func HotplugPortArgs() []string {
	return []string{"-device", "pcie-root-port,id=" + HotplugPort + ",bus=pcie.0,chassis=200,slot=200"}
}

// QMPArgs returns the options for a QMP server on the unix socket path (the
// -chardev form, which takes any path, unlike -qmp unix:PATH).
func QMPArgs(path string) []string {
	return []string{
		"-chardev", "socket,id=qmp0,path=" + qemuEscape(path) + ",server=on,wait=off",
		"-mon", "chardev=qmp0,mode=control",
	}
}

// qemuEscape doubles commas, QEMU's escape inside option values.
func qemuEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// QemuArgs returns the options a user adds to their own QEMU command line so
// that the vGPU backend listening on socket can serve the guest: shareable
// RAM of mem bytes, a QMP socket (when qmpSocket is not empty) for
// `vgpu attach`, and the vhost-user-vsock device (when socket is not empty)
// or a free hot-plug port (when it is).
func QemuArgs(mem uint64, socket, qmpSocket string) []string {
	a := MemoryArgs(mem)
	if qmpSocket != "" {
		a = append(a, QMPArgs(qmpSocket)...)
	}
	if socket != "" {
		a = append(a, VGPUArgs(socket)...)
	} else {
		a = append(a, HotplugPortArgs()...)
	}
	return a
}

// FormatArgs quotes args for a shell, one option and its value per line.
func FormatArgs(args []string) string {
	var b strings.Builder
	for i := 0; i < len(args); i++ {
		if i > 0 {
			b.WriteString(" \\\n  ")
		}
		b.WriteString(shQuote(args[i]))
		if strings.HasPrefix(args[i], "-") && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			b.WriteString(" " + shQuote(args[i+1]))
			i++
		}
	}
	return b.String()
}

func shQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_=,./:+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// qemuBinary says how to run QEMU: the binary, extra environment and extra
// options (-L for a bundle's firmware).
type qemuBinary struct {
	path string
	env  []string
	args []string
}

// findQEMU picks the QEMU to run: a bundle folder (scripts/qemu-bundle.sh)
// if given, else path, else qemu-system-x86_64 from PATH.
func findQEMU(path, bundle string) (qemuBinary, error) {
	if bundle != "" {
		bin := filepath.Join(bundle, "bin", "qemu-system-x86_64")
		if _, err := os.Stat(bin); err != nil {
			return qemuBinary{}, fmt.Errorf("vm: %s is not a QEMU bundle (no bin/qemu-system-x86_64): build one with scripts/qemu-bundle.sh and unpack it: %w", bundle, err)
		}
		lib := filepath.Join(bundle, "lib")
		ld := lib
		if old := os.Getenv("LD_LIBRARY_PATH"); old != "" {
			ld += ":" + old
		}
		return qemuBinary{
			path: bin,
			env:  []string{"LD_LIBRARY_PATH=" + ld, "QEMU_MODULE_DIR=" + filepath.Join(lib, "qemu")},
			args: []string{"-L", filepath.Join(bundle, "share", "qemu")},
		}, nil
	}
	if path == "" {
		path = "qemu-system-x86_64"
	}
	p, err := exec.LookPath(path)
	if err != nil {
		return qemuBinary{}, fmt.Errorf("vm: %w: install qemu-system-x86 (Debian) or pass --qemu PATH or --bundle DIR", err)
	}
	return qemuBinary{path: p}, nil
}
