package worker

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/handoff"
)

// The manager's side of issue 20's lost control message: a worker's message
// whose fds the manager cannot take (it is out of fds: MSG_CTRUNC; here more
// fds than a message may carry) is lost alone, and the worker's later
// messages (here "ready"; in use "session-end", a lease) are still heard.
func TestManagerGoesOnAfterALostMessage(t *testing.T) {
	mgr, wrk, err := handoff.Socketpair(unix.SOCK_SEQPACKET)
	if err != nil {
		t.Fatal(err)
	}
	defer wrk.Close()
	m := NewManager(nil, hclog.NewNullLogger())
	m.init()
	p := &proc{cmd: &exec.Cmd{Process: &os.Process{Pid: os.Getpid()}}, ctrl: mgr,
		ready: make(chan struct{}), dead: make(chan struct{}), heard: make(chan struct{}), sessions: map[uint64]chan struct{}{}}
	go m.listen(p)

	var many []int
	for i := 0; i < handoff.MaxFDs+8; i++ {
		fd, err := unix.Dup(0)
		if err != nil {
			t.Fatal(err)
		}
		many = append(many, fd)
	}
	rc, err := wrk.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), []byte(`{"op":"module-put","hash":"00","bytes":1}`), unix.UnixRights(many...), nil, 0)
		return serr != unix.EAGAIN
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	handoff.CloseFDs(many)
	if err := handoff.Send(wrk, &handoff.Message{Op: handoff.OpReady}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.ready:
	case <-p.heard:
		t.Fatal("the manager stopped reading the worker after one lost message")
	case <-time.After(10 * time.Second):
		t.Fatal("the worker's ready after a lost message was not heard")
	}
	handoff.Hangup(wrk)
	<-p.heard
	mgr.Close()
}
