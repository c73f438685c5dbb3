package worker

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/protocol"
)

// TestCaptureOutput runs itself as a child process (CaptureOutput takes
// over fd 1 and 2): what is written to fd 1 and 2, before and while the
// pipes would be full, comes out of Drain stream by stream and in order, and
// the log goes where stderr went before.
func TestCaptureOutput(t *testing.T) {
	if os.Getenv("VGPU_CAPTURE_CHILD") == "1" {
		captureChild()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCaptureOutput$")
	cmd.Env = append(os.Environ(), "VGPU_CAPTURE_CHILD=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\nstderr:\n%s", err, stderr.String())
	}
	out := stderr.String()
	for _, want := range []string{
		"drain 1: stdout \"line 1\\nline 2\\n\" stderr \"assert\\n\"",
		"drain 2: stdout 3145728 bytes, in order",
		"stdout \"" + strings.Repeat("x", 10) + "\\n\\n[vgpu: 1048587 bytes of device output dropped",
		"drain 4: nothing",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("child's log lacks %q:\n%s", want, out)
		}
	}
	if stdout.Len() != 0 {
		t.Errorf("%d bytes reached the child's real stdout", stdout.Len())
	}
}

func captureChild() {
	o, log, err := CaptureOutput()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	drain := func() (string, string, bool) {
		var so, se []byte
		any := o.Drain(func(s uint32, b []byte) {
			if s == protocol.OutputStdout {
				so = append(so, b...)
			} else {
				se = append(se, b...)
			}
		})
		return string(so), string(se), any
	}
	unix.Write(1, []byte("line 1\n"))
	unix.Write(2, []byte("assert\n"))
	unix.Write(1, []byte("line 2\n"))
	so, se, _ := drain()
	fmt.Fprintf(log, "drain 1: stdout %q stderr %q\n", so, se)
	// 3 MiB through a 1 MiB pipe: the pump must keep it flowing.
	var want []byte
	for i := 0; len(want) < 3<<20; i++ {
		want = fmt.Appendf(want, "%07d\n", i)
	}
	want = want[:3<<20]
	if n, err := unix.Write(1, want); n != len(want) || err != nil {
		fmt.Fprintf(log, "write: %d %v\n", n, err)
	}
	so, _, _ = drain()
	fmt.Fprintf(log, "drain 2: stdout %d bytes, in order %v\n", len(so), so == string(want))
	// More than MaxBufferedOutput between two drains: the rest is dropped, and said.
	big := bytes.Repeat([]byte("y"), MaxBufferedOutput+1<<20)
	unix.Write(1, []byte(strings.Repeat("x", 10)+"\n"))
	unix.Write(1, big)
	so, _, _ = drain()
	head, marker := so[:min(len(so), 11)], ""
	if i := strings.Index(so, "\n[vgpu"); i >= 0 {
		marker = so[i:]
	}
	fmt.Fprintf(log, "drain 3: %d bytes, stdout %q\n", len(so), head+marker)
	if _, _, any := drain(); !any {
		fmt.Fprintln(log, "drain 4: nothing")
	}
	os.Exit(0)
}

// TestLineBufferStdio: the C library loads and its stdout takes line
// buffering (best effort where there is a glibc, as on every supported host).
func TestLineBufferStdio(t *testing.T) {
	if err := LineBufferStdio(); err != nil {
		t.Fatal(err)
	}
}
