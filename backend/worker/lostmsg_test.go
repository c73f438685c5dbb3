package worker_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/backend/handoff"
	"github.com/vgpu-project/vgpu/backend/server"
	"github.com/vgpu-project/vgpu/backend/worker"
)

// A control message whose fds the worker cannot take (it was out of fds:
// the kernel truncates the fds and says MSG_CTRUNC) loses that message
// only. Before, the worker stopped reading its control socket and took no
// session for as long as any older one stayed connected (issue 20). Here
// the same path is taken with more fds than a message may carry.
func TestWorkerGoesOnAfterALostMessage(t *testing.T) {
	drv, err := sim.New(sim.Config{MemBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	srv, err := server.New(server.Config{Driver: drv, AllowUnprivilegedSegments: true})
	if err != nil {
		t.Fatal(err)
	}
	mgr, wrk, err := handoff.Socketpair(unix.SOCK_SEQPACKET)
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() {
		ran <- worker.Run(ctx, worker.NewControl(wrk), srv, hclog.NewNullLogger(), worker.RunOptions{Mode: worker.PerVM})
	}()

	var many []int
	for i := 0; i < handoff.MaxFDs+8; i++ {
		fd, err := unix.Dup(0)
		if err != nil {
			t.Fatal(err)
		}
		many = append(many, fd)
	}
	if err := rawSend(mgr, []byte(`{"op":"session","session":1}`), many); err != nil {
		t.Fatal(err)
	}
	handoff.CloseFDs(many)

	mine, theirs, err := handoff.Socketpair(unix.SOCK_STREAM)
	if err != nil {
		t.Fatal(err)
	}
	if err := handoff.Send(mgr, &handoff.Message{Op: handoff.OpSession, Session: 2, CID: 3, Port: 1023, VM: "vm-a"}, []int{int(theirs.Fd())}); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	gc, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		t.Fatal(err)
	}
	c := helloClient(t, gc)
	if f, err := c.Call(0x0005, 0, nil, nil); err != nil || f.Status != 0 {
		t.Fatalf("a session after the lost message: %v %d", err, f.Status)
	}
	c.Close()
	handoff.Hangup(mgr)
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("worker.Run did not end after the manager hung up")
	}
}

// rawSend sends one record with fds, bypassing Send's own bound.
func rawSend(f handoff.Socket, b []byte, fds []int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), b, unix.UnixRights(fds...), nil, 0)
		return serr != unix.EAGAIN
	})
	if err != nil {
		return err
	}
	return serr
}
