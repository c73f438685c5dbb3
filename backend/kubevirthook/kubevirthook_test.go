package kubevirthook

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/backend/deviceplugin"
)

const domainFixture = "../domainxml/testdata/kubevirt.xml"

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// main runs the hook as the sidecar-shim does: --vmi JSON --domain XML.
func runMain(t *testing.T, vmiFile string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	rc := Main([]string{"--vmi", string(fixture(t, filepath.Join("testdata", vmiFile))), "--domain", string(fixture(t, domainFixture))}, &out, &errb)
	return out.String(), errb.String(), rc
}

func TestOnDefineDomainAddsVGPU(t *testing.T) {
	out, errs, rc := runMain(t, "vmi-vgpu.json")
	if rc != 0 {
		t.Fatalf("exit %d: %s", rc, errs)
	}
	for _, want := range []string{
		`<source type="memfd"/>`, `<access mode="shared"/>`,
		`<qemu:arg value="socket,id=vgpu0,path=` + deviceplugin.ContainerSocket + `"/>`,
		`vhost-user-vsock-pci`,
		`<qemu:arg value="type=3,manufacturer=KubeVirt"/>`, // KubeVirt's own argument stays
		`<name>default_testvmi</name>`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s in the new domain:\n%s", want, out)
		}
	}
}

func TestOnDefineDomainLeavesOtherVMIs(t *testing.T) {
	out, errs, rc := runMain(t, "vmi-plain.json")
	if rc != 0 {
		t.Fatalf("exit %d: %s", rc, errs)
	}
	if out != string(fixture(t, domainFixture)) {
		t.Fatal("a VMI without a vGPU got a changed domain")
	}
}

func TestOnDefineDomainErrors(t *testing.T) {
	_, errs, rc := runMain(t, "vmi-two.json")
	if rc != 1 || !strings.Contains(errs, "asks for 2 vGPUs") {
		t.Errorf("two vGPUs: exit %d, %q", rc, errs)
	}
	dom := fixture(t, domainFixture)
	for _, tc := range []struct{ vmi, domain, want string }{
		{`{`, string(dom), "decoding the VMI"},
		{`{"spec":{"domain":{"resources":{"limits":{"vgpu-project.io/vgpu":"one"}}}}}`, string(dom), "not a whole number"},
		{`{"spec":{"domain":{"resources":{"limits":{"vgpu-project.io/vgpu":-1}}}}}`, string(dom), "not a whole number"},
		{`{"spec":{"domain":{"resources":{"requests":{"vgpu-project.io/vgpu":1}}}}}`, `<network/>`, "root element must be <domain>"},
	} {
		_, err := OnDefineDomain([]byte(tc.vmi), []byte(tc.domain))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("vmi %s: err %v, want %q", tc.vmi, err, tc.want)
		}
	}
	var out, e bytes.Buffer
	if rc := Main(nil, &out, &e); rc != 2 || !strings.Contains(e.String(), "--vmi JSON --domain XML") {
		t.Errorf("no arguments: exit %d, %q", rc, e.String())
	}
}
