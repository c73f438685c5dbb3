package testguest

import (
	"encoding/base64"
	"os/exec"
	"strings"
	"testing"
	"time"
)

var parseLineTests = []struct {
	name string
	in   string
	want Line
}{
	{"init", "VGPU-INIT: 1.64", Line{Kind: LineInit, Uptime: 1640 * time.Millisecond}},
	{"start with cr", "VGPU-START: 2.01\r", Line{Kind: LineStart, Uptime: 2010 * time.Millisecond}},
	{"exit", "VGPU-EXIT-STATUS: 0", Line{Kind: LineExitStatus}},
	{"exit 255", "VGPU-EXIT-STATUS: 255", Line{Kind: LineExitStatus, Status: 255}},
	{"exit after output without newline", "no newlineVGPU-EXIT-STATUS: 3", Line{Kind: LineExitStatus, Status: 3}},
	{"exit out of range", "VGPU-EXIT-STATUS: 256", Line{}},
	{"exit negative", "VGPU-EXIT-STATUS: -1", Line{}},
	{"exit junk", "VGPU-EXIT-STATUS: x", Line{}},
	{"init error", "VGPU-INIT-ERROR: insmod 9p.ko failed", Line{Kind: LineInitError, Text: "insmod 9p.ko failed"}},
	{"unknown tag", "VGPU-OTHER: 1", Line{}},
	{"plain output", "hello", Line{}},
	{"kernel line", "[    2.034901] reboot: Power down", Line{}},
	{"empty", "", Line{}},
}

func TestParseLine(t *testing.T) {
	for _, tt := range parseLineTests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseLine(tt.in); got != tt.want {
				t.Errorf("ParseLine(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func FuzzParseLine(f *testing.F) {
	for _, tt := range parseLineTests {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l := ParseLine(s)
		if l.Kind == LineExitStatus && (l.Status < 0 || l.Status > 255) {
			t.Fatalf("status %d out of range", l.Status)
		}
	})
}

var jobTests = []struct {
	name string
	job  Job
	out  string // what the script prints when run by sh
}{
	{"echo", Job{Args: []string{"echo", "hello"}}, "hello\n"},
	{"quotes", Job{Args: []string{"printf", "%s|", "it's", `"x"`, "$HOME", "a b"}}, `it's|"x"|$HOME|a b|`},
	{"env and dir", Job{Args: []string{"sh", "-c", `echo "$A $B $(pwd)"`}, Env: []string{"A=1", "B=two words'"}, Dir: "/tmp"}, "1 two words' /tmp\n"},
	{"newline arg", Job{Args: []string{"printf", "%s", "a\nb"}}, "a\nb"},
}

func TestJobScript(t *testing.T) {
	for _, tt := range jobTests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := tt.job.Script()
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("/bin/sh", "-c", s).Output()
			if err != nil {
				t.Fatalf("sh: %v\nscript:\n%s", err, s)
			}
			if string(out) != tt.out {
				t.Errorf("output %q, want %q\nscript:\n%s", out, tt.out, s)
			}
		})
	}
}

func TestJobErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		job  Job
	}{
		{"empty", Job{}},
		{"bad env", Job{Args: []string{"x"}, Env: []string{"NOEQUALS"}}},
		{"bad env name", Job{Args: []string{"x"}, Env: []string{"A B=1"}}},
		{"relative share", Job{Args: []string{"x"}, Shares: []Share{{Tag: "s", HostPath: "rel"}}}},
		{"too long", Job{Args: []string{strings.Repeat("x", 3000)}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.job.JobCmdline(); err == nil {
				t.Errorf("JobCmdline accepted %+v", tt.job)
			}
		})
	}
}

// TestJobCmdline decodes the parameter the way init.sh does and sources it.
func TestJobCmdline(t *testing.T) {
	j := Job{Args: []string{"true"}, Shares: []Share{{Tag: "share0", HostPath: "/tmp/a b"}, {Tag: "share1", HostPath: "/x", GuestPath: "/y", ReadOnly: true}}}
	p, err := j.JobCmdline()
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(p, " \t\n") || !strings.HasPrefix(p, "vgpu_job=") {
		t.Fatalf("parameter %q is not one word", p)
	}
	frag, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(p, "vgpu_job="))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("/bin/sh", "-c", string(frag)+`printf '%s\n' "$VGPU_SHARES" | while read -r tag mode path; do [ -n "$tag" ] && echo "$tag|$mode|$path"; done; true`).Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "share0|rw|/tmp/a b\nshare1|ro|/y\n"; string(out) != want {
		t.Errorf("shares %q, want %q", out, want)
	}
}
