// Package serveconf reads vgpu's host configuration file, /etc/vgpu/vgpu.conf
// as the vgpu package installs it: the options of "vgpu serve", one per line.
// "vgpu serve --config FILE" applies them under its command-line flags, and
// the commands that talk to a running backend (status, qemu-args, attach,
// libvirt-xml, device-plugin) take their default sockets from the same file,
// so the paths are written down once.
//
// Format:
//
//	# comment
//	status-socket = /run/vgpu/status.sock
//	mem-limit = 16G
//
// Names are the flags of "vgpu serve" without dashes; a value runs to the end
// of the line (surrounding blanks are dropped; no quoting). A name may appear
// once. Trust: the file is the administrator's; it is still parsed strictly,
// and every error names the file and line.
package serveconf

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// DefaultPath is where the vgpu package installs the configuration; the
// environment variable EnvPath names another file.
const (
	DefaultPath = "/etc/vgpu/vgpu.conf"
	EnvPath     = "VGPU_CONFIG"
)

// The packaged service's sockets (deploy/debian/vgpu.conf sets the first
// three; VMDir holds one socket per "vgpu front@NAME" unit).
const (
	RunDir                 = "/run/vgpu"
	DefaultStatusSocket    = RunDir + "/status.sock"
	DefaultVhostUserSocket = RunDir + "/vhost-user.sock"
	DefaultFrontSocket     = RunDir + "/front.sock"
	VMDir                  = RunDir + "/vm"
)

// Keys that clients read.
const (
	KeyStatusSocket    = "status-socket"
	KeyVhostUserSocket = "vhost-user-socket"
	KeyFrontSocket     = "front-socket"
	KeyMemLimit        = "mem-limit"
)

// Config is a parsed configuration file. The zero value (no file) is empty.
type Config struct {
	Path    string // the file it came from; "" when there was none
	entries []entry
}

type entry struct {
	key, value string
	line       int
}

var keyPattern = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// Parse reads a configuration from r; path names it in errors.
func Parse(r io.Reader, path string) (*Config, error) {
	c := &Config{Path: path}
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || !keyPattern.MatchString(k) {
			return nil, fmt.Errorf("%s:%d: want NAME = VALUE (a 'vgpu serve' option without dashes), got %q", path, n, line)
		}
		if prev, dup := seen[k]; dup {
			return nil, fmt.Errorf("%s:%d: %s is already set on line %d", path, n, k, prev)
		}
		seen[k] = n
		c.entries = append(c.entries, entry{key: k, value: v, line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Load reads the configuration file at path.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	defer f.Close()
	return Parse(f, path)
}

// LoadDefault reads $VGPU_CONFIG, or DefaultPath when that is unset. A
// missing DefaultPath is no error (running from a checkout): the result is
// then empty. A missing $VGPU_CONFIG is an error.
func LoadDefault() (*Config, error) {
	if p := os.Getenv(EnvPath); p != "" {
		return Load(p)
	}
	c, err := Load(DefaultPath)
	if errors.Is(err, os.ErrNotExist) {
		return &Config{}, nil
	}
	return c, err
}

// Get returns the value of key.
func (c *Config) Get(key string) (string, bool) {
	for _, e := range c.entries {
		if e.key == key {
			return e.value, true
		}
	}
	return "", false
}

// Or returns the value of key, or fallback when the file does not set it.
func (c *Config) Or(key, fallback string) string {
	if v, ok := c.Get(key); ok {
		return v
	}
	return fallback
}

// Apply sets, on fs (already parsed), every option of the file that the
// command line did not set: command-line flags win. A name that is not a
// flag of fs, or a value the flag refuses, is an error naming the line.
func (c *Config) Apply(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, e := range c.entries {
		if fs.Lookup(e.key) == nil {
			return fmt.Errorf("%s:%d: unknown option %q ('vgpu %s -h' lists them)", c.Path, e.line, e.key, fs.Name())
		}
		if given[e.key] {
			continue
		}
		if err := fs.Set(e.key, e.value); err != nil {
			return fmt.Errorf("%s:%d: %s = %q: %w", c.Path, e.line, e.key, e.value, err)
		}
	}
	return nil
}

var vmName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`)

// ValidVMName reports whether name can name a VM's socket (and a systemd
// template instance): letters, digits, '_', '.', '-', not starting with
// '.' or '-', at most 64 characters.
func ValidVMName(name string) bool { return vmName.MatchString(name) }

// VMSocket is the vhost-user socket of "vgpu front@NAME": VMDir/NAME.sock.
func VMSocket(name string) (string, error) {
	if !ValidVMName(name) {
		return "", fmt.Errorf("VM name %q: use letters, digits, '_', '.' and '-' (at most 64, not starting with '.' or '-')", name)
	}
	return filepath.Join(VMDir, name+".sock"), nil
}
