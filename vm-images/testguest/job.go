package testguest

import (
	"encoding/base64"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
)

// MaxCmdline is the x86 kernel's command line limit (COMMAND_LINE_SIZE).
const MaxCmdline = 2048

// DefaultPath is the PATH a guest command starts with unless Job.Env sets one.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Share is a host folder exported to the guest over its own virtio-9p device.
type Share struct {
	// Tag is the 9p mount tag; the launcher names shares "share0", "share1"...
	Tag string
	// HostPath is the folder on the host (absolute).
	HostPath string
	// GuestPath is where it appears inside the guest's chroot; empty means
	// HostPath. It must exist on the host's root or lie under /tmp or /run.
	GuestPath string
	// ReadOnly exports it read-only; by default the guest may write.
	ReadOnly bool
}

// Job is what the guest runs: one command inside chroot /host.
type Job struct {
	Args   []string // argv; Args[0] is looked up in PATH
	Env    []string // KEY=VALUE, added to HOME=/root and PATH=DefaultPath
	Dir    string   // working directory inside the guest; empty means /
	Shares []Share
}

// ErrCmdlineTooLong means the job does not fit on the kernel command line.
var ErrCmdlineTooLong = errors.New("testguest: job too long for the kernel command line (2048 bytes): put the command in a script under a shared folder and run that")

// Script returns the sh -c text the guest runs for j.
func (j Job) Script() (string, error) {
	if len(j.Args) == 0 {
		return "", errors.New("testguest: empty command: give the program to run after --")
	}
	var b strings.Builder
	b.WriteString("export HOME=/root PATH=" + DefaultPath + "\n")
	for _, kv := range j.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !validEnvName(k) {
			return "", fmt.Errorf("testguest: bad environment entry %q: want NAME=VALUE", kv)
		}
		b.WriteString("export " + k + "=" + Quote(v) + "\n")
	}
	dir := j.Dir
	if dir == "" {
		dir = "/"
	}
	b.WriteString("cd " + Quote(dir) + " || exit 126\n")
	b.WriteString("exec")
	for _, a := range j.Args {
		b.WriteString(" " + Quote(a))
	}
	return b.String(), nil
}

// JobCmdline returns the kernel command line parameter (vgpu_job=...) that
// carries j to the guest's init.
func (j Job) JobCmdline() (string, error) {
	script, err := j.Script()
	if err != nil {
		return "", err
	}
	var shares strings.Builder
	for _, s := range j.Shares {
		gp := s.GuestPath
		if gp == "" {
			gp = s.HostPath
		}
		if !path.IsAbs(gp) || strings.ContainsAny(gp, "\n") || strings.ContainsAny(s.Tag, " \n\t'") || s.Tag == "" {
			return "", fmt.Errorf("testguest: share %q at %q: want a tag without blanks and an absolute guest path", s.Tag, gp)
		}
		mode := "rw"
		if s.ReadOnly {
			mode = "ro"
		}
		fmt.Fprintf(&shares, "%s %s %s\n", s.Tag, mode, path.Clean(gp))
	}
	frag := "VGPU_SHARES=" + Quote(shares.String()) + "\nVGPU_SCRIPT=" + Quote(script) + "\n"
	p := "vgpu_job=" + base64.StdEncoding.EncodeToString([]byte(frag))
	if len(p) > MaxCmdline-256 { // leave room for console=, quiet, ...
		return "", fmt.Errorf("%w (job needs %d bytes)", ErrCmdlineTooLong, len(p))
	}
	return p, nil
}

// Quote quotes s for a POSIX shell.
func Quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, c := range k {
		if c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9' {
			continue
		}
		return false
	}
	return true
}

// LineKind says what a console line reported.
type LineKind int

// Console line kinds; see init.sh.
const (
	LineOther      LineKind = iota
	LineInit                // VGPU-INIT: <uptime>   init started
	LineStart               // VGPU-START: <uptime>  the command is starting
	LineExitStatus          // VGPU-EXIT-STATUS: <n>
	LineInitError           // VGPU-INIT-ERROR: <text>
)

// Line is one parsed console line.
type Line struct {
	Kind   LineKind
	Uptime time.Duration // LineInit, LineStart: guest uptime
	Status int           // LineExitStatus
	Text   string        // LineInitError
}

// ParseLine parses one console line (without its newline; a trailing \r is
// ignored). Lines that are not init's markers give LineOther.
func ParseLine(s string) Line {
	s = strings.TrimRight(s, "\r")
	// The command's last output may lack a newline: the marker then follows
	// it on the same line.
	if i := strings.LastIndex(s, "VGPU-"); i > 0 {
		s = s[i:]
	}
	tag, rest, ok := strings.Cut(s, ": ")
	if !ok || !strings.HasPrefix(tag, "VGPU-") {
		return Line{}
	}
	rest = strings.TrimSpace(rest)
	switch tag {
	case "VGPU-INIT", "VGPU-START":
		d, err := time.ParseDuration(rest + "s")
		if err != nil || d < 0 || strings.ContainsAny(rest, "hmsuµn") {
			return Line{}
		}
		k := LineInit
		if tag == "VGPU-START" {
			k = LineStart
		}
		return Line{Kind: k, Uptime: d}
	case "VGPU-EXIT-STATUS":
		n, err := strconv.Atoi(rest)
		if err != nil || n < 0 || n > 255 {
			return Line{}
		}
		return Line{Kind: LineExitStatus, Status: n}
	case "VGPU-INIT-ERROR":
		return Line{Kind: LineInitError, Text: rest}
	}
	return Line{}
}
