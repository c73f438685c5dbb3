// Package domainxml adds a vGPU to a libvirt domain's XML: guest RAM in a
// shared memfd, the vhost-user-vsock device that carries the vGPU, and (for
// vgpu attach) a free PCIe root port. "vgpu libvirt-xml", the KubeVirt
// sidecar hook (package kubevirthook) and the deployment test use it.
//
// libvirt has elements for the memory backing (<memoryBacking> with <source
// type='memfd'/> and <access mode='shared'/>, libvirt 4.10 and later) and for
// the root port (<controller type='pci' model='pcie-root-port'> with a user
// alias, "ua-vgpu-rp", that becomes its QEMU id). It has none for a
// vhost-user-vsock device: its <vsock> element is the kernel's vhost-vsock
// only (libvirt 9.0 in Debian 12 included; its schema has no backend or
// source for it), so the device goes in <qemu:commandline> as -chardev and
// -device arguments. The -device is in QEMU's JSON syntax (QEMU 6.2 and
// later): libvirt 9.0 passes its own devices that way with explicit PCI
// addresses, and QEMU creates every legacy-syntax -device before the JSON
// ones, so a legacy one would take a slot libvirt has assigned to another
// device.
//
// Edits are idempotent: the vGPU's own arguments and port are replaced, not
// duplicated, and everything else in the document is kept. Trust: the
// document comes from the administrator or from KubeVirt; it is parsed with
// encoding/xml (through etree) and must have a <domain> root.
package domainxml

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/beevik/etree"
)

// QEMUNamespace is the namespace of libvirt's <qemu:commandline>.
const QEMUNamespace = "http://libvirt.org/schemas/domain/qemu/1.0"

// HotplugPortAlias is the root port's libvirt alias; libvirt passes it to
// QEMU as the device id, which "vgpu attach --libvirt" plugs into.
const HotplugPortAlias = "ua-vgpu-rp"

// Options says what to add.
type Options struct {
	// Socket is the vgpu backend's vhost-user socket as QEMU sees it; the
	// device is added at boot when it is set.
	Socket string
	// HotplugPort adds a free PCIe root port for "vgpu attach --libvirt"
	// (q35 machines only).
	HotplugPort bool
	// ID names the chardev (the device is ID-dev); default "vgpu0".
	ID string
}

// ErrNotDomain is returned for a document whose root is not <domain>.
var ErrNotDomain = errors.New("domainxml: not a libvirt domain (the root element must be <domain>)")

// AddVGPU returns the domain XML doc with what opts asks for added.
func AddVGPU(doc []byte, opts Options) ([]byte, error) {
	if opts.Socket == "" && !opts.HotplugPort {
		return nil, errors.New("domainxml: nothing to add: give the backend's socket or ask for a hot-plug port")
	}
	if opts.ID == "" {
		opts.ID = "vgpu0"
	}
	if err := checkQEMUValue(opts.Socket); err != nil {
		return nil, err
	}
	if err := checkQEMUValue(opts.ID); err != nil {
		return nil, err
	}
	d := etree.NewDocument()
	if err := d.ReadFromBytes(doc); err != nil {
		return nil, fmt.Errorf("domainxml: parsing the domain: %w", err)
	}
	dom := d.Root()
	if dom == nil || dom.Tag != "domain" || dom.Space != "" {
		return nil, ErrNotDomain
	}
	if err := sharedMemfd(dom); err != nil {
		return nil, err
	}
	if opts.HotplugPort {
		if err := hotplugPort(dom); err != nil {
			return nil, err
		}
	}
	if err := commandline(dom, opts); err != nil {
		return nil, err
	}
	// Checked after the edits, which add elements: text beside them would
	// be re-indented on every pass.
	if e := mixedContent(dom); e != nil {
		return nil, fmt.Errorf("domainxml: <%s> holds both text and elements (or comments or directives), which no libvirt domain does", e.FullTag())
	}
	d.Indent(2)
	return d.WriteToBytes()
}

// mixedContent returns the first element under e (or e) that has both
// non-blank text and other content (elements, comments, directives,
// processing instructions): Indent puts line breaks around that content,
// and the text would change on every pass.
func mixedContent(e *etree.Element) *etree.Element {
	text, other := false, false
	for _, t := range e.Child {
		if cd, ok := t.(*etree.CharData); ok {
			text = text || !cd.IsWhitespace()
		} else {
			other = true
		}
	}
	if text && other {
		return e
	}
	for _, c := range e.ChildElements() {
		if m := mixedContent(c); m != nil {
			return m
		}
	}
	return nil
}

// deviceDriver is QEMU's name for the vGPU's device.
const deviceDriver = "vhost-user-vsock-pci"

// jsonDevice is the -device argument in QEMU's JSON syntax.
type jsonDevice struct {
	Driver  string `json:"driver"`
	Chardev string `json:"chardev"`
	ID      string `json:"id"`
}

// isDevice reports whether the -device argument v is the vGPU device of
// chardev id, in JSON or legacy syntax.
func isDevice(v, id string) bool {
	var d jsonDevice
	if json.Unmarshal([]byte(v), &d) == nil {
		return d.Driver == deviceDriver && d.Chardev == id
	}
	return strings.HasPrefix(v, deviceDriver+",chardev="+id+",")
}

// checkQEMUValue refuses what would break a QEMU option value or the
// command line.
func checkQEMUValue(s string) error {
	if strings.ContainsAny(s, ",\n\x00") {
		return fmt.Errorf("domainxml: %q: a socket path or id for QEMU may not contain commas, newlines or NULs", s)
	}
	return nil
}

// child returns parent's first child element named tag (no namespace),
// creating it (at the end) when there is none.
func child(parent *etree.Element, tag string) *etree.Element {
	for _, c := range parent.ChildElements() {
		if c.Space == "" && c.Tag == tag {
			return c
		}
	}
	return parent.CreateElement(tag)
}

// sharedMemfd makes guest RAM a shared memfd: vhost-user maps it from the
// fds QEMU sends, and "vgpu front" takes only sealed memfds.
func sharedMemfd(dom *etree.Element) error {
	mb := child(dom, "memoryBacking")
	src := child(mb, "source")
	if t := src.SelectAttrValue("type", "memfd"); t != "memfd" {
		return fmt.Errorf("domainxml: the domain's memory backing is <source type='%s'/>; a vGPU needs guest RAM in a memfd (<source type='memfd'/>): change or remove it", t)
	}
	src.CreateAttr("type", "memfd")
	child(mb, "access").CreateAttr("mode", "shared")
	// Per-NUMA-cell settings override the domain's access mode.
	if cpu := dom.SelectElement("cpu"); cpu != nil {
		if numa := cpu.SelectElement("numa"); numa != nil {
			for _, cell := range numa.SelectElements("cell") {
				if a := cell.SelectAttr("memAccess"); a != nil && a.Value != "shared" {
					a.Value = "shared"
				}
			}
		}
	}
	return nil
}

// The hot-plug port's controller index is at least minPortIndex and above
// the domain's other PCI controllers. libvirt puts devices that have no PCI
// address yet on the first free root port, which would be ours; given a
// higher index it fills the indexes below with root ports of its own, and
// those take the devices (tested with libvirt 9.0). A domain whose devices
// need more than minPortIndex-1 new ports still lands one on it.
const (
	minPortIndex = 16
	maxPCIIndex  = 255
)

// hotplugPort adds the root port "vgpu attach --libvirt" plugs into.
func hotplugPort(dom *etree.Element) error {
	if os := dom.SelectElement("os"); os != nil {
		if t := os.SelectElement("type"); t != nil {
			if m := t.SelectAttrValue("machine", ""); m != "" && !strings.Contains(m, "q35") {
				return fmt.Errorf("domainxml: a PCIe root port needs a q35 machine, not %q: on a pc machine hot-plug into the root bus (vgpu attach --bus pci.0) instead", m)
			}
		}
	}
	devs := child(dom, "devices")
	root := false
	index := minPortIndex - 1
	for _, c := range devs.SelectElements("controller") {
		if a := c.SelectElement("alias"); a != nil && a.SelectAttrValue("name", "") == HotplugPortAlias {
			return nil
		}
		if c.SelectAttrValue("type", "") != "pci" {
			continue
		}
		root = root || c.SelectAttrValue("model", "") == "pcie-root"
		if i, err := strconv.Atoi(c.SelectAttrValue("index", "")); err == nil && i > index {
			index = i
		}
	}
	if index+1 > maxPCIIndex {
		return fmt.Errorf("domainxml: the domain's PCI controller indexes reach %d: no index is left for the hot-plug port", index)
	}
	if !root {
		// Without it libvirt would give the port index 0, the root's.
		r := devs.CreateElement("controller")
		r.CreateAttr("type", "pci")
		r.CreateAttr("index", "0")
		r.CreateAttr("model", "pcie-root")
	}
	c := devs.CreateElement("controller")
	c.CreateAttr("type", "pci")
	c.CreateAttr("index", strconv.Itoa(index+1))
	c.CreateAttr("model", "pcie-root-port")
	c.CreateElement("alias").CreateAttr("name", HotplugPortAlias)
	return nil
}

// commandline puts the vGPU's -chardev and -device arguments in
// <qemu:commandline>, replacing earlier ones of the same ID, and makes sure
// the root declares the qemu namespace.
func commandline(dom *etree.Element, opts Options) error {
	prefix := ""
	for _, a := range dom.Attr {
		if a.Space == "xmlns" && a.Value == QEMUNamespace {
			prefix = a.Key
		}
	}
	if prefix != "" && !xmlName(prefix) {
		// encoding/xml reads such a declaration, but not the elements
		// written with its prefix: the output could not be read back.
		return fmt.Errorf("domainxml: the domain binds %s to the prefix %q, which is not an XML name", QEMUNamespace, prefix)
	}
	if prefix == "" {
		if a := dom.SelectAttr("xmlns:qemu"); a != nil {
			return fmt.Errorf("domainxml: the domain binds the prefix qemu to %q, not %s", a.Value, QEMUNamespace)
		}
		prefix = "qemu"
		dom.CreateAttr("xmlns:qemu", QEMUNamespace)
	}
	var cl *etree.Element
	for _, c := range dom.ChildElements() {
		if c.Tag == "commandline" && c.NamespaceURI() == QEMUNamespace {
			cl = c
			break
		}
	}
	chardev := "socket,id=" + opts.ID + ","
	if cl != nil {
		// Drop this vGPU's earlier -chardev/-device pairs.
		args := cl.ChildElements()
		for i := 1; i < len(args); i++ {
			v := args[i].SelectAttrValue("value", "")
			if strings.HasPrefix(v, chardev) || isDevice(v, opts.ID) {
				cl.RemoveChild(args[i-1])
				cl.RemoveChild(args[i])
			}
		}
	}
	if opts.Socket == "" {
		if cl != nil && len(cl.ChildElements()) == 0 {
			dom.RemoveChild(cl)
		}
		return nil
	}
	if cl == nil {
		cl = dom.CreateElement(prefix + ":commandline")
	}
	dev, err := json.Marshal(jsonDevice{Driver: deviceDriver, Chardev: opts.ID, ID: opts.ID + "-dev"})
	if err != nil {
		return err
	}
	for _, v := range []string{
		"-chardev", chardev + "path=" + opts.Socket,
		"-device", string(dev),
	} {
		cl.CreateElement(prefix+":arg").CreateAttr("value", v)
	}
	return nil
}

// xmlName reports whether s is an XML name without a colon (a namespace
// prefix): a letter or '_' first, then letters, digits, '_', '-' or '.'.
func xmlName(s string) bool {
	for i, r := range s {
		switch {
		case r == '_' || unicode.IsLetter(r):
		case i > 0 && (r == '-' || r == '.' || unicode.IsDigit(r)):
		default:
			return false
		}
	}
	return s != ""
}
