package vm

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// fakeVhostUser is the smallest vhost-user-vsock backend QEMU accepts: it
// answers the requests that want a reply (features, protocol features,
// config with the guest CID, vring base) and ignores the rest, closing any
// fds that come with them. It moves no packets.
type fakeVhostUser struct {
	path string
	ln   *net.UnixListener
	cid  uint64

	mu    sync.Mutex
	seen  []uint32 // request codes in order
	conns []*net.UnixConn
	wg    sync.WaitGroup
}

// vhost-user request codes (QEMU docs/interop/vhost-user.rst).
const (
	vhuGetFeatures         = 1
	vhuGetVringBase        = 11
	vhuGetProtocolFeatures = 15
	vhuGetQueueNum         = 17
	vhuGetConfig           = 24
	vhuGetMaxMemSlots      = 36

	vhuFlagReply     = 1 << 2
	vhuFlagNeedReply = 1 << 3

	protoFeatureConfig = 1 << 9
)

func newFakeVhostUser(t *testing.T, cid uint64) *fakeVhostUser {
	t.Helper()
	p := filepath.Join(t.TempDir(), "vhu.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeVhostUser{path: p, ln: ln, cid: cid}
	f.wg.Add(1)
	go f.serve(t)
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *fakeVhostUser) requests() []uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]uint32(nil), f.seen...)
}

func (f *fakeVhostUser) serve(t *testing.T) {
	defer f.wg.Done()
	for {
		c, err := f.ln.AcceptUnix()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conns = append(f.conns, c)
		f.mu.Unlock()
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer c.Close()
			if err := f.conn(c); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				t.Logf("fake vhost-user: %v", err)
			}
		}()
	}
}

func (f *fakeVhostUser) conn(c *net.UnixConn) error {
	hdr := make([]byte, 12)
	oob := make([]byte, syscall.CmsgSpace(8*4))
	for {
		n, oobn, _, _, err := c.ReadMsgUnix(hdr, oob)
		if err != nil {
			return err
		}
		if n == 0 {
			return io.EOF
		}
		if n < 12 {
			if _, err := io.ReadFull(c, hdr[n:]); err != nil {
				return err
			}
		}
		closeFDs(oob[:oobn])
		req := binary.LittleEndian.Uint32(hdr[0:])
		flags := binary.LittleEndian.Uint32(hdr[4:])
		size := binary.LittleEndian.Uint32(hdr[8:])
		if size > 1<<16 {
			return errors.New("oversized payload")
		}
		body := make([]byte, size)
		if _, err := io.ReadFull(c, body); err != nil {
			return err
		}
		f.mu.Lock()
		f.seen = append(f.seen, req)
		f.mu.Unlock()
		var reply []byte
		u64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
		switch req {
		case vhuGetFeatures:
			reply = u64(1<<32 | 1<<30) // VIRTIO_F_VERSION_1, VHOST_USER_F_PROTOCOL_FEATURES
		case vhuGetProtocolFeatures:
			reply = u64(protoFeatureConfig)
		case vhuGetQueueNum:
			reply = u64(2)
		case vhuGetMaxMemSlots:
			reply = u64(8)
		case vhuGetVringBase:
			reply = append(body[:4:4], 0, 0, 0, 0)
		case vhuGetConfig:
			// struct { u32 offset, size, flags; u8 payload[size] }
			if len(body) < 12 {
				return errors.New("short GET_CONFIG")
			}
			reply = append([]byte{}, body...)
			cfg := reply[12:]
			var cidb [8]byte
			binary.LittleEndian.PutUint64(cidb[:], f.cid)
			copy(cfg, cidb[:])
		default:
			if flags&vhuFlagNeedReply != 0 {
				reply = u64(0)
			}
		}
		if reply == nil {
			continue
		}
		out := binary.LittleEndian.AppendUint32(nil, req)
		out = binary.LittleEndian.AppendUint32(out, 1|vhuFlagReply)
		out = binary.LittleEndian.AppendUint32(out, uint32(len(reply)))
		if _, err := c.Write(append(out, reply...)); err != nil {
			return err
		}
	}
}

func closeFDs(oob []byte) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			syscall.Close(fd)
		}
	}
}
