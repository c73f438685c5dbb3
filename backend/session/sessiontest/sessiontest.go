// Package sessiontest fakes the guest side of a session in-process: a
// transport.Conn over net.Pipe with chosen CID, source port and guest
// memory, guest RAM in a memfd, and a client that speaks the protocol.
package sessiontest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/transport"
	"github.com/vgpu-project/vgpu/protocol"
)

// Conn is a transport.Conn over one end of a net.Pipe.
type Conn struct {
	net.Conn
	CID  uint32
	Port uint32
	Mem  guestmem.Source // nil: host mode
	Name string
}

func (c *Conn) PeerCID() uint32  { return c.CID }
func (c *Conn) PeerPort() uint32 { return c.Port }
func (c *Conn) Memory() guestmem.Source {
	if c.Mem == nil {
		return nil
	}
	return c.Mem
}
func (c *Conn) VM() string {
	if c.Name == "" {
		return "test"
	}
	return c.Name
}

var _ transport.Conn = (*Conn)(nil)

// Pipe returns the backend's end (a transport.Conn) and the guest's end.
func Pipe(cid, port uint32, mem guestmem.Source) (*Conn, net.Conn) {
	a, b := net.Pipe()
	return &Conn{Conn: a, CID: cid, Port: port, Mem: mem}, b
}

// Socket returns the connection's unix socket, nil over a net.Pipe (the
// session then writes every reply through its writer goroutine).
func (c *Conn) Socket() *net.UnixConn {
	uc, _ := c.Conn.(*net.UnixConn)
	return uc
}

// SocketPair is Pipe over a unix stream socket pair, as host mode's
// connections are: the kernel buffers what is written, and the session
// writes replies directly when the socket has room.
func SocketPair(cid, port uint32, mem guestmem.Source) (*Conn, net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("sessiontest: socketpair: %w", err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "sessiontest-socket")
		conns[i], err = net.FileConn(f) // dups the fd
		f.Close()
		if err != nil {
			if i == 1 {
				conns[0].Close()
			} else {
				syscall.Close(fds[1])
			}
			return nil, nil, fmt.Errorf("sessiontest: socket pair: %w", err)
		}
	}
	return &Conn{Conn: conns[0], CID: cid, Port: port, Mem: mem}, conns[1], nil
}

// Client speaks the protocol on the guest's end.
type Client struct {
	conn    net.Conn
	lim     protocol.Limits
	wmu     sync.Mutex
	mu      sync.Mutex
	next    uint64
	waiting map[uint64]chan protocol.Frame
	// Notes receives notification frames (host functions, deferred errors).
	Notes chan protocol.Frame
	err   error
	done  chan struct{}
	gate  chan struct{} // non-nil: Hold is on; the reader waits for it to close
}

// NewClient starts reading replies from conn.
func NewClient(conn net.Conn) *Client {
	c := &Client{conn: conn, lim: protocol.Limits{MaxPayload: 1 << 30, MaxSegments: 1 << 20}, waiting: map[uint64]chan protocol.Frame{}, Notes: make(chan protocol.Frame, 1024), done: make(chan struct{})}
	go c.read()
	return c
}

func (c *Client) read() {
	defer close(c.done)
	for {
		c.mu.Lock()
		gate := c.gate
		c.mu.Unlock()
		if gate != nil {
			<-gate
		}
		f, err := protocol.ReadFrame(c.conn, c.lim)
		if err != nil {
			c.mu.Lock()
			c.err = err
			for id, ch := range c.waiting {
				close(ch)
				delete(c.waiting, id)
			}
			c.mu.Unlock()
			return
		}
		if f.Flags&protocol.FlagNotify != 0 {
			c.Notes <- f
			continue
		}
		c.mu.Lock()
		ch, ok := c.waiting[f.RequestID]
		delete(c.waiting, f.RequestID)
		c.mu.Unlock()
		if ok {
			ch <- f
		}
	}
}

// Hold stops reading replies (after the one being read, if any), as a
// client that never reads would; call the returned function to go on.
func (c *Client) Hold() (release func()) {
	gate := make(chan struct{})
	c.mu.Lock()
	c.gate = gate
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		if c.gate == gate {
			c.gate = nil
		}
		c.mu.Unlock()
		close(gate)
	}
}

// Done is closed when the connection has ended.
func (c *Client) Done() <-chan struct{} { return c.done }

// ErrClosed is returned for calls on a connection that ended.
var ErrClosed = errors.New("sessiontest: connection closed")

// ID returns a fresh request id.
func (c *Client) ID() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	return c.next
}

// Send writes a raw frame without waiting.
func (c *Client) Send(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.conn.Write(b)
	return err
}

// Expect registers interest in the reply to id; call before sending.
func (c *Client) Expect(id uint64) <-chan protocol.Frame {
	ch := make(chan protocol.Frame, 1)
	c.mu.Lock()
	c.waiting[id] = ch
	c.mu.Unlock()
	return ch
}

// Wait waits for a reply with a deadline.
func Wait(ch <-chan protocol.Frame, d time.Duration) (protocol.Frame, error) {
	select {
	case f, ok := <-ch:
		if !ok {
			return f, ErrClosed
		}
		return f, nil
	case <-time.After(d):
		return protocol.Frame{}, fmt.Errorf("sessiontest: no reply within %v", d)
	}
}

// Timeout is how long Call waits for a reply.
var Timeout = 10 * time.Second

// Call sends a request (payload = fixed part + tail, segs optional) and
// returns the reply frame.
func (c *Client) Call(op protocol.Opcode, flags protocol.Flags, payload []byte, segs []protocol.Segment) (protocol.Frame, error) {
	id := c.ID()
	ch := c.Expect(id)
	h := protocol.NewHeader(op, id)
	h.Flags = flags
	if err := c.Send(protocol.AppendFrame(nil, h, payload, segs)); err != nil {
		return protocol.Frame{}, err
	}
	return Wait(ch, Timeout)
}

// Status is a reply's CUresult.
func Status(f protocol.Frame) int32 { return f.Status }

// Do calls op with a typed request and decodes a typed reply; it returns
// the status, the reply and the reply's tail.
func Do[Req, Rep any](c *Client, op protocol.Opcode, req *Req, tail []byte) (int32, Rep, []byte, error) {
	var rep Rep
	p := protocol.Append(nil, req)
	p = append(p, tail...)
	f, err := c.Call(op, 0, p, nil)
	if err != nil {
		return 0, rep, nil, err
	}
	if f.Status != 0 {
		return f.Status, rep, nil, nil
	}
	rep, rest, err := protocol.Decode[Rep](f.Payload)
	if err != nil {
		return f.Status, rep, nil, err
	}
	return f.Status, rep, rest, nil
}

// DoSegs is Do with guest-physical segments.
func DoSegs[Req, Rep any](c *Client, op protocol.Opcode, req *Req, segs []protocol.Segment) (int32, Rep, []byte, error) {
	var rep Rep
	f, err := c.Call(op, 0, protocol.Append(nil, req), segs)
	if err != nil {
		return 0, rep, nil, err
	}
	if f.Status != 0 {
		return f.Status, rep, nil, nil
	}
	rep, rest, err := protocol.Decode[Rep](f.Payload)
	return f.Status, rep, rest, err
}

// Hello says HELLO (role library, every feature) and returns the reply's
// status; a session serves nothing before it.
func (c *Client) Hello() (protocol.HelloReply, error) {
	st, rep, _, err := Do[protocol.HelloReq, protocol.HelloReply](c, protocol.OpHello,
		&protocol.HelloReq{Major: uint16(protocol.Major), Minor: uint16(protocol.Minor), Role: protocol.RoleLibrary, Features: ^uint64(0)}, nil)
	if err == nil && st != 0 {
		err = fmt.Errorf("sessiontest: HELLO refused with status %d", st)
	}
	return rep, err
}

// NewHelloClient is NewClient, then HELLO.
func NewHelloClient(conn net.Conn) (*Client, error) {
	c := NewClient(conn)
	if _, err := c.Hello(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close closes the guest's end.
func (c *Client) Close() error { return c.conn.Close() }
