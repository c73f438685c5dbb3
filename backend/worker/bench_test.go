package worker_test

import (
	"context"
	"net"
	"testing"

	"github.com/vgpu-project/vgpu/backend/hostmode"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/backend/transport"
	"github.com/vgpu-project/vgpu/protocol"
)

// BenchmarkPing is one synchronous call's round trip from a client (this
// process) to a session in a worker process and back:
//
//	handed   the client's unix socket handed to the worker (host mode,
//	         streams from vgpu front): no hop
//	proxied  the stream copied over a socketpair by the manager (the vsock
//	         streams vgpu serve serves itself): the manager's hop
//
// On a busy 2-core machine both are dominated by cross-process wakeups
// (30-70 us, noisy); `vgpu bench calls` in host mode measures the same
// with the real library (docs/RELIABILITY.md).
func BenchmarkPing(b *testing.B) {
	ping := func(b *testing.B, c *sessiontest.Client) {
		b.Helper()
		for i := 0; i < 10; i++ { // warm up
			c.Call(protocol.OpPing, 0, nil, nil)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if f, err := c.Call(protocol.OpPing, 0, nil, nil); err != nil || f.Status != 0 {
				b.Fatal(err)
			}
		}
	}
	b.Run("handed", func(b *testing.B) {
		m := manager(b, "process")
		a, c := unixPair(b)
		go m.ServeConn(context.Background(), hostmode.NewConn(a, "bench", hostmode.Options{}), 1)
		cl := sessiontest.NewClient(c)
		defer cl.Close()
		ping(b, cl)
	})
	b.Run("proxied", func(b *testing.B) {
		m := manager(b, "process")
		bc, gc := sessiontest.Pipe(3, 1023, nil)
		var conn transport.Conn = bc
		go m.ServeConn(context.Background(), conn, 1)
		cl := sessiontest.NewClient(gc)
		defer cl.Close()
		ping(b, cl)
	})
}

func unixPair(b *testing.B) (*net.UnixConn, net.Conn) {
	b.Helper()
	dir := b.TempDir()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: dir + "/s", Net: "unix"})
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("unix", dir+"/s")
	if err != nil {
		b.Fatal(err)
	}
	a, err := ln.AcceptUnix()
	if err != nil {
		b.Fatal(err)
	}
	return a, c
}
