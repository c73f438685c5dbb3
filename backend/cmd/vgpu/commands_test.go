package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/worker"
)

// The shipped configurations (the Debian package's /etc/vgpu/vgpu.conf, the
// Kubernetes ConfigMap's) name only options vgpu serve has, with values it
// takes: serve gets past them and fails only at the device.
func TestShippedConfigsApplyToServe(t *testing.T) {
	for _, f := range []string{"../../../deploy/debian/vgpu.conf", "../../../deploy/kubernetes/vgpu.conf"} {
		conf, err := filepath.Abs(f)
		if err != nil {
			t.Fatal(err)
		}
		if rc := cmdServe([]string{"--config", conf, "--device", "no-such-device"}); rc != 1 {
			t.Fatalf("vgpu serve --config %s: exit %d, want 1 (the device), not 2 (options)", conf, rc)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.conf")
	if err := os.WriteFile(bad, []byte("colour = blue\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if rc := cmdServe([]string{"--config", bad}); rc != 2 {
		t.Fatalf("an unknown option in the file: exit %d, want 2", rc)
	}
}

// Serve options added since the file format (here --host-func-timeout)
// work in the configuration file too, and reach the worker processes that
// run the sessions by default.
func TestConfigSetsHostFuncTimeout(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "vgpu.conf")
	if err := os.WriteFile(conf, []byte("host-func-timeout = 5s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, rc := parseServe([]string{"--config", conf})
	if rc != 0 || f.hostFuncTimeout != 5*time.Second {
		t.Fatalf("--config with host-func-timeout = 5s: rc %d, timeout %v", rc, f.hostFuncTimeout)
	}
	args := strings.Join(workerArgs(f, worker.PerProcess, ""), " ")
	if !strings.Contains(args, "--host-func-timeout 5s") {
		t.Fatalf("the worker's arguments do not pass the timeout on: %s", args)
	}
	if f.slotWait != worker.DefaultSlotWait {
		t.Fatalf("slot-wait by default: %v, want %v", f.slotWait, worker.DefaultSlotWait)
	}
	if err := os.WriteFile(conf, []byte("host-func-timeout = 5s\nslot-wait = 0s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if f, rc := parseServe([]string{"--config", conf}); rc != 0 || f.slotWait != 0 {
		t.Fatalf("--config with slot-wait = 0s: rc %d, wait %v", rc, f.slotWait)
	}
	if f, rc := parseServe([]string{"--config", conf, "--host-func-timeout", "7s"}); rc != 0 || f.hostFuncTimeout != 7*time.Second {
		t.Fatalf("the command line should win over the file: rc %d, timeout %v", rc, f.hostFuncTimeout)
	}
	if err := os.WriteFile(conf, []byte("host-func-timeout = soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, rc := parseServe([]string{"--config", conf}); rc != 2 {
		t.Fatalf("a bad host-func-timeout in the file: rc %d, want 2", rc)
	}
}

func TestHookArgs(t *testing.T) {
	for _, tc := range []struct{ argv, want []string }{
		{[]string{"/usr/bin/onDefineDomain", "--vmi", "{}", "--domain", "<domain/>"}, []string{hookCommand, "--vmi", "{}", "--domain", "<domain/>"}},
		{[]string{"onDefineDomain"}, []string{hookCommand}},
		{[]string{"/usr/bin/vgpu", "status"}, []string{"status"}},
		{[]string{"vgpu"}, []string{}},
	} {
		if got := hookArgs(tc.argv); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("hookArgs(%q) = %q, want %q", tc.argv, got, tc.want)
		}
	}
	if _, ok := commands[hookCommand]; !ok {
		t.Fatal("no kubevirt-hook command")
	}
}
