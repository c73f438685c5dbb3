package vm_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/backend/domainxml"
	"github.com/vgpu-project/vgpu/backend/vm"
	"github.com/vgpu-project/vgpu/vm-images/testguest"
)

// The test guest as a libvirt domain: libvirt's schema accepts it with and
// without the vGPU's parts, and it carries the job and the 9p exports Run
// would pass to QEMU. (deploy/test/libvirt.sh boots it under libvirtd.)
func TestTestGuestDomain(t *testing.T) {
	dir := t.TempDir()
	img := &testguest.Image{Kernel: "/boot/vmlinuz-x", Initrd: "/cache/initramfs.cpio.gz"}
	b, err := vm.TestGuestDomain(vm.DomainConfig{
		Name: "t1", Image: img, Command: []string{"/bin/true"}, Shares: []vm.Share{{HostPath: dir}},
		Mem: "1G", CPUs: 3, Console: "/var/tmp/t1.console",
	})
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{
		`<domain type="qemu">`, `<name>t1</name>`, `<memory unit="MiB">1024</memory>`, `<vcpu>3</vcpu>`,
		`machine="q35"`, `<kernel>/boot/vmlinuz-x</kernel>`, `rdinit=/init`, `vgpu_job=`, `<cpu mode="maximum"/>`,
		`<source dir="/"/>`, `<target dir="hostroot"/>`, `<source dir="` + dir + `"/>`, `<target dir="share0"/>`,
		`<source path="/var/tmp/t1.console"/>`, `<on_poweroff>destroy</on_poweroff>`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("no %s in\n%s", want, s)
		}
	}
	validateDomain(t, b)
	withVGPU, err := domainxml.AddVGPU(b, domainxml.Options{Socket: "/run/vgpu/vhost-user.sock", HotplugPort: true})
	if err != nil {
		t.Fatal(err)
	}
	validateDomain(t, withVGPU)

	if _, err := vm.TestGuestDomain(vm.DomainConfig{Name: "t", Image: img, Command: []string{"x"}, Console: "rel.log"}); err == nil {
		t.Error("a relative console path was accepted")
	}
	if _, err := vm.TestGuestDomain(vm.DomainConfig{Name: "t", Image: img, Command: []string{"x"}, Console: "/c", Accel: "hvf"}); err == nil {
		t.Error("an unknown accelerator was accepted")
	}
}

func validateDomain(t *testing.T, b []byte) {
	t.Helper()
	if _, err := exec.LookPath("virt-xml-validate"); err != nil {
		t.Log("no virt-xml-validate (libvirt-clients): skipping libvirt's schema check")
		return
	}
	if _, err := exec.LookPath("xmllint"); err != nil {
		t.Log("no xmllint (libxml2-utils): skipping libvirt's schema check")
		return
	}
	f := filepath.Join(t.TempDir(), "d.xml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("virt-xml-validate", f, "domain").CombinedOutput(); err != nil {
		t.Fatalf("libvirt's schema refuses the domain: %v\n%s\n%s", err, out, b)
	}
}
