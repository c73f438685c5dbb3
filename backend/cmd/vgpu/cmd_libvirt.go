package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/vgpu-project/vgpu/backend/domainxml"
	"github.com/vgpu-project/vgpu/backend/serveconf"
)

func init() {
	register("libvirt-xml", command{summary: "print the libvirt domain XML a VM needs for a vGPU, or add it to a domain", run: cmdLibvirtXML})
}

// libvirtSkeleton is the domain "vgpu libvirt-xml" fills when it is given
// none: the output then shows only the vGPU's parts.
const libvirtSkeleton = `<domain type='kvm'><os><type machine='q35'>hvm</type></os><devices/></domain>`

func cmdLibvirtXML(args []string) int {
	fs := flag.NewFlagSet("libvirt-xml", flag.ContinueOnError)
	var opts domainxml.Options
	sock := fs.String("vhost-user-socket", "", "the backend's vhost-user socket (default: vhost-user-socket in "+serveconf.DefaultPath+")")
	vmName := fs.String("vm", "", "use the socket of the 'vgpu front@NAME' service for this VM")
	domain := fs.String("domain", "", "add the vGPU to this domain XML file ('-': standard input), e.g. from virsh dumpxml")
	fs.BoolVar(&opts.HotplugPort, "hotplug", false, "add a free PCIe root port (alias "+domainxml.HotplugPortAlias+") for vgpu attach --libvirt; with no socket given, no device at boot")
	fs.StringVar(&opts.ID, "id", "vgpu0", "chardev id (the device is ID-dev)")
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, `usage: vgpu libvirt-xml [--vhost-user-socket PATH | --vm NAME] [--hotplug] [--domain FILE|-]

Print what a libvirt domain needs for a vGPU: guest RAM in a shared memfd (<memoryBacking>)
and the vhost-user-vsock device, which libvirt has no element for (its <vsock> is the
kernel's vhost-vsock only, libvirt 9.0 included), as <qemu:commandline> arguments.
With --domain, print that domain with them added:

  virsh dumpxml web1 | vgpu libvirt-xml --vm web1 --domain - >web1.xml && virsh define web1.xml

QEMU (user libvirt-qemu, group kvm on Debian) must be able to connect to the socket.
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	switch {
	case *sock != "" && *vmName != "":
		fmt.Fprintln(os.Stderr, "vgpu libvirt-xml: give --vhost-user-socket or --vm, not both")
		return 2
	case *vmName != "":
		p, err := serveconf.VMSocket(*vmName)
		if err != nil {
			fmt.Fprintln(os.Stderr, "vgpu libvirt-xml: --vm:", err)
			return 2
		}
		opts.Socket = p
	case *sock != "":
		opts.Socket = *sock
	case !opts.HotplugPort:
		p, err := configDefault(serveconf.KeyVhostUserSocket, "")
		if err != nil {
			fmt.Fprintln(os.Stderr, "vgpu libvirt-xml:", err)
			return 2
		}
		if p == "" {
			fmt.Fprintln(os.Stderr, "vgpu libvirt-xml: no socket: give --vhost-user-socket PATH, --vm NAME or --hotplug (no "+serveconf.DefaultPath+" names one)")
			return 2
		}
		opts.Socket = p
	}
	in := []byte(libvirtSkeleton)
	if *domain != "" {
		var err error
		if *domain == "-" {
			in, err = io.ReadAll(io.LimitReader(os.Stdin, 16<<20))
		} else {
			in, err = os.ReadFile(*domain)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "vgpu libvirt-xml:", err)
			return 1
		}
	}
	out, err := domainxml.AddVGPU(in, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vgpu libvirt-xml:", err)
		return 1
	}
	if *domain == "" {
		fmt.Println("<!-- The vGPU's parts of a libvirt domain (a q35 machine). Add them to yours, or let vgpu:")
		fmt.Println("     virsh dumpxml DOMAIN | vgpu libvirt-xml ... --domain - >DOMAIN.xml && virsh define DOMAIN.xml -->")
	}
	os.Stdout.Write(out)
	return 0
}
