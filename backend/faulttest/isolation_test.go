package faulttest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/backend/server"
)

// TestProcessIsolation runs the real default `vgpu serve` (a worker process
// per guest process) on the sim device for a TCG guest and for host-mode
// clients, and checks that a guest process can hurt only itself:
//
//   - in the guest, three processes at once: two soaks (checksummed copies,
//     memsets, launches) and, one after another beside them, a process whose
//     kernel fails an assert (710) and one whose kernel stores to an illegal
//     address (700) (the sim's test kernels: sticky for the whole worker, as
//     on a GPU). Each faulting process sees its error and stays broken; the
//     soaks finish with every byte exact; a program started afterwards works;
//   - a process's device printf lines reach its own stdout, between its own
//     lines before and after the synchronising call, and the assertion
//     message its own stderr; nothing reaches another process;
//   - the same in host mode: a soak and a faulting client of one socket;
//   - the backend counts the calls of all these processes (workers report to
//     the manager), ends with no session and with every worker gone but the
//     pool.
func TestProcessIsolation(t *testing.T) {
	k := needGuest(t)
	vgpu := vgpuBinary(t, k)
	iso := filepath.Join(k.bin, "isolation")
	if _, err := os.Stat(iso); err != nil || stale(iso, filepath.Join(k.root, "scripts/reliability/isolation.cu")) {
		out, err := exec.Command(filepath.Join(k.root, "scripts/reliability/build.sh"), k.bin).CombinedOutput()
		if err != nil {
			t.Fatalf("building the isolation program: %v\n%s", err, out)
		}
	}
	dir := t.TempDir()
	vu, hs, status := filepath.Join(dir, "vu.sock"), filepath.Join(dir, "host.sock"), filepath.Join(dir, "status.sock")
	startVGPU(t, vgpu, "serve", "--device", "sim", "--sim-mem", "4G", "--mem-limit", "1G", "--vhost-user-socket", vu, "--unix", hs,
		"--status-socket", status, "--log-level", "error")
	waitStatus(t, status)

	// Host mode: a soak and, while it runs, a faulting client and a
	// printing one, all clients of one socket (one "VM").
	hostEnv := append(os.Environ(), "VGPU_TRANSPORT=unix:"+hs, "LD_LIBRARY_PATH="+k.lib)
	hostRun := func(args ...string) *exec.Cmd {
		c := exec.Command(args[0], args[1:]...)
		c.Env = hostEnv
		return c
	}
	var soakOut strings.Builder
	soak := hostRun(filepath.Join(k.bin, "soak"), "--seconds", "15", "--streams", "2", "--launch", "--seed", "9")
	soak.Stdout, soak.Stderr = &soakOut, &soakOut
	if err := soak.Start(); err != nil {
		t.Fatal(err)
	}
	hostFaults := map[string]string{}
	for _, mode := range []string{"assert", "illegal"} {
		out, err := hostRun(iso, mode).CombinedOutput()
		hostFaults[mode] = string(out)
		if err != nil || !strings.Contains(string(out), "PASS isolation "+mode) {
			t.Errorf("host mode, %s: %v\n%s", mode, err, out)
		}
	}
	if !strings.Contains(hostFaults["assert"], "Assertion `x == 0` failed") {
		t.Errorf("host mode: the assertion message did not reach the faulting program:\n%s", hostFaults["assert"])
	}
	var hostOut, hostErr strings.Builder
	pr := hostRun(iso, "printf", "4")
	pr.Stdout, pr.Stderr = &hostOut, &hostErr
	if err := pr.Run(); err != nil {
		t.Errorf("host mode printf: %v\n%s%s", err, hostOut.String(), hostErr.String())
	}
	checkPrintf(t, "host mode", hostOut.String(), 4)
	if err := soak.Wait(); err != nil || !strings.Contains(soakOut.String(), "PASS soak") {
		t.Fatalf("host-mode soak beside the faulting clients: %v\n%s", err, tail(soakOut.String(), 5))
	}
	checkSoakExact(t, "host mode", soakOut.String())
	if strings.Contains(soakOut.String(), "vgpu printf probe") || strings.Contains(soakOut.String(), "Assertion") {
		t.Errorf("another process's device output reached the soak:\n%s", soakOut.String())
	}

	// The TCG guest: three processes at once.
	var con console
	script := fmt.Sprintf(`export LD_LIBRARY_PATH=%[1]s
for i in 1 2; do %[2]s/soak --seconds 40 --streams 2 --launch --seed $i > /tmp/soak.$i.log 2>&1 & done
sleep 3
echo "== assert"; %[3]s assert > /tmp/a.out 2> /tmp/a.err; echo "assert exit $?"; cat /tmp/a.out; sed 's/^/STDERR /' /tmp/a.err
echo "== illegal"; %[3]s illegal; echo "illegal exit $?"
echo "== printf"; %[3]s printf 7 > /tmp/p.out 2>&1; echo "printf exit $?"; sed 's/^/OUT /' /tmp/p.out
wait
for i in 1 2; do grep -v READY /tmp/soak.$i.log; done
echo "== after"; %[2]s/soak --seconds 2 --streams 1 | tail -1
grep -q '^PASS soak' /tmp/soak.1.log && grep -q '^PASS soak' /tmp/soak.2.log && echo ISOLATION-GUEST-DONE`, k.lib, k.bin, iso)
	done := con.on("ISOLATION-GUEST-DONE")
	m := startAndWait(t, k, vu, &con, done, 8*time.Minute, script)
	res, err := m.Wait(context.Background())
	out := con.String()
	t.Logf("guest console:\n%s", filterIsolation(out))
	if err != nil || res.ExitStatus != 0 {
		t.Fatalf("guest: %v %+v", err, res)
	}
	for _, want := range []string{"assert exit 0", "PASS isolation assert", "STDERR vgpu-sim: void vgpu_fault_assert(int)", "Assertion `x == 0` failed",
		"illegal exit 0", "PASS isolation illegal", "printf exit 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("guest console lacks %q", want)
		}
	}
	var guestPrintf []string
	for _, l := range strings.Split(out, "\n") {
		if s, ok := strings.CutPrefix(strings.TrimRight(l, "\r"), "OUT "); ok {
			guestPrintf = append(guestPrintf, s)
		}
	}
	checkPrintf(t, "guest", strings.Join(guestPrintf, "\n")+"\n", 7)
	if strings.Count(out, "PASS soak") != 3 {
		t.Errorf("want both soaks beside the faults and the program after them to pass; console:\n%s", filterIsolation(out))
	}
	checkSoakExact(t, "guest", out)

	testwait.For(t, 30*time.Second, "no sessions, every serving worker gone", func() bool {
		s, err := server.ReadStatus(status, time.Second)
		return err == nil && len(s.Sessions) == 0 && !strings.Contains(fmt.Sprint(s.Workers), "serving")
	})
	s, err := server.ReadStatus(status, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Two host soaks' and guests' launches, all counted by the manager.
	if l := s.Stats.Ops["LAUNCH_KERNEL"]; l.Calls < 100 || s.Stats.TotalSessions < 9 {
		t.Errorf("the manager counts %d launches in %d sessions: the workers' counters are missing", l.Calls, s.Stats.TotalSessions)
	}
	t.Logf("backend: %d sessions, %d calls of LAUNCH_KERNEL, %d of MEMCPY_HTOD", s.Stats.TotalSessions, s.Stats.Ops["LAUNCH_KERNEL"].Calls, s.Stats.Ops["MEMCPY_HTOD"].Calls)
}

// checkPrintf checks one run of "isolation printf TAG": the device lines
// between the program's own lines before and after its sync.
func checkPrintf(t *testing.T, where, out string, tag int) {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimRight(l, "\r"); l != "" {
			lines = append(lines, l)
		}
	}
	want := []string{fmt.Sprintf("HOST before %d", tag)}
	probe := map[string]bool{}
	for b := 0; b < 2; b++ {
		for th := 0; th < 2; th++ {
			probe[fmt.Sprintf("vgpu printf probe: tag %d block %d thread %d", tag, b, th)] = true
		}
	}
	if len(lines) != 7 || lines[0] != want[0] || lines[5] != fmt.Sprintf("HOST after %d", tag) || lines[6] != "PASS isolation printf" {
		t.Errorf("%s: printf program output:\n%s\nwant HOST before, 4 device lines, HOST after, PASS", where, out)
		return
	}
	for _, l := range lines[1:5] {
		if !probe[l] {
			t.Errorf("%s: %q is not one of the kernel's lines (tag %d)", where, l, tag)
		}
		delete(probe, l)
	}
}

var soakCorrupt = regexp.MustCompile(`SOAK pid=\d+ .*checked=(\d+) corrupt=(\d+)`)

// checkSoakExact: every SOAK line checked bytes and found none corrupt.
func checkSoakExact(t *testing.T, where, out string) {
	t.Helper()
	ms := soakCorrupt.FindAllStringSubmatch(out, -1)
	if len(ms) == 0 {
		t.Errorf("%s: no SOAK line", where)
	}
	for _, m := range ms {
		if m[2] != "0" || m[1] == "0" {
			t.Errorf("%s: soak checked %s bytes, %s corrupt", where, m[1], m[2])
		}
	}
}

func filterIsolation(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, p := range []string{"==", "assert", "illegal", "printf", "OUT ", "STDERR ", "RESULT", "PASS", "FAIL", "SOAK", "ISOLATION"} {
			if strings.HasPrefix(l, p) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
