package worker

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/transport"
	"github.com/vgpu-project/vgpu/protocol"
)

// Routing by guest process (PerProcess). Natively a process that opens
// many CUDA contexts, or one that a library opens many times, is still one
// process: its connections share one worker here, and a VM's MaxPerVM slots
// count guest processes, not connections. Before a new connection gets a
// worker the manager learns whose it is:
//
//   - a guest stream (vsock, directly or through "vgpu front"): the first
//     frame is the HELLO that vgpu.ko sends when a file of /dev/vgpu is
//     opened (role driver, the opener's PID); only the guest kernel (or guest
//     root) can connect from a privileged source port, so from such a port
//     that PID names the process. The manager reads that one frame and
//     passes it on to the worker ahead of the stream's own bytes.
//   - a host-mode client's unix socket: the peer's PID (SO_PEERCRED); no
//     bytes are read.
//
// Anything else (no HELLO, another role, an unprivileged port, PID 0) is a
// process of its own: the connection gets a worker alone, as before.
//
// Guest users. vgpu.ko's HELLO also carries the opener's uid: a VM's
// guest user may hold at most MaxPerUser of its VM's MaxPerVM slots, and
// users other than root together leave the last RootReserve slots free,
// so one user's processes cannot deny the VM's other users (and root) the
// GPU. Root (uid 0, also what drivers older than the field send),
// connections from a privileged port without such a HELLO (the guest
// kernel's or root's) and host-mode clients (the host's own processes) are
// bounded by MaxPerVM alone; connections from an unprivileged guest port
// (anyone who bypasses vgpu.ko) count as one user together. What
// one process's many connections may hold in its worker is bounded by that
// worker's per-session and per-VM budgets (backend/budget) and by the
// manager's session bounds; a guest's own cap on /dev/vgpu files per user is
// vgpu.ko's max_opens_per_user.

// DefaultHelloTimeout is Manager.HelloTimeout's default: vgpu.ko sends its
// HELLO as soon as it has connected.
const DefaultHelloTimeout = 30 * time.Second

// DefaultSlotWait is how long "vgpu serve" lets a new guest process wait
// for one of its VM's MaxPerVM slots (Manager.SlotWait): processes that
// are ending (a flood's, a killed program's) free theirs within it.
const DefaultSlotWait = 5 * time.Second

// maxHello bounds the first frame the manager reads: a HELLO is 56 bytes.
const maxHello = 4096

// firstFrame is what identify learned from a connection.
type firstFrame struct {
	who   string // the guest process ("": one of its own)
	user  string // the guest user it counts against ("": none, MaxPerVM only)
	read  []byte // the bytes read, which the worker must serve first
	hello *protocol.Header
}

// identify learns which guest process conn belongs to (see above), within
// timeout. Frames before the HELLO are answered here as a session answers
// them (CUDA_ERROR_NOT_INITIALIZED: a session serves nothing before HELLO),
// so a connection that never says HELLO never takes a worker; at most
// maxBeforeHello of them. An error means the connection ended (or said no
// HELLO in time).
func identify(ctx context.Context, conn transport.Conn, timeout time.Duration) (firstFrame, error) {
	if conn.PeerCID() == 0 {
		if s, ok := conn.(interface{ Socket() *net.UnixConn }); ok && s.Socket() != nil {
			pid, err := peerPID(s.Socket())
			if err != nil || pid <= 0 {
				return firstFrame{}, nil
			}
			return firstFrame{who: fmt.Sprintf("host pid %d", pid)}, nil
		}
	}
	var timedOut atomic.Bool
	t := time.AfterFunc(timeout, func() { timedOut.Store(true); conn.Close() })
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	ff, err := readHello(conn)
	if !t.Stop() && timedOut.Load() {
		return ff, fmt.Errorf("no HELLO within %v", timeout)
	}
	return ff, err
}

// UnprivilegedUser is the guest user that connections from unprivileged
// guest ports count against, together.
const UnprivilegedUser = "unprivileged guest ports"

// maxBeforeHello bounds the frames a connection may send before its HELLO.
const maxBeforeHello = 64

// readHello reads frames up to the first HELLO and names the guest process
// a driver's HELLO from a privileged port gives. A header the session would
// refuse is passed on (read) for it to answer.
func readHello(conn transport.Conn) (firstFrame, error) {
	for n := 0; ; n++ {
		var ff firstFrame
		hb := make([]byte, protocol.HeaderSize)
		if _, err := io.ReadFull(conn, hb); err != nil {
			return ff, err
		}
		ff.read = hb
		h, err := protocol.DecodeHeader(hb, protocol.DefaultLimits)
		if err != nil || h.Flags&(protocol.FlagReply|protocol.FlagNotify|protocol.FlagOutput) != 0 {
			return ff, nil // the session answers it
		}
		if h.Opcode != protocol.OpHello {
			if n == maxBeforeHello {
				return ff, fmt.Errorf("%d frames before HELLO", n)
			}
			if _, err := io.CopyN(io.Discard, conn, int64(h.FrameLen()-protocol.HeaderSize)); err != nil {
				return ff, err
			}
			if err := answerBeforeHello(conn, &h); err != nil {
				return ff, err
			}
			continue
		}
		if h.PayloadLen > maxHello || h.NumSegs != 0 {
			return ff, nil // the session answers it
		}
		rest := make([]byte, h.FrameLen()-protocol.HeaderSize)
		if _, err := io.ReadFull(conn, rest); err != nil {
			return ff, err
		}
		ff.read = append(ff.read, rest...)
		ff.hello = &h
		req, _, err := protocol.Decode[protocol.HelloReq](rest[:h.PayloadLen])
		if err == nil && req.Role == protocol.RoleDriver && req.PID != 0 && transport.PrivilegedPort(conn.PeerPort()) {
			ff.who = fmt.Sprintf("guest pid %d", req.PID)
			if req.UID != 0 {
				ff.user = fmt.Sprintf("guest uid %d", req.UID)
			}
		}
		if !transport.PrivilegedPort(conn.PeerPort()) {
			ff.user = UnprivilegedUser
		}
		return ff, nil
	}
}

// answerBeforeHello answers a frame that came before HELLO as a session
// does: CUDA_ERROR_NOT_INITIALIZED, as its reply or (FlagNoReply) as a
// deferred-error notification.
func answerBeforeHello(conn transport.Conn, h *protocol.Header) error {
	var b []byte
	if h.Flags&protocol.FlagNoReply != 0 {
		n := protocol.ErrorNotify{RequestID: h.RequestID, Error: int32(device.ErrNotInitialized), Opcode: uint16(h.Opcode)}
		nh := protocol.NewHeader(protocol.OpNotifyError, 0)
		nh.Flags = protocol.FlagNotify
		b = protocol.AppendFrame(nil, nh, protocol.Bytes(&n), nil)
	} else {
		b = protocol.AppendFrame(nil, protocol.Reply(h, int32(device.ErrNotInitialized)), nil, nil)
	}
	_, err := conn.Write(b)
	return err
}

// peerPID returns the PID of the process that connected uc.
func peerPID(uc *net.UnixConn) (int32, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return cred.Pid, nil
}

// refuse answers the HELLO a refused connection sent (if it sent one) with
// CUDA_ERROR_DEVICE_UNAVAILABLE, so the guest learns why before the
// connection closes.
func refuse(conn transport.Conn, ff firstFrame) {
	if ff.hello == nil {
		return
	}
	h := protocol.Reply(ff.hello, int32(device.ErrDeviceUnavailable))
	_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = conn.Write(protocol.AppendFrame(nil, h, nil, nil))
}

// errUserSlots refuses a process of a user who holds MaxPerUser slots (or
// when only the root reserve is left).
func errUserSlots(vm, user string, max, reserve int, waited time.Duration) error {
	return fmt.Errorf("%w: %s of VM %s holds %d (or only the %d kept for root are left), and none ended within %v", ErrTooManyProcesses, user, vm, max, reserve, waited)
}

// errSlotWait wraps ErrTooManyProcesses with the wait.
func errSlotWait(vm string, max int, waited time.Duration) error {
	if waited <= 0 {
		return fmt.Errorf("%w: VM %s has %d", ErrTooManyProcesses, vm, max)
	}
	return fmt.Errorf("%w: VM %s has %d, and none ended within %v", ErrTooManyProcesses, vm, max, waited)
}
