package vm

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/beevik/etree"

	"github.com/vgpu-project/vgpu/vm-images/testguest"
)

// DomainConfig describes the test guest as a libvirt domain: the same
// kernel, initramfs, 9p shares and job as Run, for libvirt's qemu driver.
// The vGPU pieces are not in it: package domainxml adds them, as it does to
// any domain ("vgpu libvirt-xml --domain").
type DomainConfig struct {
	Name    string // domain name
	Image   *testguest.Image
	Command []string
	Env     []string
	Dir     string
	Shares  []Share
	Mem     string // default DefaultMem
	CPUs    int    // default DefaultCPUs
	Accel   string // "tcg" (domain type qemu, the default) or "kvm"
	// Console is the file the serial console is written to (libvirt's
	// virtlogd creates it); the VGPU- marker lines there say how the
	// command ended (testguest.ParseLine).
	Console    string
	Verbose    bool
	KernelArgs []string
}

// TestGuestDomain returns the libvirt domain XML that boots the test guest
// and runs cfg.Command, powering off (and, being transient or with
// on_poweroff destroy, ending) when it is done. QEMU runs as libvirt's user
// (libvirt-qemu on Debian): the image, the shares and the console's folder
// must be reachable by it, which files under /root are not.
func TestGuestDomain(cfg DomainConfig) ([]byte, error) {
	if cfg.Image == nil {
		return nil, errors.New("vm: no guest image: build one with vgpu vm image")
	}
	if cfg.Name == "" || strings.ContainsAny(cfg.Name, "/\n") {
		return nil, fmt.Errorf("vm: domain name %q: want a name without slashes", cfg.Name)
	}
	if cfg.Console == "" || !filepath.IsAbs(cfg.Console) {
		return nil, fmt.Errorf("vm: the console file %q must be an absolute path", cfg.Console)
	}
	if cfg.Mem == "" {
		cfg.Mem = DefaultMem
	}
	mem, err := ParseSize(cfg.Mem)
	if err != nil {
		return nil, err
	}
	if cfg.CPUs <= 0 {
		cfg.CPUs = DefaultCPUs
	}
	typ := "qemu"
	switch cfg.Accel {
	case "", "tcg":
	case "kvm":
		typ = "kvm"
	default:
		return nil, fmt.Errorf("vm: unknown accelerator %q: want tcg or kvm", cfg.Accel)
	}
	job := testguest.Job{Args: cfg.Command, Env: cfg.Env, Dir: cfg.Dir}
	if job.Shares, err = guestShares(cfg.Shares); err != nil {
		return nil, err
	}
	cmdline, err := kernelCmdline(job, cfg.Verbose, cfg.KernelArgs)
	if err != nil {
		return nil, err
	}

	d := etree.NewDocument()
	dom := d.CreateElement("domain")
	dom.CreateAttr("type", typ)
	dom.CreateElement("name").SetText(cfg.Name)
	m := dom.CreateElement("memory")
	m.CreateAttr("unit", "MiB")
	m.SetText(fmt.Sprint(mem >> 20))
	dom.CreateElement("vcpu").SetText(fmt.Sprint(cfg.CPUs))
	os := dom.CreateElement("os")
	t := os.CreateElement("type")
	t.CreateAttr("arch", "x86_64")
	t.CreateAttr("machine", "q35")
	t.SetText("hvm")
	os.CreateElement("kernel").SetText(cfg.Image.Kernel)
	os.CreateElement("initrd").SetText(cfg.Image.Initrd)
	os.CreateElement("cmdline").SetText(cmdline)
	dom.CreateElement("features").CreateElement("acpi")
	cpu := dom.CreateElement("cpu")
	if typ == "kvm" {
		cpu.CreateAttr("mode", "host-passthrough")
	} else {
		cpu.CreateAttr("mode", "maximum") // -cpu max, as Run uses under TCG
	}
	for _, ev := range []string{"on_poweroff", "on_reboot", "on_crash"} {
		dom.CreateElement(ev).SetText("destroy")
	}
	devs := dom.CreateElement("devices")
	filesystem(devs, "/", hostRootTag, true)
	for _, s := range job.Shares {
		filesystem(devs, s.HostPath, s.Tag, s.ReadOnly)
	}
	serial := devs.CreateElement("serial")
	serial.CreateAttr("type", "file")
	serial.CreateElement("source").CreateAttr("path", cfg.Console)
	serial.CreateElement("target").CreateAttr("port", "0")
	devs.CreateElement("controller").CreateAttr("type", "usb").Element().CreateAttr("model", "none")
	devs.CreateElement("memballoon").CreateAttr("model", "none")
	d.Indent(2)
	return d.WriteToBytes()
}

// filesystem adds a 9p export: accessmode squash is QEMU's
// security_model=none, as Run passes it.
func filesystem(devs *etree.Element, host, tag string, ro bool) {
	fs := devs.CreateElement("filesystem")
	fs.CreateAttr("type", "mount")
	fs.CreateAttr("accessmode", "squash")
	fs.CreateAttr("multidevs", "remap")
	fs.CreateElement("source").CreateAttr("dir", host)
	fs.CreateElement("target").CreateAttr("dir", tag)
	if ro {
		fs.CreateElement("readonly")
	}
}
