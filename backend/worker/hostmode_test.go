package worker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/hostmode"
	"github.com/vgpu-project/vgpu/backend/hostmode/hostmodetest"
	"github.com/vgpu-project/vgpu/protocol"
)

// procCount counts a process's open fds and its mappings of memfds named name.
func procCount(t *testing.T, pid int, name string) (fds, maps int) {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents), strings.Count(string(b), "/memfd:"+name+" (deleted)")
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtimeGosched()
	}
}

// TestWorkerHostModeSharedMemory: with --isolate vm, host-mode connections
// run in a worker too; the manager hands the client's socket to the worker,
// which reads the frames and their fds itself and maps the client's memfds.
// Nothing leaks in either.
func TestWorkerHostModeSharedMemory(t *testing.T) {
	m := manager(t, "ok")
	path := filepath.Join(t.TempDir(), "vgpu.sock")
	ln, err := hostmode.Listen(path, hostmode.Options{MaxShares: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serveNext := func(id uint64) <-chan error {
		done := make(chan error, 1)
		go func() {
			conn, err := ln.Accept()
			if err != nil {
				done <- err
				return
			}
			done <- m.ServeConn(context.Background(), conn, id)
		}()
		return done
	}
	done := serveNext(1)
	c := hostmodetest.Dial(t, path)
	if f := c.Hello(t); f&protocol.FeatureHostShare == 0 {
		t.Fatalf("HELLO through the worker: features %#x, want HOST_SHARE", f)
	}
	pid := m.Status().Workers[0].PID
	// What the worker holds now, less the session's stream, is what it
	// must hold once the session is over.
	workerFDs, _ := procCount(t, pid, "vgpu-hostmodetest")
	workerFDs--
	// Here: the client's socket and the accepted one (handed to the
	// worker; the manager keeps its copy, unread, until the session ends);
	// at the end, instead, the test's three memfds.
	mine := hostmodetest.CountFDs(t)
	hostmodetest.RoundTrip(t, c, 1<<40)
	// Refusals and stray fds reach the worker's session too.
	bad := hostmodetest.NewMemfd(t, "vgpu-hostmodetest", 4096, 0)
	if st := c.Share(t, 1<<41, 4096, bad.FD); device.Result(st) != device.ErrInvalidValue {
		t.Fatalf("unsealed memfd through the worker: status %d", st)
	}
	if f, err := c.CallFDs(protocol.OpPing, nil, bad.FD); err != nil || f.Status != 0 {
		t.Fatalf("PING with a stray fd: %v %d", err, f.Status)
	}
	// A share still open when the client goes away is released too.
	keep := hostmodetest.NewMemfd(t, "vgpu-hostmodetest", 1<<20, hostmodetest.Seals)
	if st := c.Share(t, 1<<42, 1<<20, keep.FD); st != 0 {
		t.Fatalf("share: %d", st)
	}
	if _, maps := procCount(t, pid, "vgpu-hostmodetest"); maps != 1 {
		t.Fatalf("worker maps the share %d times, want 1", maps)
	}
	c.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	eventually(t, "the worker to release the client's memory", func() bool {
		fds, maps := procCount(t, pid, "vgpu-hostmodetest")
		return fds == workerFDs && maps == 0
	})
	eventually(t, "the manager to hold nothing of the session", func() bool { return hostmodetest.CountFDs(t) == mine+1 })
}

// TestWorkerHostModeRing: a host-mode session moves onto shared-memory
// rings inside its worker (the worker holds the socket, so the memfd and
// eventfds of RING_SETUP reach it directly); calls, shared memory through a
// carrier's fd, and the end of the session release everything.
func TestWorkerHostModeRing(t *testing.T) {
	m := manager(t, "ok")
	path := filepath.Join(t.TempDir(), "vgpu.sock")
	ln, err := hostmode.Listen(path, hostmode.Options{MaxShares: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		done <- m.ServeConn(context.Background(), conn, 1)
	}()
	c := hostmodetest.Dial(t, path)
	if f := c.HelloFeatures(t, protocol.FeatureBatch|protocol.FeatureInline|protocol.FeatureHostShare|protocol.FeatureShmRing); f&protocol.FeatureShmRing == 0 {
		t.Fatalf("HELLO through the worker: features %#x, want SHM_RING", f)
	}
	pid := m.Status().Workers[0].PID
	workerFDs, _ := procCount(t, pid, "vgpu-ring")
	workerFDs--
	r := hostmodetest.StartRing(t, c, protocol.RingMinBytes, nil)
	r.Ping(t)
	if _, maps := procCount(t, pid, "vgpu-ring"); maps != 1 {
		t.Fatalf("worker maps the ring memfd %d times, want 1", maps)
	}
	hostmodetest.RoundTrip(t, r, 1<<40)
	r.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	eventually(t, "the worker to release the rings", func() bool {
		fds, maps := procCount(t, pid, "vgpu-ring")
		return fds == workerFDs && maps == 0
	})
}
