package testguest

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BaseModules are the modules every test guest loads (with their
// dependencies): virtio PCI, vsock over virtio, and 9p over virtio.
var BaseModules = []string{
	"virtio", "virtio_ring", "virtio_pci",
	"vsock", "vmw_vsock_virtio_transport_common", "vmw_vsock_virtio_transport",
	"netfs", "fscache", "9pnet", "9pnet_virtio", "9p",
}

// module is one kernel module to put into the initramfs.
type module struct {
	name string // canonical name (dashes as underscores)
	path string // file on the host (.ko, .ko.xz or .ko.zst)
	deps []string
}

// modTree resolves module names in one kernel's module folder.
type modTree struct {
	dir   string            // /lib/modules/<version>
	byNam map[string]string // name -> path, filled lazily
	dep   map[string][]string
}

func modName(p string) string {
	b := filepath.Base(p)
	for _, ext := range []string{".ko.xz", ".ko.zst", ".ko.gz", ".ko"} {
		if strings.HasSuffix(b, ext) {
			b = strings.TrimSuffix(b, ext)
			break
		}
	}
	return strings.ReplaceAll(b, "-", "_")
}

// newModTree reads modules.dep when there is one, else indexes the tree and
// reads each module's own depends= (an unpacked .deb has no modules.dep).
func newModTree(dir string) (*modTree, error) {
	t := &modTree{dir: dir, byNam: map[string]string{}, dep: map[string][]string{}}
	f, err := os.Open(filepath.Join(dir, "modules.dep"))
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			mod, deps, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			n := modName(mod)
			t.byNam[n] = filepath.Join(dir, mod)
			var dn []string
			for _, d := range strings.Fields(deps) {
				dn = append(dn, modName(d))
			}
			t.dep[n] = dn
		}
		return t, sc.Err()
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("testguest: reading modules.dep: %w", err)
	}
	err = filepath.WalkDir(filepath.Join(dir, "kernel"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.Contains(d.Name(), ".ko") {
			t.byNam[modName(p)] = p
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("testguest: indexing modules in %s: %w", dir, err)
	}
	return t, nil
}

// deps returns the direct dependencies of the module at path p named n.
func (t *modTree) deps(n, p string) ([]string, error) {
	if d, ok := t.dep[n]; ok {
		return d, nil
	}
	info, err := modinfo(p)
	if err != nil {
		return nil, err
	}
	var d []string
	for _, x := range strings.Split(info["depends"], ",") {
		if x != "" {
			d = append(d, modName(x))
		}
	}
	t.dep[n] = d
	return d, nil
}

// resolve returns the named modules and extra module files with all their
// dependencies, each after everything it depends on. Names that the kernel
// has built in (modules.builtin) are skipped.
func (t *modTree) resolve(names []string, extra []string) ([]module, error) {
	builtin := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(t.dir, "modules.builtin")); err == nil {
		for _, l := range strings.Fields(string(b)) {
			builtin[modName(l)] = true
		}
	}
	var out []module
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(n, p string, chain []string) error
	visit = func(n, p string, chain []string) error {
		switch state[n] {
		case 1:
			return fmt.Errorf("testguest: module dependency cycle: %s", strings.Join(append(chain, n), " -> "))
		case 2:
			return nil
		}
		if p == "" {
			p = t.byNam[n]
			if p == "" {
				if builtin[n] {
					state[n] = 2
					return nil
				}
				return fmt.Errorf("testguest: module %s (needed by %s) not found under %s: is it built into this kernel (check /boot/config-*) or misspelled?", n, strings.Join(chain, " -> "), t.dir)
			}
		}
		state[n] = 1
		ds, err := t.deps(n, p)
		if err != nil {
			return err
		}
		for _, d := range ds {
			if err := visit(d, "", append(chain, n)); err != nil {
				return err
			}
		}
		state[n] = 2
		out = append(out, module{name: n, path: p, deps: ds})
		return nil
	}
	for _, n := range names {
		if err := visit(modName(n), "", nil); err != nil {
			return nil, err
		}
	}
	for _, p := range extra {
		if err := visit(modName(p), p, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// modinfo reads the .modinfo section of a module file.
func modinfo(p string) (map[string]string, error) {
	b, err := moduleBytes(p)
	if err != nil {
		return nil, err
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("testguest: %s is not a kernel module (ELF): %w", p, err)
	}
	s := f.Section(".modinfo")
	if s == nil {
		return nil, fmt.Errorf("testguest: %s has no .modinfo section: is it a kernel module?", p)
	}
	data, err := s.Data()
	if err != nil {
		return nil, fmt.Errorf("testguest: reading .modinfo of %s: %w", p, err)
	}
	m := map[string]string{}
	for _, kv := range bytes.Split(data, []byte{0}) {
		k, v, ok := strings.Cut(string(kv), "=")
		if ok {
			m[k] = v
		}
	}
	return m, nil
}

// moduleBytes returns a module file's contents, decompressed: busybox insmod
// takes plain .ko files only.
func moduleBytes(p string) ([]byte, error) {
	var tool string
	switch {
	case strings.HasSuffix(p, ".ko.xz"):
		tool = "xz"
	case strings.HasSuffix(p, ".ko.zst"):
		tool = "zstd"
	case strings.HasSuffix(p, ".ko.gz"):
		tool = "gzip"
	default:
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("testguest: reading module: %w", err)
		}
		return b, nil
	}
	out, err := exec.Command(tool, "-dc", p).Output()
	if err != nil {
		return nil, fmt.Errorf("testguest: decompressing %s with %s (install it): %w", p, tool, err)
	}
	return out, nil
}
