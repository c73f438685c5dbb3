package testguest

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cavaliergopher/cpio"
	"github.com/hashicorp/go-hclog"
)

//go:embed init.sh
var initScript []byte

// format is bumped when the image layout changes, so old cache entries are
// not reused.
const format = 1

// File is an extra file for the initramfs.
type File struct {
	Src string // file on the host
	// Dst is its absolute path in the guest; it must lie under /tmp or /run
	// (init copies it into the guest's tmpfs there). Host files outside
	// /tmp are visible in the guest anyway, at their own paths.
	Dst  string
	Mode os.FileMode // 0 means Src's mode
}

// Options says what goes into a test guest image. The zero value builds the
// base image from the host's kernel (or Debian's) and busybox.
type Options struct {
	// CacheDir holds built images; empty means $VGPU_CACHE, else
	// vm-images/cache of the enclosing vgpu checkout, else the user's cache
	// folder.
	CacheDir string
	// KernelSource is KernelAuto, KernelHost or KernelDeb;
	// KernelVersion picks one version (e.g. "6.1.0-56-amd64").
	KernelSource  string
	KernelVersion string
	// ExtraModules are .ko files (e.g. guest-driver/vgpu.ko) loaded after
	// the base modules, with their depends= resolved from the kernel.
	ExtraModules []string
	// ExtraFiles are copied into the guest's /tmp or /run.
	ExtraFiles []File
	// Busybox is a static busybox binary; empty means /bin/busybox.
	Busybox string
	// Uncompressed writes a plain cpio instead of a gzipped one.
	Uncompressed bool
	Logger       hclog.Logger
	// Progress, when set, gets one line before each long step (fetching
	// Debian's kernel, writing the initramfs) and one when the image is
	// built; nothing when the image comes from the cache.
	Progress func(line string)
}

func (o *Options) progress(format string, args ...any) {
	if o.Progress != nil {
		o.Progress(fmt.Sprintf(format, args...))
	}
}

// Image is a built test guest.
type Image struct {
	Dir     string // cache folder holding the files below
	Kernel  string // kernel image (bzImage) for -kernel
	Initrd  string // initramfs for -initrd
	Meta    Meta
	Reused  bool // true when taken from the cache
	Elapsed time.Duration
}

// Meta is the image's metadata, kept as image.json beside it.
type Meta struct {
	Format        int       `json:"format"`
	Key           string    `json:"key"`
	KernelVersion string    `json:"kernel_version"`
	KernelSource  string    `json:"kernel_source"`
	Modules       []string  `json:"modules"` // load order
	ExtraFiles    []string  `json:"extra_files,omitempty"`
	Busybox       string    `json:"busybox"`
	Built         time.Time `json:"built"`
}

// ErrBusyboxNotStatic means the busybox binary needs shared libraries.
var ErrBusyboxNotStatic = errors.New("testguest: busybox is not statically linked: install busybox-static")

func (o *Options) cacheDir() string {
	if o.CacheDir != "" {
		return o.CacheDir
	}
	if d := os.Getenv("VGPU_CACHE"); d != "" {
		return d
	}
	if root := repoRoot(); root != "" {
		return filepath.Join(root, "vm-images", "cache")
	}
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "vgpu")
}

// repoRoot finds the vgpu checkout enclosing the working directory.
func repoRoot() string {
	d, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module github.com/vgpu-project/vgpu\n")) {
			return d
		}
		p := filepath.Dir(d)
		if p == d {
			return ""
		}
		d = p
	}
}

// Build builds the image o describes, or returns the cached one.
func Build(o Options) (*Image, error) {
	start := time.Now()
	log := o.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	log = log.Named("testguest")
	k, err := findKernel(&o, log)
	if err != nil {
		return nil, err
	}
	tree, err := newModTree(k.ModDir)
	if err != nil {
		return nil, err
	}
	for _, p := range o.ExtraModules {
		if err := checkVermagic(p, k.Version); err != nil {
			return nil, err
		}
	}
	mods, err := tree.resolve(BaseModules, o.ExtraModules)
	if err != nil {
		return nil, err
	}
	bb := o.Busybox
	if bb == "" {
		bb = "/bin/busybox"
	}
	if err := checkStatic(bb); err != nil {
		return nil, err
	}
	for _, f := range o.ExtraFiles {
		d := path.Clean(f.Dst)
		if !strings.HasPrefix(d, "/tmp/") && !strings.HasPrefix(d, "/run/") {
			return nil, fmt.Errorf("testguest: extra file %s: destination %q must lie under /tmp or /run; host files elsewhere are visible in the guest at their own paths", f.Src, f.Dst)
		}
	}

	// The key hashes every input's content.
	h := sha256.New()
	fmt.Fprintf(h, "format %d\nuncompressed %v\n", format, o.Uncompressed)
	h.Write(initScript)
	hashFile := func(p string) error {
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("testguest: %w", err)
		}
		defer f.Close()
		fmt.Fprintf(h, "\nfile %s\n", p)
		_, err = io.Copy(h, f)
		return err
	}
	inputs := []string{k.Image, bb}
	for _, m := range mods {
		inputs = append(inputs, m.path)
	}
	for _, f := range o.ExtraFiles {
		fmt.Fprintf(h, "dst %s %o\n", path.Clean(f.Dst), f.Mode)
		inputs = append(inputs, f.Src)
	}
	for _, p := range inputs {
		if err := hashFile(p); err != nil {
			return nil, err
		}
	}
	key := hex.EncodeToString(h.Sum(nil))[:20]
	dir := filepath.Join(o.cacheDir(), "testguest-"+key)
	if img, err := Load(dir); err == nil {
		img.Reused = true
		img.Elapsed = time.Since(start)
		log.Debug("reusing cached image", "dir", dir)
		return img, nil
	}

	o.progress("building the test guest: kernel %s (%s), %d modules, initramfs in %s", k.Version, k.Source, len(mods), o.cacheDir())
	meta := Meta{Format: format, Key: key, KernelVersion: k.Version, KernelSource: k.Source, Busybox: bb, Built: time.Now().UTC()}
	for _, m := range mods {
		meta.Modules = append(meta.Modules, m.name)
	}
	for _, f := range o.ExtraFiles {
		meta.ExtraFiles = append(meta.ExtraFiles, path.Clean(f.Dst))
	}
	if err := os.MkdirAll(o.cacheDir(), 0o755); err != nil {
		return nil, fmt.Errorf("testguest: making the cache folder (set VGPU_CACHE to move it): %w", err)
	}
	tmp, err := os.MkdirTemp(o.cacheDir(), ".build-")
	if err != nil {
		return nil, fmt.Errorf("testguest: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := copyFile(k.Image, filepath.Join(tmp, "vmlinuz")); err != nil {
		return nil, err
	}
	initrd := "initramfs.cpio.gz"
	if o.Uncompressed {
		initrd = "initramfs.cpio"
	}
	if err := writeInitramfs(filepath.Join(tmp, initrd), !o.Uncompressed, bb, mods, o.ExtraFiles); err != nil {
		return nil, err
	}
	mj, _ := json.MarshalIndent(meta, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, "image.json"), append(mj, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("testguest: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("testguest: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another builder may have won the race; use its image.
		if img, lerr := Load(dir); lerr == nil {
			return img, nil
		}
		return nil, fmt.Errorf("testguest: storing the image: %w", err)
	}
	img, err := Load(dir)
	if err != nil {
		return nil, err
	}
	img.Elapsed = time.Since(start)
	log.Info("built test guest", "dir", dir, "kernel", k.Version, "modules", len(mods), "elapsed", img.Elapsed)
	o.progress("built the test guest in %s: %s", img.Elapsed.Round(time.Millisecond), dir)
	return img, nil
}

// Load opens an image built earlier (a folder holding image.json).
func Load(dir string) (*Image, error) {
	b, err := os.ReadFile(filepath.Join(dir, "image.json"))
	if err != nil {
		return nil, fmt.Errorf("testguest: no image in %s: %w", dir, err)
	}
	img := &Image{Dir: dir, Kernel: filepath.Join(dir, "vmlinuz")}
	if err := json.Unmarshal(b, &img.Meta); err != nil || img.Meta.Format != format {
		return nil, fmt.Errorf("testguest: %s/image.json is not a format-%d image: rebuild it", dir, format)
	}
	for _, n := range []string{"initramfs.cpio.gz", "initramfs.cpio"} {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			img.Initrd = filepath.Join(dir, n)
			break
		}
	}
	if img.Initrd == "" {
		return nil, fmt.Errorf("testguest: %s has no initramfs: rebuild it", dir)
	}
	return img, nil
}

// CopyTo copies the image's files into dir (created if needed) and returns
// the copy.
func (img *Image) CopyTo(dir string) (*Image, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("testguest: %w", err)
	}
	os.Remove(filepath.Join(dir, "initramfs.cpio.gz")) // Load prefers it
	for _, src := range []string{img.Kernel, img.Initrd, filepath.Join(img.Dir, "image.json")} {
		if err := copyFile(src, filepath.Join(dir, filepath.Base(src))); err != nil {
			return nil, err
		}
	}
	return Load(dir)
}

// checkVermagic refuses a module built for another kernel: insmod would fail
// in the guest with a less helpful message.
func checkVermagic(p, version string) error {
	info, err := modinfo(p)
	if err != nil {
		return err
	}
	vm := strings.Fields(info["vermagic"])
	if len(vm) == 0 || vm[0] != version {
		return fmt.Errorf("testguest: %s was built for kernel %q, the guest kernel is %s: rebuild it against /lib/modules/%s/build (apt-get install linux-headers-%s)", p, strings.Join(vm, " "), version, version, version)
	}
	return nil
}

func checkStatic(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("testguest: busybox %s: %w (install busybox-static)", p, err)
	}
	defer f.Close()
	for _, ph := range f.Progs {
		if ph.Type == elf.PT_INTERP {
			return fmt.Errorf("%w (%s)", ErrBusyboxNotStatic, p)
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("testguest: %w", err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("testguest: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("testguest: copying %s: %w", src, err)
	}
	return out.Close()
}

// writeInitramfs writes the cpio archive: /init, /bin/busybox, the modules
// under /lib/modules with /modules.order, and the extra files under /files.
func writeInitramfs(dst string, gz bool, busybox string, mods []module, extra []File) error {
	f, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("testguest: %w", err)
	}
	defer f.Close()
	var w io.Writer = f
	var zw *gzip.Writer
	if gz {
		zw, _ = gzip.NewWriterLevel(f, gzip.BestSpeed)
		w = zw
	}
	cw := cpio.NewWriter(w)
	now := time.Unix(0, 0)
	dirs := map[string]bool{}
	addDir := func(d string) error {
		var chain []string
		for d != "." && d != "/" && !dirs[d] {
			chain = append(chain, d)
			d = path.Dir(d)
		}
		sort.Strings(chain) // parents first
		for _, c := range chain {
			dirs[c] = true
			if err := cw.WriteHeader(&cpio.Header{Name: c, Mode: cpio.TypeDir | 0o755, ModTime: now, Links: 2}); err != nil {
				return err
			}
		}
		return nil
	}
	addData := func(name string, mode os.FileMode, data []byte) error {
		if err := addDir(path.Dir(name)); err != nil {
			return err
		}
		if err := cw.WriteHeader(&cpio.Header{Name: name, Mode: cpio.TypeReg | cpio.FileMode(mode.Perm()), Size: int64(len(data)), ModTime: now, Links: 1}); err != nil {
			return err
		}
		_, err := cw.Write(data)
		return err
	}
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "dev", "proc", "sys", "host", "lib/modules"} {
		if err := addDir(d); err != nil {
			return fmt.Errorf("testguest: writing cpio: %w", err)
		}
	}
	if err := addData("init", 0o755, initScript); err != nil {
		return fmt.Errorf("testguest: writing cpio: %w", err)
	}
	bbData, err := os.ReadFile(busybox)
	if err != nil {
		return fmt.Errorf("testguest: %w", err)
	}
	if err := addData("bin/busybox", 0o755, bbData); err != nil {
		return fmt.Errorf("testguest: writing cpio: %w", err)
	}
	var order strings.Builder
	for _, m := range mods {
		b, err := moduleBytes(m.path)
		if err != nil {
			return err
		}
		name := m.name + ".ko"
		if err := addData("lib/modules/"+name, 0o644, b); err != nil {
			return fmt.Errorf("testguest: writing cpio: %w", err)
		}
		order.WriteString(name + "\n")
	}
	if err := addData("modules.order", 0o644, []byte(order.String())); err != nil {
		return fmt.Errorf("testguest: writing cpio: %w", err)
	}
	for _, e := range extra {
		b, err := os.ReadFile(e.Src)
		if err != nil {
			return fmt.Errorf("testguest: extra file: %w", err)
		}
		mode := e.Mode
		if mode == 0 {
			st, err := os.Stat(e.Src)
			if err != nil {
				return fmt.Errorf("testguest: extra file: %w", err)
			}
			mode = st.Mode()
		}
		if err := addData("files"+path.Clean(e.Dst), mode, b); err != nil {
			return fmt.Errorf("testguest: writing cpio: %w", err)
		}
	}
	if err := cw.Close(); err != nil {
		return fmt.Errorf("testguest: writing cpio: %w", err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			return fmt.Errorf("testguest: gzip: %w", err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("testguest: %w", err)
	}
	return f.Close()
}
