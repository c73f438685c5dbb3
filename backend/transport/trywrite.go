package transport

import (
	"errors"
	"net"
	"syscall"
)

// TryWriter is a connection that can attempt a write without waiting: the
// session's fast path writes a reply at once when the socket has room,
// and queues what did not fit for its writer goroutine (which may wait).
type TryWriter interface {
	// TryWrite writes what of b fits now, in one system call, and
	// returns how much that was (0 when the socket is full). An error
	// means the connection is broken.
	TryWrite(b []byte) (int, error)
}

// SocketConn is a connection carried by a unix stream socket (host mode,
// a stream handed to a worker).
type SocketConn interface {
	Socket() *net.UnixConn
}

// SocketTryWriter implements TryWriter on a socket with one non-blocking
// write(2). It is for one writer at a time and allocates nothing per call.
type SocketTryWriter struct {
	rc  syscall.RawConn
	b   []byte
	n   int
	err error
	fn  func(fd uintptr) bool
}

// NewSocketTryWriter returns a TryWriter on c.
func NewSocketTryWriter(c *net.UnixConn) (*SocketTryWriter, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	w := &SocketTryWriter{rc: rc}
	w.fn = w.write
	return w, nil
}

// write runs under the runtime's write lock of the fd (RawConn.Write);
// returning true ends the attempt whatever happened: the runtime does not
// wait for room.
func (w *SocketTryWriter) write(fd uintptr) bool {
	w.n, w.err = syscall.Write(int(fd), w.b)
	return true
}

// TryWrite writes what of b fits now.
func (w *SocketTryWriter) TryWrite(b []byte) (int, error) {
	w.b = b
	err := w.rc.Write(w.fn)
	n, werr := w.n, w.err
	w.b, w.n, w.err = nil, 0, nil
	if err != nil { // the connection is closed
		return 0, err
	}
	if n < 0 {
		n = 0
	}
	if errors.Is(werr, syscall.EAGAIN) || errors.Is(werr, syscall.EINTR) {
		werr = nil
	}
	return n, werr
}
