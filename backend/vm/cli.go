package vm

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/front"
	"github.com/vgpu-project/vgpu/backend/qmp"
	"github.com/vgpu-project/vgpu/vm-images/testguest"
)

// CLI holds the entry points of `vgpu vm run`, `vgpu vm image`,
// `vgpu attach` and `vgpu qemu-args`. Each method parses its own flags
// (args without the subcommand name) and returns the process exit code.
type CLI struct {
	Stdout, Stderr io.Writer
	Logger         hclog.Logger
	// StartBackend, when set, starts an in-process vGPU backend for
	// `vm run` without --vgpu: it returns the vhost-user socket it listens
	// on and a function that stops it. Nil means no vGPU device unless
	// --vgpu is given.
	StartBackend func(ctx context.Context, log hclog.Logger) (socket string, stop func(), err error)
	// DefaultSocket, when set, gives the --vhost-user-socket of attach and
	// qemu-args when neither it nor --vm is given: the packaged service's
	// socket ("" for none).
	DefaultSocket func() (string, error)
	// VMSocket, when set, maps --vm NAME to the socket of that VM's
	// "vgpu front@NAME" service; nil leaves --vm out.
	VMSocket func(name string) (string, error)
}

// socketFlags are the flags that say which vGPU socket a VM uses.
type socketFlags struct {
	socket, vm string
}

func (c CLI) registerSocket(fs *flag.FlagSet, f *socketFlags, what string) {
	fs.StringVar(&f.socket, "vhost-user-socket", "", what+" (default: the packaged service's, from /etc/vgpu/vgpu.conf)")
	if c.VMSocket != nil {
		fs.StringVar(&f.vm, "vm", "", "use the socket of the 'vgpu front@NAME' service for this VM name")
	}
}

// resolve returns the socket the flags name, or the default.
func (c CLI) resolveSocket(f socketFlags) (string, error) {
	switch {
	case f.socket != "" && f.vm != "":
		return "", errors.New("give --vhost-user-socket or --vm, not both")
	case f.socket != "":
		return f.socket, nil
	case f.vm != "":
		return c.VMSocket(f.vm)
	case c.DefaultSocket != nil:
		return c.DefaultSocket()
	}
	return "", nil
}

// ExitLauncherError is `vm run`'s exit code when the VM could not run the
// command (as docker and podman use 125).
const ExitLauncherError = 125

func (c CLI) out() io.Writer {
	if c.Stdout == nil {
		return os.Stdout
	}
	return c.Stdout
}

func (c CLI) errw() io.Writer {
	if c.Stderr == nil {
		return os.Stderr
	}
	return c.Stderr
}

func (c CLI) log() hclog.Logger {
	if c.Logger == nil {
		return hclog.New(&hclog.LoggerOptions{Name: "vgpu", Output: c.errw(), Level: hclog.Warn})
	}
	return c.Logger
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// imageFlags are the flags that pick or build the test guest.
type imageFlags struct {
	image, cache, kernelSource, kernelVersion string
	modules                                   listFlag
	uncompressed                              bool
}

func (f *imageFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.image, "image", os.Getenv("VGPU_TESTGUEST_IMAGE"), "use this prebuilt test guest folder (from `vgpu vm image`) instead of building one; env VGPU_TESTGUEST_IMAGE")
	fs.StringVar(&f.cache, "cache", "", "image cache folder (default $VGPU_CACHE or vm-images/cache)")
	fs.StringVar(&f.kernelSource, "kernel-source", "", "guest kernel: host (/boot), deb (apt-get download linux-image-amd64), or empty for host then deb")
	fs.StringVar(&f.kernelVersion, "kernel-version", "", "guest kernel version, e.g. 6.1.0-56-amd64")
	fs.Var(&f.modules, "module", "extra kernel module (.ko) to load in the guest, e.g. guest-driver/vgpu.ko (repeatable)")
	fs.BoolVar(&f.uncompressed, "uncompressed", false, "write an uncompressed initramfs")
}

func (f *imageFlags) get(log hclog.Logger) (*testguest.Image, error) {
	if f.image != "" {
		return testguest.Load(f.image)
	}
	return testguest.Build(testguest.Options{
		CacheDir: f.cache, KernelSource: f.kernelSource, KernelVersion: f.kernelVersion,
		ExtraModules: f.modules, Uncompressed: f.uncompressed, Logger: log,
		Progress: func(line string) { fmt.Fprintln(os.Stderr, "vgpu:", line) },
	})
}

// VMImage is `vgpu vm image`: build (or find in the cache) the test guest
// and print its folder and metadata.
func (c CLI) VMImage(args []string) int {
	fs := flag.NewFlagSet("vm image", flag.ContinueOnError)
	fs.SetOutput(c.errw())
	var f imageFlags
	f.register(fs)
	out := fs.String("out", "", "also copy the image to this folder (e.g. .carry/vm/testguest, to run it on a machine without a kernel package: vm run --image)")
	fs.Usage = func() {
		fmt.Fprintln(c.errw(), "usage: vgpu vm image [options]\n\nBuild the test guest (kernel + initramfs) and print its folder.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	img, err := f.get(c.log())
	if err != nil {
		fmt.Fprintln(c.errw(), "vgpu vm image:", err)
		return 1
	}
	if *out != "" {
		if img, err = img.CopyTo(*out); err != nil {
			fmt.Fprintln(c.errw(), "vgpu vm image:", err)
			return 1
		}
	}
	fmt.Fprintln(c.out(), img.Dir)
	b, _ := json.MarshalIndent(img.Meta, "", "  ")
	fmt.Fprintln(c.out(), string(b))
	return 0
}

// VMRun is `vgpu vm run [options] -- COMMAND...`: boot the test guest, run
// COMMAND in it, and exit with its exit status (125 when the VM failed).
func (c CLI) VMRun(args []string) int {
	fs := flag.NewFlagSet("vm run", flag.ContinueOnError)
	fs.SetOutput(c.errw())
	var (
		f        imageFlags
		cfg      Config
		shares   listFlag
		env      listFlag
		noVGPU   bool
		timings  bool
		viaFront string
	)
	f.register(fs)
	fs.StringVar(&cfg.Mem, "mem", DefaultMem, "guest RAM")
	fs.IntVar(&cfg.CPUs, "cpus", DefaultCPUs, "guest CPUs")
	fs.StringVar(&cfg.Accel, "accel", "tcg", "tcg or kvm")
	fs.StringVar(&cfg.VGPUSocket, "vgpu", "", "vhost-user-vsock socket of a running vgpu backend (default: start one in-process)")
	fs.StringVar(&viaFront, "front", "", "the backend's front socket (vgpu serve --front-socket PATH): serve the VM's vGPU device in this process, as 'vgpu front' does, so the VM keeps it across backend restarts")
	fs.BoolVar(&noVGPU, "no-vgpu", false, "boot without a vGPU device")
	fs.Var(&shares, "share", "host folder the guest may write, at the same path in the guest; HOST:GUEST to move it (repeatable)")
	fs.Var(&env, "env", "KEY=VALUE for the command (repeatable)")
	fs.StringVar(&cfg.Dir, "cwd", "", "working directory in the guest (default /)")
	fs.DurationVar(&cfg.Timeout, "timeout", DefaultTimeout, "kill the guest after this long")
	fs.StringVar(&cfg.QEMU, "qemu", "", "qemu-system-x86_64 to run (default: from PATH)")
	fs.StringVar(&cfg.Bundle, "bundle", "", "QEMU bundle folder or .tar.xz from scripts/qemu-bundle.sh")
	fs.StringVar(&cfg.QMPSocket, "qmp", "", "QMP socket path (default: a temporary one)")
	fs.BoolVar(&cfg.Verbose, "verbose", false, "show the kernel log and init's marker lines")
	fs.BoolVar(&timings, "timings", false, "print boot timings on stderr")
	var qargs, kargs listFlag
	fs.Var(&qargs, "qemu-arg", "extra QEMU argument, one per flag (repeatable), e.g. --qemu-arg=-bios --qemu-arg=qboot.rom")
	fs.Var(&kargs, "kernel-arg", "extra guest kernel command line parameter (repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(c.errw(), "usage: vgpu vm run [options] -- COMMAND [ARGS...]\n\nBoot the test guest (host root read-only over 9p, /tmp a guest tmpfs), run COMMAND\nin it and exit with its status.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg.Command = fs.Args()
	if len(cfg.Command) == 0 {
		fs.Usage()
		return 2
	}
	for _, s := range shares {
		h, g, _ := strings.Cut(s, ":")
		cfg.Shares = append(cfg.Shares, Share{HostPath: h, GuestPath: g})
	}
	cfg.Env = env
	cfg.QEMUArgs, cfg.KernelArgs = qargs, kargs
	cfg.Console = c.out()
	log := c.log()
	cfg.Logger = log

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	img, err := f.get(log)
	if err != nil {
		fmt.Fprintln(c.errw(), "vgpu vm run:", err)
		return ExitLauncherError
	}
	cfg.Image = img
	if viaFront != "" {
		if cfg.VGPUSocket != "" || noVGPU {
			fmt.Fprintln(c.errw(), "vgpu vm run: --front cannot be combined with --vgpu or --no-vgpu")
			return 2
		}
		sock, stopFront, err := startFront(ctx, viaFront, log)
		if err != nil {
			fmt.Fprintln(c.errw(), "vgpu vm run: starting the front:", err)
			return ExitLauncherError
		}
		defer stopFront()
		cfg.VGPUSocket = sock
	}
	if cfg.VGPUSocket == "" && !noVGPU && c.StartBackend != nil {
		sock, stopBackend, err := c.StartBackend(ctx, log)
		if err != nil {
			fmt.Fprintln(c.errw(), "vgpu vm run: starting the vgpu backend:", err)
			return ExitLauncherError
		}
		defer stopBackend()
		cfg.VGPUSocket = sock
	}
	res, err := Run(ctx, cfg)
	if res != nil && timings {
		fmt.Fprintf(c.errw(), "vgpu vm run: wall to init %v, to command %v, total %v; guest uptime at init %v, at command %v\n",
			res.WallToInit.Round(time.Millisecond), res.WallToCommand.Round(time.Millisecond), res.WallTotal.Round(time.Millisecond),
			res.UptimeAtInit, res.UptimeAtCommand)
	}
	if err != nil {
		fmt.Fprintln(c.errw(), "vgpu vm run:", err)
		return ExitLauncherError
	}
	return res.ExitStatus
}

// VMDomain is `vgpu vm domain [options] -- COMMAND...`: print a libvirt
// domain that boots the test guest and runs COMMAND (see TestGuestDomain).
func (c CLI) VMDomain(args []string) int {
	fs := flag.NewFlagSet("vm domain", flag.ContinueOnError)
	fs.SetOutput(c.errw())
	var (
		f      imageFlags
		cfg    DomainConfig
		shares listFlag
		env    listFlag
		kargs  listFlag
	)
	f.register(fs)
	fs.StringVar(&cfg.Name, "name", "vgpu-testguest", "domain name")
	fs.StringVar(&cfg.Console, "console", "", "file the serial console goes to (absolute; required)")
	fs.StringVar(&cfg.Mem, "mem", DefaultMem, "guest RAM")
	fs.IntVar(&cfg.CPUs, "cpus", DefaultCPUs, "guest CPUs")
	fs.StringVar(&cfg.Accel, "accel", "tcg", "tcg (domain type qemu) or kvm")
	fs.Var(&shares, "share", "host folder the guest may write, at the same path in the guest; HOST:GUEST to move it (repeatable)")
	fs.Var(&env, "env", "KEY=VALUE for the command (repeatable)")
	fs.StringVar(&cfg.Dir, "cwd", "", "working directory in the guest (default /)")
	fs.BoolVar(&cfg.Verbose, "verbose", false, "keep the kernel log on the console")
	fs.Var(&kargs, "kernel-arg", "extra guest kernel command line parameter (repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(c.errw(), "usage: vgpu vm domain --console FILE [options] -- COMMAND [ARGS...]\n\nPrint a libvirt domain (qemu driver) that boots the test guest and runs COMMAND, with the\nconsole in FILE (VGPU-EXIT-STATUS: n at the end). Add a vGPU with vgpu libvirt-xml --domain -.\nlibvirt's QEMU user must be able to read the image: copy it out of /root (vgpu vm image --out).")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg.Command = fs.Args()
	if len(cfg.Command) == 0 || cfg.Console == "" {
		fs.Usage()
		return 2
	}
	for _, s := range shares {
		h, g, _ := strings.Cut(s, ":")
		cfg.Shares = append(cfg.Shares, Share{HostPath: h, GuestPath: g})
	}
	cfg.Env, cfg.KernelArgs = env, kargs
	img, err := f.get(c.log())
	if err != nil {
		fmt.Fprintln(c.errw(), "vgpu vm domain:", err)
		return 1
	}
	cfg.Image = img
	b, err := TestGuestDomain(cfg)
	if err != nil {
		fmt.Fprintln(c.errw(), "vgpu vm domain:", err)
		return 1
	}
	c.out().Write(b)
	return 0
}

// startFront serves the VM's vhost-user-vsock socket in this process and
// forwards it to the backend's front socket (package front).
func startFront(ctx context.Context, backend string, log hclog.Logger) (string, func(), error) {
	dir, err := os.MkdirTemp("", "vgpu-front-")
	if err != nil {
		return "", nil, err
	}
	sock := dir + "/vgpu.sock"
	f, err := front.Start(ctx, front.Config{SocketPath: sock, Backend: backend, Logger: log.Named("front")})
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return sock, func() { f.Close(); os.RemoveAll(dir) }, nil
}

// Attach is `vgpu attach --qmp QMP_SOCKET | --libvirt DOMAIN
// [--vhost-user-socket PATH | --vm NAME]`.
func (c CLI) Attach(args []string) int {
	fs := flag.NewFlagSet("attach", flag.ContinueOnError)
	fs.SetOutput(c.errw())
	var (
		cfg  AttachConfig
		sock socketFlags
	)
	fs.StringVar(&cfg.QMPSocket, "qmp", "", "the VM's QMP unix socket")
	fs.StringVar(&cfg.LibvirtDomain, "libvirt", "", "a running libvirt domain (name or UUID), instead of --qmp: hot-plug through libvirtd's QEMU monitor")
	fs.StringVar(&cfg.LibvirtSocket, "libvirt-socket", "", "libvirtd's socket (default "+qmp.DefaultLibvirtSocket+")")
	c.registerSocket(fs, &sock, "the listening vgpu backend's vhost-user socket")
	fs.StringVar(&cfg.ID, "id", "vgpu0", "chardev id (the device is ID-dev)")
	fs.StringVar(&cfg.Bus, "bus", "", "PCIe root port to plug into (default "+HotplugPort+", "+LibvirtHotplugPort+" with --libvirt)")
	fs.Usage = func() {
		fmt.Fprintln(c.errw(), "usage: vgpu attach --qmp QMP_SOCKET | --libvirt DOMAIN [--vhost-user-socket PATH | --vm NAME]\n\nHot-plug a vGPU (vhost-user-vsock-pci) into a running QEMU. The VM needs shareable RAM\nand a free PCIe root port: see vgpu qemu-args (QEMU) or vgpu libvirt-xml --hotplug (libvirt).")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if cfg.VhostUserSocket, err = c.resolveSocket(sock); err != nil {
		fmt.Fprintln(c.errw(), "vgpu attach:", err)
		return 2
	}
	cfg.Logger = c.log()
	if err := Attach(context.Background(), cfg); err != nil {
		fmt.Fprintln(c.errw(), "vgpu attach:", err)
		return 1
	}
	bus := cfg.Bus
	if bus == "" && cfg.LibvirtDomain != "" {
		bus = LibvirtHotplugPort
	} else if bus == "" {
		bus = HotplugPort
	}
	fmt.Fprintf(c.out(), "attached %s-dev on %s\n", cfg.ID, bus)
	return 0
}

// QemuArgs is `vgpu qemu-args`: print the options to add to one's own QEMU
// command line.
func (c CLI) QemuArgs(args []string) int {
	fs := flag.NewFlagSet("qemu-args", flag.ContinueOnError)
	fs.SetOutput(c.errw())
	mem := fs.String("mem", DefaultMem, "guest RAM (must match -m)")
	var sf socketFlags
	c.registerSocket(fs, &sf, "backend socket to connect at boot")
	hotplug := fs.Bool("hotplug", false, "no device at boot: add a free hot-plug port for vgpu attach instead")
	qmpPath := fs.String("qmp", "", "also add a QMP socket at this path (for vgpu attach)")
	fs.Usage = func() {
		fmt.Fprintln(c.errw(), "usage: vgpu qemu-args [--mem 2G] [--vhost-user-socket PATH | --vm NAME | --hotplug] [--qmp PATH]\n\nPrint the QEMU options a VM needs for a vGPU (replace your -m and -machine with them).\nWithout a socket (none given, none configured) or with --hotplug they add a hot-plug port.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	sock := new(string)
	if !*hotplug {
		var err error
		if *sock, err = c.resolveSocket(sf); err != nil {
			fmt.Fprintln(c.errw(), "vgpu qemu-args:", err)
			return 2
		}
	}
	m, err := ParseSize(*mem)
	if err != nil {
		fmt.Fprintln(c.errw(), "vgpu qemu-args:", err)
		return 2
	}
	fmt.Fprintln(c.out(), FormatArgs(QemuArgs(m, *sock, *qmpPath)))
	return 0
}
