package serveconf

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     map[string]string
		err      string
	}{
		{name: "empty", in: "", want: map[string]string{}},
		{name: "comments and blanks", in: "# c\n\n   # d\n", want: map[string]string{}},
		{name: "values", in: "device = sim\nstatus-socket=/run/x.sock\n  mem-limit =  16G  \n",
			want: map[string]string{"device": "sim", "status-socket": "/run/x.sock", "mem-limit": "16G"}},
		{name: "value with equals", in: "metrics-addr = a=b\n", want: map[string]string{"metrics-addr": "a=b"}},
		{name: "empty value", in: "gpus =\n", want: map[string]string{"gpus": ""}},
		{name: "no equals", in: "device sim\n", err: "f:1: want NAME = VALUE"},
		{name: "dashes", in: "--device = sim\n", err: "f:1: want NAME"},
		{name: "duplicate", in: "device = sim\n\ndevice = cuda\n", err: "f:3: device is already set on line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse(strings.NewReader(tc.in), "f")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, e := range c.entries {
				got[e.key] = e.value
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if g, ok := c.Get(k); !ok || g != v {
					t.Errorf("%s = %q, want %q", k, g, v)
				}
			}
		})
	}
}

func newFlags() (*flag.FlagSet, *string, *string, *bool) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	dev := fs.String("device", "auto", "")
	st := fs.String("status-socket", "", "")
	js := fs.Bool("log-json", false, "")
	return fs, dev, st, js
}

func TestApplyCommandLineWins(t *testing.T) {
	c, err := Parse(strings.NewReader("device = sim\nstatus-socket = /run/s.sock\nlog-json = true\n"), "f")
	if err != nil {
		t.Fatal(err)
	}
	fs, dev, st, js := newFlags()
	if err := fs.Parse([]string{"--device", "cuda"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(fs); err != nil {
		t.Fatal(err)
	}
	if *dev != "cuda" || *st != "/run/s.sock" || !*js {
		t.Fatalf("device %q status %q json %v: want the command line's cuda and the file's others", *dev, *st, *js)
	}
}

func TestApplyErrors(t *testing.T) {
	for _, tc := range []struct{ in, err string }{
		{"colour = blue\n", `f:1: unknown option "colour" ('vgpu serve -h' lists them)`},
		{"# x\nlog-json = maybe\n", `f:2: log-json = "maybe"`},
	} {
		c, err := Parse(strings.NewReader(tc.in), "f")
		if err != nil {
			t.Fatal(err)
		}
		fs, _, _, _ := newFlags()
		_ = fs.Parse(nil)
		if err := c.Apply(fs); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: err %v, want %q", tc.in, err, tc.err)
		}
	}
}

func TestLoadDefault(t *testing.T) {
	p := filepath.Join(t.TempDir(), "vgpu.conf")
	if err := os.WriteFile(p, []byte("status-socket = /x.sock\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvPath, p)
	c, err := LoadDefault()
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Or(KeyStatusSocket, DefaultStatusSocket); got != "/x.sock" {
		t.Fatalf("status socket %q", got)
	}
	if got := c.Or(KeyFrontSocket, DefaultFrontSocket); got != DefaultFrontSocket {
		t.Fatalf("front socket %q, want the default", got)
	}
	t.Setenv(EnvPath, p+".missing")
	if _, err := LoadDefault(); err == nil {
		t.Fatal("a missing $VGPU_CONFIG file loaded")
	}
}

// The packaged file (deploy/debian/vgpu.conf) must parse and name only
// options "vgpu serve" has; cmd/vgpu's test applies it to the real flags.
func TestPackagedFileParses(t *testing.T) {
	c, err := Load("../../deploy/debian/vgpu.conf")
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		KeyStatusSocket: DefaultStatusSocket, KeyVhostUserSocket: DefaultVhostUserSocket, KeyFrontSocket: DefaultFrontSocket,
	} {
		if got, _ := c.Get(k); got != want {
			t.Errorf("packaged %s = %q, want %q", k, got, want)
		}
	}
}

func TestVMSocket(t *testing.T) {
	for name, ok := range map[string]bool{
		"web1": true, "vm_2.a-b": true, "": false, ".x": false, "-x": false, "a/b": false, "a b": false,
		strings.Repeat("a", 64): true, strings.Repeat("a", 65): false, "..": false,
	} {
		p, err := VMSocket(name)
		if (err == nil) != ok {
			t.Errorf("VMSocket(%q) = %q, %v; want ok=%v", name, p, err, ok)
		}
		if ok && p != VMDir+"/"+name+".sock" {
			t.Errorf("VMSocket(%q) = %q", name, p)
		}
	}
}
