package domainxml

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/beevik/etree"
)

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parse(t *testing.T, b []byte) *etree.Element {
	t.Helper()
	d := etree.NewDocument()
	if err := d.ReadFromBytes(b); err != nil {
		t.Fatalf("output does not parse: %v\n%s", err, b)
	}
	return d.Root()
}

// qemuArgs returns the values of the <qemu:commandline> arguments.
func qemuArgs(dom *etree.Element) []string {
	var out []string
	for _, c := range dom.ChildElements() {
		if c.Tag == "commandline" && c.NamespaceURI() == QEMUNamespace {
			for _, a := range c.ChildElements() {
				out = append(out, a.SelectAttrValue("value", ""))
			}
		}
	}
	return out
}

// tags counts the elements of each name in the document.
func tags(e *etree.Element, m map[string]int) map[string]int {
	if m == nil {
		m = map[string]int{}
	}
	m[e.FullTag()]++
	for _, c := range e.ChildElements() {
		tags(c, m)
	}
	return m
}

// validate runs libvirt's own schema check when it is installed
// (virt-xml-validate from libvirt-clients, with xmllint).
func validate(t *testing.T, b []byte) {
	t.Helper()
	if _, err := exec.LookPath("virt-xml-validate"); err != nil {
		t.Log("no virt-xml-validate (libvirt-clients): skipping libvirt's schema check")
		return
	}
	if _, err := exec.LookPath("xmllint"); err != nil {
		t.Log("no xmllint (libxml2-utils): skipping libvirt's schema check")
		return
	}
	f := filepath.Join(t.TempDir(), "domain.xml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("virt-xml-validate", f, "domain").CombinedOutput(); err != nil {
		t.Fatalf("libvirt's schema refuses the output: %v\n%s\n%s", err, out, b)
	}
}

func TestAddVGPU(t *testing.T) {
	sock := "/run/vgpu/vm/web1.sock"
	for _, tc := range []struct {
		name, file string
		opts       Options
		wantArgs   []string
		wantPort   bool
	}{
		{name: "device at boot", file: "virt-install.xml", opts: Options{Socket: sock},
			wantArgs: []string{"-chardev", "socket,id=vgpu0,path=" + sock, "-device", `{"driver":"vhost-user-vsock-pci","chardev":"vgpu0","id":"vgpu0-dev"}`}},
		{name: "hot-plug port only", file: "virt-install.xml", opts: Options{HotplugPort: true}, wantPort: true},
		{name: "both, own id", file: "virt-install.xml", opts: Options{Socket: sock, HotplugPort: true, ID: "gpu1"}, wantPort: true,
			wantArgs: []string{"-chardev", "socket,id=gpu1,path=" + sock, "-device", `{"driver":"vhost-user-vsock-pci","chardev":"gpu1","id":"gpu1-dev"}`}},
		{name: "pc machine, device at boot", file: "pc-machine.xml", opts: Options{Socket: sock},
			wantArgs: []string{"-chardev", "socket,id=vgpu0,path=" + sock, "-device", `{"driver":"vhost-user-vsock-pci","chardev":"vgpu0","id":"vgpu0-dev"}`}},
		{name: "kubevirt keeps its own arguments", file: "kubevirt.xml", opts: Options{Socket: "/var/run/vgpu/vgpu.sock"},
			wantArgs: []string{"-smbios", "type=3,manufacturer=KubeVirt", "-chardev", "socket,id=vgpu0,path=/var/run/vgpu/vgpu.sock", "-device", `{"driver":"vhost-user-vsock-pci","chardev":"vgpu0","id":"vgpu0-dev"}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := read(t, tc.file)
			out, err := AddVGPU(in, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			dom := parse(t, out)
			mb := dom.SelectElement("memoryBacking")
			if mb == nil || mb.SelectElement("source").SelectAttrValue("type", "") != "memfd" || mb.SelectElement("access").SelectAttrValue("mode", "") != "shared" {
				t.Errorf("no shared memfd memory backing:\n%s", out)
			}
			if got := qemuArgs(dom); strings.Join(got, "\n") != strings.Join(tc.wantArgs, "\n") {
				t.Errorf("qemu args %q, want %q", got, tc.wantArgs)
			}
			ports := 0
			for _, c := range dom.SelectElement("devices").SelectElements("controller") {
				if a := c.SelectElement("alias"); a != nil && a.SelectAttrValue("name", "") == HotplugPortAlias {
					ports++
					if c.SelectAttrValue("model", "") != "pcie-root-port" {
						t.Errorf("the hot-plug port is a %q", c.SelectAttrValue("model", ""))
					}
					if c.SelectAttrValue("index", "") != "16" {
						t.Errorf("the hot-plug port has index %q, want 16", c.SelectAttrValue("index", ""))
					}
				}
			}
			if (ports == 1) != tc.wantPort || ports > 1 {
				t.Errorf("%d hot-plug ports, want port=%v", ports, tc.wantPort)
			}
			// Nothing of the input is lost.
			before, after := tags(parse(t, in), nil), tags(dom, nil)
			for tag, n := range before {
				if after[tag] < n {
					t.Errorf("<%s>: %d in the input, %d in the output", tag, n, after[tag])
				}
			}
			if string(parse(t, in).SelectElement("name").Text()) != dom.SelectElement("name").Text() {
				t.Error("the name changed")
			}
			validate(t, out)
			// Idempotent: a second pass changes nothing.
			again, err := AddVGPU(out, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, out) {
				t.Errorf("a second AddVGPU changed the document:\n%s\n---\n%s", out, again)
			}
		})
	}
}

func TestAddVGPUReplacesOldSocket(t *testing.T) {
	out, err := AddVGPU(read(t, "virt-install.xml"), Options{Socket: "/run/old.sock"})
	if err != nil {
		t.Fatal(err)
	}
	out, err = AddVGPU(out, Options{Socket: "/run/new.sock"})
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Join(qemuArgs(parse(t, out)), " ")
	if strings.Contains(args, "old.sock") || strings.Count(args, "vhost-user-vsock-pci") != 1 {
		t.Fatalf("args %q: want only the new socket's device", args)
	}
}

// A legacy-syntax device of an earlier vgpu version is replaced too.
func TestAddVGPUReplacesLegacyDevice(t *testing.T) {
	in := strings.Replace(string(read(t, "kubevirt.xml")), `<qemu:arg value="type=3,manufacturer=KubeVirt"></qemu:arg>`,
		`<qemu:arg value="type=3,manufacturer=KubeVirt"></qemu:arg><qemu:arg value="-device"/><qemu:arg value="vhost-user-vsock-pci,chardev=vgpu0,id=vgpu0-dev"/>`, 1)
	out, err := AddVGPU([]byte(in), Options{Socket: "/s"})
	if err != nil {
		t.Fatal(err)
	}
	if args := strings.Join(qemuArgs(parse(t, out)), " "); strings.Count(args, "vhost-user-vsock-pci") != 1 {
		t.Fatalf("args %q: want one device", args)
	}
}

// The port's index goes above the domain's highest, so that libvirt's own
// ports (which take unaddressed devices) come below it.
func TestAddVGPUPortAboveOtherControllers(t *testing.T) {
	var ports strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&ports, "<controller type='pci' index='%d' model='pcie-root-port'/>", i)
	}
	in := strings.Replace(string(read(t, "virt-install.xml")), "<controller type='pci' index='0' model='pcie-root'/>",
		"<controller type='pci' index='0' model='pcie-root'/>"+ports.String(), 1)
	out, err := AddVGPU([]byte(in), Options{HotplugPort: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `index="21" model="pcie-root-port"`) {
		t.Fatalf("want the port at index 21:\n%s", out)
	}
	validate(t, out)
}

func TestAddVGPUNUMACellsShared(t *testing.T) {
	in := strings.Replace(string(read(t, "virt-install.xml")), "<cpu mode='host-passthrough' check='none' migratable='on'/>",
		"<cpu mode='host-passthrough'><numa><cell id='0' cpus='0-3' memory='4194304' unit='KiB' memAccess='private'/></numa></cpu>", 1)
	out, err := AddVGPU([]byte(in), Options{Socket: "/s"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `memAccess="shared"`) && !strings.Contains(string(out), `memAccess='shared'`) {
		t.Fatalf("the NUMA cell stays private:\n%s", out)
	}
}

func TestAddVGPUErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  []byte
		opts Options
		want string
	}{
		{"nothing to add", read(t, "virt-install.xml"), Options{}, "nothing to add"},
		{"not xml", []byte("<domain"), Options{Socket: "/s"}, "parsing the domain"},
		{"not a domain", []byte("<network><name>x</name></network>"), Options{Socket: "/s"}, "root element must be <domain>"},
		{"anonymous memory", read(t, "private-memory.xml"), Options{Socket: "/s"}, "<source type='anonymous'/>"},
		{"port on pc", read(t, "pc-machine.xml"), Options{HotplugPort: true}, "needs a q35 machine"},
		{"comma in socket", read(t, "virt-install.xml"), Options{Socket: "/run/a,b.sock"}, "may not contain commas"},
		{"qemu prefix taken", []byte(`<domain xmlns:qemu="urn:other"><devices/></domain>`), Options{Socket: "/s"}, "binds the prefix qemu"},
		{"text beside an element", []byte(`<domain><features>x<acpi/></features><devices/></domain>`), Options{Socket: "/s"}, "holds both text"},
		{"text beside a directive", []byte(`<domain><features>0<!0></features></domain>`), Options{Socket: "/s"}, "holds both text"},
		{"qemu prefix not a name", []byte(`<domain xmlns:8="` + QEMUNamespace + `"><devices/></domain>`), Options{Socket: "/s"}, "not an XML name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := AddVGPU(tc.doc, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}

func FuzzAddVGPU(f *testing.F) {
	for _, n := range []string{"virt-install.xml", "pc-machine.xml", "kubevirt.xml", "private-memory.xml"} {
		b, err := os.ReadFile(filepath.Join("testdata", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, true)
	}
	f.Fuzz(func(t *testing.T, doc []byte, port bool) {
		out, err := AddVGPU(doc, Options{Socket: "/run/vgpu/x.sock", HotplugPort: port})
		if err != nil {
			return
		}
		again, err := AddVGPU(out, Options{Socket: "/run/vgpu/x.sock", HotplugPort: port})
		if err != nil {
			t.Fatalf("accepted once, refused on the second pass: %v", err)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not idempotent:\n%s\n---\n%s", out, again)
		}
	})
}
