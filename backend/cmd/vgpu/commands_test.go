package main

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
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
