package kvsock

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/mdlayher/vsock"

	"github.com/vgpu-project/vgpu/backend/guestmem"
)

// fakeListener hands out net.Pipe conns with vsock peer addresses.
type fakeListener struct {
	conns chan net.Conn
	done  chan struct{}
}

type addrConn struct {
	net.Conn
	remote net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.remote }

func (f *fakeListener) Accept() (net.Conn, error) {
	select {
	case c := <-f.conns:
		return c, nil
	case <-f.done:
		return nil, net.ErrClosed
	}
}
func (f *fakeListener) Close() error   { close(f.done); return nil }
func (f *fakeListener) Addr() net.Addr { return &vsock.Addr{ContextID: 2, Port: 5000} }

func TestPortPolicy(t *testing.T) {
	fl := &fakeListener{conns: make(chan net.Conn, 8), done: make(chan struct{})}
	mem, err := guestmem.FromMemory([]guestmem.Region{{GuestPhys: 0, Size: 4096, Host: make([]byte, 4096)}})
	if err != nil {
		t.Fatal(err)
	}
	l := newListener(fl, Config{Port: 5000, RequirePrivileged: true, Memory: func(cid uint32) guestmem.Source {
		if cid == 3 {
			return mem
		}
		return nil
	}})
	var peers []net.Conn
	push := func(a net.Addr) {
		ours, theirs := net.Pipe()
		peers = append(peers, theirs)
		fl.conns <- addrConn{ours, a}
	}
	push(&vsock.Addr{ContextID: 3, Port: 40000})          // unprivileged: refused
	push(&net.TCPAddr{IP: net.IPv4(1, 2, 3, 4), Port: 1}) // not vsock: refused
	push(&vsock.Addr{ContextID: 3, Port: 1023})           // accepted
	push(&vsock.Addr{ContextID: 4, Port: 5})              // accepted, no memory
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if c.PeerCID() != 3 || c.PeerPort() != 1023 || c.Memory() == nil || c.VM() != "cid:3" {
		t.Fatalf("conn %d:%d has memory %v vm %s", c.PeerCID(), c.PeerPort(), c.Memory() != nil, c.VM())
	}
	c2, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if c2.PeerCID() != 4 || c2.Memory() != nil {
		t.Fatalf("second conn %d has memory %v", c2.PeerCID(), c2.Memory() != nil)
	}
	if l.Refused() != 2 {
		t.Fatalf("Refused = %d", l.Refused())
	}
	// The refused peers see their connection closed.
	peers[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := peers[0].Read(make([]byte, 1)); err == nil {
		t.Fatal("refused connection still open")
	}
	l.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close = %v", err)
	}
}

// TestKernelVsock needs /dev/vsock and a loopback or vhost transport.
func TestKernelVsock(t *testing.T) {
	if _, err := os.Stat("/dev/vsock"); err != nil {
		t.Skip("no /dev/vsock on this host")
	}
	l, err := Listen(Config{Port: 0x7668})
	if err != nil {
		t.Skipf("cannot listen on host vsock: %v", err)
	}
	defer l.Close()
	done := make(chan error, 1)
	go func() {
		c, err := vsock.Dial(1, 0x7668, nil) // VMADDR_CID_LOCAL, needs vsock_loopback
		if err == nil {
			c.Write([]byte("x"))
			c.Close()
		}
		done <- err
	}()
	if err := <-done; err != nil {
		t.Skipf("no local vsock transport: %v", err)
	}
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.PeerPort() == 0 || c.Memory() != nil {
		t.Fatalf("conn port %d has memory %v", c.PeerPort(), c.Memory() != nil)
	}
}
