package pattern_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDriverSegmentHelpers builds the guest driver's KUnit tables
// (guest-driver/vgpu_segs_test.c: segment coalescing, page spans, user
// frame checks) as a host program with the stand-in in
// guest-driver/tests/kunit_host and runs them, so they run wherever Go tests
// do, without a KUnit kernel.
func TestDriverSegmentHelpers(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	root := repoRoot(t)
	bin := filepath.Join(t.TempDir(), "segs_host_test")
	build := exec.Command(cc, "-O2", "-Wall", "-Wextra", "-Werror", "-Wno-missing-field-initializers",
		"-D__KERNEL__", "-Iguest-driver/tests/kunit_host/include", "-Iguest-driver", "-Iprotocol",
		"-o", bin, "guest-driver/vgpu_segs_test.c")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !strings.HasPrefix(l, "ok ") {
			t.Log(l)
		}
	}
	if err != nil {
		t.Fatalf("KUnit tables failed: %v", err)
	}
}
