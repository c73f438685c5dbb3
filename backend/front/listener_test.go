package front

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/handoff"
	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/protocol"
)

// rawFront is a hand-driven front: it sends whatever a test wants.
type rawFront struct {
	t *testing.T
	c *net.UnixConn
}

func dialFront(t *testing.T, sock string) *rawFront {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawFront{t: t, c: c}
}

func (f *rawFront) send(m handoff.Message, fds ...int) {
	f.t.Helper()
	if err := handoff.Send(f.c, &m, fds); err != nil {
		f.t.Fatalf("send %s: %v", m.Op, err)
	}
}

// raw sends one record of arbitrary bytes with fds.
func (f *rawFront) raw(b []byte, fds ...int) {
	f.t.Helper()
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := f.c.WriteMsgUnix(b, oob, nil); err != nil {
		f.t.Fatalf("raw send: %v", err)
	}
}

func (f *rawFront) hello(vm string) { f.send(handoff.Message{Op: handoff.OpHello, VM: vm, CID: 3}) }

// dropped reports whether the backend hung up on this front.
func (f *rawFront) dropped(d time.Duration) bool {
	_ = f.c.SetReadDeadline(time.Now().Add(d))
	b := make([]byte, 64)
	n, err := f.c.Read(b)
	return n == 0 && err != nil && !os.IsTimeout(err)
}

// files made for a case; closed by the test after sending (the backend
// has its own copies).
type caseFDs struct {
	t   *testing.T
	fds []int
}

func (c *caseFDs) add(fd int) int { c.fds = append(c.fds, fd); return fd }
func (c *caseFDs) close()         { handoff.CloseFDs(c.fds) }

func (c *caseFDs) pipe() int {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		c.t.Fatal(err)
	}
	c.add(p[1])
	return c.add(p[0])
}

func (c *caseFDs) socket(typ int) int {
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		c.t.Fatal(err)
	}
	c.add(fds[1])
	return c.add(fds[0])
}

func (c *caseFDs) ram(size uint64, seals int) int { return c.add(memfd(c.t, size, seals)) }

const sealed = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW

func memMsg(gen uint64, regions ...handoff.Region) handoff.Message {
	return handoff.Message{Op: handoff.OpMemory, Memory: gen, Regions: regions}
}

var badFronts = []struct {
	name string
	do   func(f *rawFront, c *caseFDs)
}{
	{"not JSON", func(f *rawFront, c *caseFDs) { f.raw([]byte("hello, backend")) }},
	{"no hello in time", func(f *rawFront, c *caseFDs) {}},
	{"session before hello", func(f *rawFront, c *caseFDs) {
		f.send(handoff.Message{Op: handoff.OpSession, Port: 1023}, c.socket(unix.SOCK_STREAM))
	}},
	{"hello with an fd", func(f *rawFront, c *caseFDs) {
		f.send(handoff.Message{Op: handoff.OpHello, VM: "x", CID: 3}, c.pipe())
	}},
	{"hello without a name", func(f *rawFront, c *caseFDs) { f.hello("") }},
	{"hello with a control character", func(f *rawFront, c *caseFDs) { f.hello("vm\nFAKE LOG LINE") }},
	{"hello with a long name", func(f *rawFront, c *caseFDs) { f.hello(strings.Repeat("v", 300)) }},
	{"hello with the host CID", func(f *rawFront, c *caseFDs) { f.send(handoff.Message{Op: handoff.OpHello, VM: "x", CID: 2}) }},
	{"hello for a VM another front serves", func(f *rawFront, c *caseFDs) { f.hello("good-vm") }},
	{"second hello", func(f *rawFront, c *caseFDs) { f.hello("a"); f.hello("a") }},
	{"unknown op", func(f *rawFront, c *caseFDs) { f.hello("a"); f.send(handoff.Message{Op: "reboot"}) }},
	{"record over 64 KiB", func(f *rawFront, c *caseFDs) {
		f.hello("a")
		b, _ := json.Marshal(handoff.Message{Op: handoff.OpSession, VM: strings.Repeat("x", 70<<10)})
		f.raw(b)
	}},
	{"more than 64 fds", func(f *rawFront, c *caseFDs) {
		f.hello("a")
		var fds []int
		for i := 0; i < 100; i++ {
			fds = append(fds, c.pipe())
		}
		b, _ := json.Marshal(handoff.Message{Op: handoff.OpSession, Port: 1023})
		f.raw(b, fds...)
	}},
	{"memory: more regions than fds", func(f *rawFront, c *caseFDs) {
		f.hello("a")
		f.send(memMsg(1, handoff.Region{Size: 4096}, handoff.Region{GPA: 1 << 20, Size: 4096}), c.ram(8192, sealed))
	}},
	{"memory: no regions", func(f *rawFront, c *caseFDs) { f.hello("a"); f.send(memMsg(1)) }},
	{"memory: generation 0", func(f *rawFront, c *caseFDs) {
		f.hello("a")
		f.send(memMsg(0, handoff.Region{Size: 4096}), c.ram(4096, sealed))
	}},
	{"memory: memfd smaller than the layout", func(f *rawFront, c *caseFDs) {
		f.hello("a")
		f.send(memMsg(1, handoff.Region{Size: 1 << 20}), c.ram(4096, sealed))
	}},
	{"memory: offset past the memfd", func(f *rawFront, c *caseFDs) {
		f.hello("a")
		f.send(memMsg(1, handoff.Region{Size: 4096, MmapOffset: 8192}), c.ram(8192, sealed))
	}},
	{"memory: size wraps", func(f *rawFront, c *caseFDs) {
		f.hello("a")
		f.send(memMsg(1, handoff.Region{Size: ^uint64(0) - 4095, MmapOffset: 8192}), c.ram(8192, sealed))
	}},
	{"memory: memfd not sealed", func(f *rawFront, c *caseFDs) {
		f.hello("a")
		f.send(memMsg(1, handoff.Region{Size: 4096}), c.ram(4096, 0))
	}},
	{"memory: a pipe", func(f *rawFront, c *caseFDs) {
		f.hello("a")
		f.send(memMsg(1, handoff.Region{Size: 4096}), c.pipe())
	}},
	{"memory: overlapping regions", func(f *rawFront, c *caseFDs) {
		f.hello("a")
		fd := c.ram(16384, sealed)
		f.send(memMsg(1, handoff.Region{GPA: 0, Size: 8192}, handoff.Region{GPA: 4096, Size: 8192, MmapOffset: 8192}), fd, fd)
	}},
	{"session without an fd", func(f *rawFront, c *caseFDs) {
		f.hello("a")
		f.send(handoff.Message{Op: handoff.OpSession, Port: 1023})
	}},
	{"session with two fds", func(f *rawFront, c *caseFDs) {
		f.hello("a")
		f.send(handoff.Message{Op: handoff.OpSession, Port: 1023}, c.socket(unix.SOCK_STREAM), c.socket(unix.SOCK_STREAM))
	}},
	{"session on a seqpacket socket", func(f *rawFront, c *caseFDs) {
		f.hello("a")
		f.send(handoff.Message{Op: handoff.OpSession, Port: 1023}, c.socket(unix.SOCK_SEQPACKET))
	}},
	{"session on a pipe", func(f *rawFront, c *caseFDs) {
		f.hello("a")
		f.send(handoff.Message{Op: handoff.OpSession, Port: 1023}, c.pipe())
	}},
	{"session naming memory never sent", func(f *rawFront, c *caseFDs) {
		f.hello("a")
		f.send(handoff.Message{Op: handoff.OpSession, Port: 1023, Memory: 7}, c.socket(unix.SOCK_STREAM))
	}},
	{"session for another VM", func(f *rawFront, c *caseFDs) {
		f.hello("a")
		f.send(handoff.Message{Op: handoff.OpSession, Port: 1023, VM: "good-vm"}, c.socket(unix.SOCK_STREAM))
	}},
}

// TestBadFronts: every malformed or hostile message from a front gets that
// front dropped (with a log line), while a well-behaved front keeps its
// session; the backend leaks no fds and no guest-RAM mappings.
func TestBadFronts(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "front.sock")
	logs := &syncWriter{w: &bytes.Buffer{}}
	log := hclog.New(&hclog.LoggerOptions{Name: "backend", Level: hclog.Error, Output: logs})
	b := startBackend(t, sock, ListenOptions{HelloTimeout: 200 * time.Millisecond, Logger: log})
	defer b.stop(t)

	// A good front with a session, which must survive everything below.
	good := dialFront(t, sock)
	good.hello("good-vm")
	ram := sealedRAM(t, 1<<20)
	fd := ram.Regions()[0].FD
	good.send(memMsg(1, handoff.Region{Size: 1 << 20, UserAddr: 0x7000_0000_0000}), fd)
	mine, theirs, err := handoff.Socketpair(unix.SOCK_STREAM)
	if err != nil {
		t.Fatal(err)
	}
	good.send(handoff.Message{Op: handoff.OpSession, Port: 1023, Memory: 1, VM: "good-vm", CID: 3}, int(theirs.Fd()))
	theirs.Close()
	gc, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		t.Fatal(err)
	}
	client := sessiontest.NewClient(gc)
	defer client.Close()
	roundTrip(t, client, ram, 3)

	before := openFDs(t)
	for i, tc := range badFronts {
		t.Run(tc.name, func(t *testing.T) {
			f := dialFront(t, sock)
			c := &caseFDs{t: t}
			tc.do(f, c)
			c.close()
			if !f.dropped(5 * time.Second) {
				t.Fatal("the backend kept a front that broke the protocol")
			}
			f.c.Close()
			testwait.For(t, 5*time.Second, "the drop was counted", func() bool { return b.ln.Dropped() == uint64(i+1) })
			noFDLeak(t, before)
		})
	}
	if _, err := client.Call(protocol.OpPing, 0, nil, nil); err != nil {
		t.Fatalf("the good front's session after the bad fronts: %v", err)
	}
	roundTrip(t, client, ram, 4)
	if fs := b.ln.Fronts(); len(fs) != 1 || fs[0].VM != "good-vm" {
		t.Fatalf("fronts: %+v", fs)
	}
	if n := strings.Count(logs.String(), "front dropped"); n != len(badFronts) {
		t.Fatalf("%d 'front dropped' log lines for %d bad fronts:\n%s", n, len(badFronts), logs.String())
	}
	t.Logf("log:\n%s", logs.String())
}

// syncWriter serialises writes to w (the logger writes from goroutines).
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}
