package testguest

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cavaliergopher/cpio"
)

func hostKernelOrSkip(t *testing.T) Kernel {
	t.Helper()
	k, err := hostKernel("")
	if err != nil {
		if os.Getenv("VGPU_REQUIRE_VM") == "1" {
			t.Fatal(err)
		}
		t.Skipf("%v (set VGPU_REQUIRE_VM=1 to fail instead)", err)
	}
	return k
}

func TestResolveOrder(t *testing.T) {
	k := hostKernelOrSkip(t)
	tree, err := newModTree(k.ModDir)
	if err != nil {
		t.Fatal(err)
	}
	mods, err := tree.resolve(BaseModules, nil)
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, m := range mods {
		pos[m.name] = i
	}
	for _, n := range BaseModules {
		if _, ok := pos[n]; !ok {
			t.Errorf("module %s missing from %v", n, pos)
		}
	}
	for _, m := range mods {
		for _, d := range m.deps {
			if pd, ok := pos[d]; ok && pd > pos[m.name] {
				t.Errorf("%s loads before its dependency %s", m.name, d)
			}
		}
	}
	if _, err := tree.resolve([]string{"no_such_module"}, nil); err == nil {
		t.Error("resolved a module that does not exist")
	}
}

// TestResolveFromModinfo checks the path used for an unpacked .deb, which
// has no modules.dep: dependencies come from each module's .modinfo.
func TestResolveFromModinfo(t *testing.T) {
	k := hostKernelOrSkip(t)
	dep, err := newModTree(k.ModDir)
	if err != nil {
		t.Fatal(err)
	}
	info := &modTree{dir: k.ModDir, byNam: dep.byNam, dep: map[string][]string{}}
	a, err := dep.resolve(BaseModules, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := info.resolve(BaseModules, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(b) {
		t.Fatalf("modules.dep gives %d modules, .modinfo %d", len(a), len(b))
	}
}

func TestBuildImage(t *testing.T) {
	k := hostKernelOrSkip(t)
	extra := filepath.Join(t.TempDir(), "payload")
	os.WriteFile(extra, []byte("hi\n"), 0o755)
	cache := t.TempDir()
	// An extra module: a copy of a real one, loaded after its dependencies.
	mod := filepath.Join(t.TempDir(), "vsock_loopback.ko")
	src := filepath.Join(k.ModDir, "kernel/net/vmw_vsock/vsock_loopback.ko")
	b, err := moduleBytes(src)
	if err != nil {
		t.Skipf("no vsock_loopback module: %v", err)
	}
	os.WriteFile(mod, b, 0o644)
	o := Options{CacheDir: cache, KernelSource: KernelHost, ExtraModules: []string{mod}, ExtraFiles: []File{{Src: extra, Dst: "/tmp/bin/payload"}}}
	img, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if img.Reused || img.Meta.KernelVersion != k.Version {
		t.Errorf("first build: reused %v, kernel %q", img.Reused, img.Meta.KernelVersion)
	}
	again, err := Build(o)
	if err != nil || !again.Reused || again.Dir != img.Dir {
		t.Errorf("second build not reused: %+v, %v", again, err)
	}

	f, err := os.Open(img.Initrd)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	r := cpio.NewReader(zr)
	files := map[string]string{}
	for {
		h, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var data []byte
		if h.Mode.IsRegular() && h.Size < 1<<16 {
			data, _ = io.ReadAll(r)
		}
		files[h.Name] = string(data)
	}
	for _, n := range []string{"init", "bin/busybox", "modules.order", "lib/modules/9p.ko", "lib/modules/vsock_loopback.ko", "files/tmp/bin/payload"} {
		if _, ok := files[n]; !ok {
			t.Errorf("initramfs lacks %s", n)
		}
	}
	order := strings.Fields(files["modules.order"])
	if len(order) == 0 || order[len(order)-1] != "vsock_loopback.ko" {
		t.Errorf("extra module not last: %v", order)
	}
	if files["files/tmp/bin/payload"] != "hi\n" {
		t.Errorf("payload %q", files["files/tmp/bin/payload"])
	}
}

func TestBuildRefuses(t *testing.T) {
	hostKernelOrSkip(t)
	if _, err := Build(Options{CacheDir: t.TempDir(), KernelSource: KernelHost, ExtraFiles: []File{{Src: "/etc/hostname", Dst: "/etc/x"}}}); err == nil {
		t.Error("accepted an extra file outside /tmp and /run")
	}
	bad := filepath.Join(t.TempDir(), "bad.ko")
	os.WriteFile(bad, []byte("not elf"), 0o644)
	if _, err := Build(Options{CacheDir: t.TempDir(), KernelSource: KernelHost, ExtraModules: []string{bad}}); err == nil {
		t.Error("accepted a module that is not ELF")
	}
	if _, err := Build(Options{CacheDir: t.TempDir(), KernelSource: KernelHost, Busybox: "/bin/true"}); err == nil {
		t.Error("accepted a dynamic busybox")
	}
}
