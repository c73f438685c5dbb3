package vm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/qmp"
	"github.com/vgpu-project/vgpu/vm-images/testguest"
)

// Share is a host folder the guest sees read-write (unless ReadOnly) at
// GuestPath, which defaults to HostPath.
type Share struct {
	HostPath  string
	GuestPath string
	ReadOnly  bool
}

// Config describes one test-guest run.
type Config struct {
	Image   *testguest.Image // from testguest.Build
	Command []string         // run inside the guest's chroot of the host root
	Env     []string         // KEY=VALUE for Command
	Dir     string           // working directory in the guest; empty means /
	Shares  []Share

	Mem   string // QEMU size, default DefaultMem
	CPUs  int    // default DefaultCPUs
	Accel string // "tcg" (default) or "kvm"

	// VGPUSocket is a listening vhost-user-vsock backend; empty means no
	// vGPU device at boot (one can be hot-plugged with Attach).
	VGPUSocket string

	// Timeout kills the guest if the command has not finished; 0 means
	// DefaultTimeout.
	Timeout time.Duration

	QEMU   string // qemu-system-x86_64 to run; default from PATH
	Bundle string // unpacked QEMU bundle folder or its .tar.xz (scripts/qemu-bundle.sh)

	// Console receives the guest's console output (the command's stdout
	// and stderr, kernel messages); nil means os.Stdout. The VGPU- marker
	// lines are left out unless Verbose.
	Console io.Writer
	// Verbose shows the full kernel log and the marker lines.
	Verbose bool
	// QMPSocket is where QEMU listens for QMP; empty means a temporary one.
	QMPSocket string
	// KernelArgs and QEMUArgs are appended to the kernel command line and
	// to QEMU's options.
	KernelArgs []string
	QEMUArgs   []string

	Logger hclog.Logger
}

// DefaultTimeout bounds a test-guest run when Config.Timeout is 0.
const DefaultTimeout = 10 * time.Minute

// Result is how a run ended and how long booting took.
type Result struct {
	ExitStatus int // the guest command's exit status

	// Wall times since QEMU was started: to the guest's init, to the
	// command's start, and to QEMU's exit.
	WallToInit, WallToCommand, WallTotal time.Duration
	// Guest uptime (kernel clock) at init and at the command's start.
	UptimeAtInit, UptimeAtCommand time.Duration

	QEMUVersion string
	Events      []qmp.Event // QMP events seen
}

// Errors of a run; each wraps more detail.
var (
	ErrTimeout   = errors.New("vm: guest timed out and was killed")
	ErrNoStatus  = errors.New("vm: QEMU exited before the guest reported an exit status")
	ErrGuestInit = errors.New("vm: the test guest's init failed")
)

// Machine is a running guest.
type Machine struct {
	cfg     Config
	log     hclog.Logger
	cmd     *exec.Cmd
	qmp     *qmp.Client
	qmpPath string
	tmp     string
	start   time.Time
	timeout time.Duration

	started chan struct{} // closed when the command starts in the guest
	exited  chan struct{} // closed when QEMU has exited and output is read

	mu       sync.Mutex
	res      Result
	status   int // -1 until reported
	initErr  string
	lastLine string
	stderr   bytes.Buffer
	waitErr  error
}

// Run boots the guest, runs cfg.Command and returns when QEMU has exited.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	m, err := Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return m.Wait(ctx)
}

// Start boots the guest and connects to its QMP socket; the command runs in
// the background. Call Wait (or Kill) to release it.
func Start(ctx context.Context, cfg Config) (_ *Machine, err error) {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	log = log.Named("vm")
	if cfg.Image == nil {
		return nil, errors.New("vm: no guest image: build one with testguest.Build (vgpu vm image)")
	}
	if cfg.Mem == "" {
		cfg.Mem = DefaultMem
	}
	mem, err := ParseSize(cfg.Mem)
	if err != nil {
		return nil, err
	}
	if cfg.CPUs <= 0 {
		cfg.CPUs = DefaultCPUs
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Console == nil {
		cfg.Console = os.Stdout
	}

	var cleanup []func()
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()
	tmp, err := os.MkdirTemp("", "vgpu-vm-")
	if err != nil {
		return nil, fmt.Errorf("vm: %w", err)
	}
	cleanup = append(cleanup, func() { os.RemoveAll(tmp) })

	bundle := cfg.Bundle
	if strings.HasSuffix(bundle, ".tar.xz") {
		bundle = filepath.Join(tmp, "qemu-bundle")
		if err := unpackBundle(cfg.Bundle, bundle); err != nil {
			return nil, err
		}
	}
	qb, err := findQEMU(cfg.QEMU, bundle)
	if err != nil {
		return nil, err
	}

	job := testguest.Job{Args: cfg.Command, Env: cfg.Env, Dir: cfg.Dir}
	args := append([]string{}, qb.args...)
	args = append(args, "-name", "vgpu-testguest", "-nodefaults", "-display", "none", "-no-reboot", "-nic", "none")
	args = append(args, MemoryArgs(mem)...)
	switch cfg.Accel {
	case "", "tcg":
		args = append(args, "-accel", "tcg", "-cpu", "max")
	case "kvm":
		if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err != nil {
			return nil, fmt.Errorf("vm: --accel kvm: %w: use --accel tcg, or load kvm and give this user access to /dev/kvm", err)
		} else {
			f.Close()
		}
		args = append(args, "-accel", "kvm", "-cpu", "host")
	default:
		return nil, fmt.Errorf("vm: unknown accelerator %q: want tcg or kvm", cfg.Accel)
	}
	args = append(args, "-smp", fmt.Sprint(cfg.CPUs))
	qmpPath := cfg.QMPSocket
	if qmpPath == "" {
		qmpPath = filepath.Join(tmp, "qmp.sock")
	}
	args = append(args, QMPArgs(qmpPath)...)
	args = append(args, "-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con")
	args = append(args, "-virtfs", "local,path=/,mount_tag="+hostRootTag+",security_model=none,readonly=on,multidevs=remap")
	if job.Shares, err = guestShares(cfg.Shares); err != nil {
		return nil, err
	}
	for _, s := range job.Shares {
		ro := ""
		if s.ReadOnly {
			ro = ",readonly=on"
		}
		args = append(args, "-virtfs", "local,path="+qemuEscape(s.HostPath)+",mount_tag="+s.Tag+",security_model=none,multidevs=remap"+ro)
	}
	args = append(args, HotplugPortArgs()...)
	if cfg.VGPUSocket != "" {
		args = append(args, VGPUArgs(cfg.VGPUSocket)...)
	}
	kargs, err := kernelCmdline(job, cfg.Verbose, cfg.KernelArgs)
	if err != nil {
		return nil, err
	}
	args = append(args, "-kernel", cfg.Image.Kernel, "-initrd", cfg.Image.Initrd, "-append", kargs)
	args = append(args, cfg.QEMUArgs...)

	m := &Machine{
		cfg: cfg, log: log, qmpPath: qmpPath, tmp: tmp, timeout: cfg.Timeout,
		started: make(chan struct{}), exited: make(chan struct{}), status: -1,
	}
	m.cmd = exec.Command(qb.path, args...)
	m.cmd.Env = append(os.Environ(), qb.env...)
	m.cmd.Stderr = &lockedWriter{mu: &m.mu, w: &m.stderr}
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := m.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("vm: %w", err)
	}
	log.Debug("starting qemu", "path", qb.path, "args", args)
	m.start = time.Now()
	if err := m.cmd.Start(); err != nil {
		return nil, fmt.Errorf("vm: starting %s: %w", qb.path, err)
	}
	cleanup = append(cleanup, func() { m.cmd.Process.Kill(); <-m.exited })
	go m.readConsole(out)

	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go func() {
		select {
		case <-m.exited:
			cancel()
		case <-dctx.Done():
		}
	}()
	m.qmp, err = qmp.Dial(dctx, qmpPath, log)
	if err != nil {
		select {
		case <-m.exited:
			return nil, fmt.Errorf("vm: QEMU exited at start: %v: %s", m.waitErr, m.stderrTail())
		default:
		}
		return nil, err
	}
	m.res.QEMUVersion = m.qmp.Version()
	log.Debug("qmp connected", "qemu", m.res.QEMUVersion, "after", time.Since(m.start))
	return m, nil
}

// QMP returns the machine's QMP connection.
func (m *Machine) QMP() *qmp.Client { return m.qmp }

// QMPPath returns the machine's QMP socket path.
func (m *Machine) QMPPath() string { return m.qmpPath }

// Started is closed when the guest command starts.
func (m *Machine) Started() <-chan struct{} { return m.started }

// Exited is closed when QEMU has exited.
func (m *Machine) Exited() <-chan struct{} { return m.exited }

// Kill stops QEMU at once.
func (m *Machine) Kill() {
	m.cmd.Process.Kill()
}

// Wait waits for the guest command to finish and QEMU to exit, killing the
// guest at the deadline (Config.Timeout from Start) or when ctx ends.
func (m *Machine) Wait(ctx context.Context) (*Result, error) {
	defer os.RemoveAll(m.tmp)
	defer m.qmp.Close()
	t := time.NewTimer(m.timeout - time.Since(m.start))
	defer t.Stop()
	var timedOut error
	select {
	case <-m.exited:
	case <-t.C:
		timedOut = fmt.Errorf("%w after %v (last console line: %q): raise --timeout, or run it with --verbose to see where it stops", ErrTimeout, m.timeout, m.last())
	case <-ctx.Done():
		timedOut = fmt.Errorf("vm: %w; the guest was killed", ctx.Err())
	}
	if timedOut != nil {
		m.log.Warn("killing the guest", "why", timedOut)
		m.qmp.Quit()
		kt := time.NewTimer(2 * time.Second)
		select {
		case <-m.exited:
		case <-kt.C:
			m.Kill()
			<-m.exited
		}
		kt.Stop()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.res
	r.WallTotal = time.Since(m.start)
	r.Events = m.qmp.Events()
	switch {
	case timedOut != nil:
		return &r, timedOut
	case m.initErr != "":
		return &r, fmt.Errorf("%w: %s", ErrGuestInit, m.initErr)
	case m.status < 0:
		return &r, fmt.Errorf("%w (%v; last console line %q): %s", ErrNoStatus, m.waitErr, m.lastLine, m.stderrTailLocked())
	}
	r.ExitStatus = m.status
	return &r, nil
}

// readConsole copies the console to Config.Console and parses init's lines.
// When the exit status arrives and QEMU does not exit by itself within a few
// seconds (poweroff failed), it is told to quit.
func (m *Machine) readConsole(out io.Reader) {
	defer func() {
		m.waitErr = m.cmd.Wait()
		close(m.exited)
	}()
	br := bufio.NewReaderSize(out, 64<<10)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			m.line(line)
		}
		if err != nil {
			return
		}
	}
}

func (m *Machine) line(raw string) {
	now := time.Since(m.start)
	text := strings.TrimRight(raw, "\r\n")
	l := testguest.ParseLine(text)
	m.mu.Lock()
	if text != "" {
		m.lastLine = text
	}
	switch l.Kind {
	case testguest.LineInit:
		m.res.WallToInit, m.res.UptimeAtInit = now, l.Uptime
	case testguest.LineStart:
		if m.res.WallToCommand == 0 {
			m.res.WallToCommand, m.res.UptimeAtCommand = now, l.Uptime
			close(m.started)
		}
	case testguest.LineExitStatus:
		m.status = l.Status
		go m.reap()
	case testguest.LineInitError:
		if m.initErr == "" {
			m.initErr = l.Text
		}
	}
	done := m.status >= 0 && l.Kind != testguest.LineExitStatus
	m.mu.Unlock()
	if done && !m.cfg.Verbose {
		return // after the command: only the kernel's "reboot: Power down"
	}
	if l.Kind == testguest.LineOther || m.cfg.Verbose {
		io.WriteString(m.cfg.Console, text+"\n")
	} else if i := strings.Index(text, "VGPU-"); i > 0 {
		// The command's output without its newline, then the marker.
		io.WriteString(m.cfg.Console, text[:i]+"\n")
	}
}

// reap makes sure QEMU ends after the guest reported its status.
func (m *Machine) reap() {
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-m.exited:
	case <-t.C:
		m.log.Warn("guest did not power off after its command; quitting QEMU")
		m.qmp.Quit()
	}
}

func (m *Machine) last() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lastLine
}

func (m *Machine) stderrTail() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stderrTailLocked()
}

func (m *Machine) stderrTailLocked() string {
	s := strings.TrimSpace(m.stderr.String())
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	if s == "" {
		return "QEMU wrote nothing on stderr"
	}
	return "QEMU said: " + s
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// hostRootTag is the 9p tag under which the test guest's init mounts the
// host's root (vm-images/testguest/init.sh).
const hostRootTag = "hostroot"

// guestShares resolves shares into the job's 9p shares (tags share0...),
// after a read-only share of a checkout under /tmp: the guest's /tmp is its
// own tmpfs, which would hide a checkout there (a CI clone, say) and every
// binary in it, so that folder comes first and explicit shares inside it
// mount on top.
func guestShares(shares []Share) ([]testguest.Share, error) {
	if d := hiddenWorkdir(); d != "" {
		shares = append([]Share{{HostPath: d, ReadOnly: true}}, shares...)
	}
	var out []testguest.Share
	for i, s := range shares {
		hp, err := filepath.Abs(s.HostPath)
		if err != nil {
			return nil, fmt.Errorf("vm: share %s: %w", s.HostPath, err)
		}
		if st, err := os.Stat(hp); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("vm: share %s is not a folder: create it first", hp)
		}
		out = append(out, testguest.Share{Tag: fmt.Sprintf("share%d", i), HostPath: hp, GuestPath: s.GuestPath, ReadOnly: s.ReadOnly})
	}
	return out, nil
}

// kernelCmdline is the test guest's kernel command line for job, with extra
// parameters before the job.
func kernelCmdline(job testguest.Job, verbose bool, extra []string) (string, error) {
	jobArg, err := job.JobCmdline()
	if err != nil {
		return "", err
	}
	// no_timer_check: under a loaded TCG host the kernel's IO-APIC timer
	// check can fail and panic the boot.
	kargs := []string{"console=ttyS0", "panic=-1", "rdinit=/init", "mitigations=off", "no_timer_check"}
	if !verbose {
		kargs = append(kargs, "quiet")
	}
	kargs = append(kargs, extra...)
	kargs = append(kargs, jobArg)
	return strings.Join(kargs, " "), nil
}

// unpackBundle unpacks a QEMU bundle .tar.xz (scripts/qemu-bundle.sh) into
// dir; the archive holds one top folder, which is stripped.
func unpackBundle(archive, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("vm: %w", err)
	}
	out, err := exec.Command("tar", "-xJf", archive, "-C", dir, "--strip-components=1").CombinedOutput()
	if err != nil {
		return fmt.Errorf("vm: unpacking QEMU bundle %s: %w: %s", archive, err, out)
	}
	return nil
}

// hiddenWorkdir returns the top folder under /tmp that holds the working
// directory, or "" when the working directory is elsewhere. The test guest
// mounts its own tmpfs at /tmp (and /run).
func hiddenWorkdir() string {
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	rest, ok := strings.CutPrefix(filepath.Clean(wd), "/tmp/")
	if !ok || rest == "" {
		return ""
	}
	top, _, _ := strings.Cut(rest, "/")
	return "/tmp/" + top
}
