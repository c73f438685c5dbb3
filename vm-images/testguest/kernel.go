package testguest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// Kernel is a guest kernel: its image and its module folder.
type Kernel struct {
	Version string // e.g. 6.1.0-56-amd64
	Image   string // vmlinuz
	ModDir  string // .../lib/modules/<Version>
	Source  string // "host /boot" or the .deb it was unpacked from
}

// Kernel sources for Options.KernelSource.
const (
	KernelAuto = ""     // the host's /boot if it has a kernel with modules, else a .deb
	KernelHost = "host" // the host's /boot and /lib/modules only
	KernelDeb  = "deb"  // Debian's linux-image-amd64, unpacked into the cache
)

// findKernel picks the guest kernel.
func findKernel(o *Options, log hclog.Logger) (Kernel, error) {
	if o.KernelSource != KernelDeb {
		k, err := hostKernel(o.KernelVersion)
		if err == nil || o.KernelSource == KernelHost {
			return k, err
		}
		log.Debug("no usable host kernel, fetching Debian's", "why", err)
	}
	o.progress("fetching Debian's linux-image-amd64 with apt-get download (no usable kernel in /boot)")
	return debKernel(o.cacheDir(), o.KernelVersion, log)
}

// hostKernel returns the newest kernel in /boot that has its modules in
// /lib/modules (or the one named by version).
func hostKernel(version string) (Kernel, error) {
	vs := []string{version}
	if version == "" {
		m, _ := filepath.Glob("/boot/vmlinuz-*")
		vs = vs[:0]
		for _, p := range m {
			vs = append(vs, strings.TrimPrefix(filepath.Base(p), "vmlinuz-"))
		}
		sort.Sort(sort.Reverse(sort.StringSlice(vs)))
	}
	for _, v := range vs {
		k := Kernel{Version: v, Image: "/boot/vmlinuz-" + v, ModDir: "/lib/modules/" + v, Source: "host /boot"}
		if ok(k) {
			return k, nil
		}
	}
	return Kernel{}, fmt.Errorf("testguest: no kernel with modules in /boot and /lib/modules (version %q): install linux-image-amd64, or use the deb kernel source", version)
}

func ok(k Kernel) bool {
	f, err := os.Open(k.Image)
	if err != nil {
		return false
	}
	f.Close()
	_, err = os.Stat(filepath.Join(k.ModDir, "kernel"))
	return err == nil
}

// debKernel downloads Debian's kernel package with apt-get download and
// unpacks it with dpkg-deb -x into the cache; the host system is not changed.
func debKernel(cache, version string, log hclog.Logger) (Kernel, error) {
	pkg := "linux-image-" + version
	if version == "" {
		out, err := exec.Command("apt-cache", "depends", "linux-image-amd64").Output()
		if err != nil {
			return Kernel{}, fmt.Errorf("testguest: apt-cache depends linux-image-amd64: %w (is this a Debian machine with apt lists? run apt-get update)", err)
		}
		pkg = ""
		for _, l := range strings.Split(string(out), "\n") {
			l = strings.TrimSpace(l)
			if strings.HasPrefix(l, "Depends: linux-image-") {
				pkg = strings.TrimPrefix(l, "Depends: ")
				break
			}
		}
		if pkg == "" {
			return Kernel{}, fmt.Errorf("testguest: apt-cache depends linux-image-amd64 names no linux-image-* package: run apt-get update")
		}
		version = strings.TrimPrefix(pkg, "linux-image-")
		version = strings.TrimSuffix(version, "-unsigned")
	}
	root := filepath.Join(cache, "kernel-"+version)
	k := Kernel{Version: version, Image: filepath.Join(root, "boot", "vmlinuz-"+version), ModDir: filepath.Join(root, "lib", "modules", version), Source: "deb " + pkg}
	if ok(k) {
		return k, nil
	}
	dl := filepath.Join(cache, "deb")
	if err := os.MkdirAll(dl, 0o755); err != nil {
		return Kernel{}, fmt.Errorf("testguest: making the download folder: %w", err)
	}
	log.Info("downloading the guest kernel", "package", pkg)
	cmd := exec.Command("apt-get", "download", pkg)
	cmd.Dir = dl
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return Kernel{}, fmt.Errorf("testguest: apt-get download %s: %w: %s (run apt-get update, or install linux-image-amd64 and use the host kernel)", pkg, err, strings.TrimSpace(stderr.String()))
	}
	debs, _ := filepath.Glob(filepath.Join(dl, pkg+"_*.deb"))
	if len(debs) == 0 {
		return Kernel{}, fmt.Errorf("testguest: apt-get download %s left no .deb in %s", pkg, dl)
	}
	tmp := root + ".tmp"
	os.RemoveAll(tmp)
	if out, err := exec.Command("dpkg-deb", "-x", debs[len(debs)-1], tmp).CombinedOutput(); err != nil {
		return Kernel{}, fmt.Errorf("testguest: dpkg-deb -x %s: %w: %s", debs[len(debs)-1], err, out)
	}
	// Newer packages ship modules under usr/lib.
	if _, err := os.Stat(filepath.Join(tmp, "lib", "modules")); err != nil {
		os.MkdirAll(filepath.Join(tmp, "lib"), 0o755)
		os.Symlink("../usr/lib/modules", filepath.Join(tmp, "lib", "modules"))
	}
	os.RemoveAll(root)
	if err := os.Rename(tmp, root); err != nil {
		return Kernel{}, fmt.Errorf("testguest: %w", err)
	}
	if !ok(k) {
		return Kernel{}, fmt.Errorf("testguest: %s has no boot/vmlinuz-%s or lib/modules/%s", debs[len(debs)-1], version, version)
	}
	return k, nil
}
