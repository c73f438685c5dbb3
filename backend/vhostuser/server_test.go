package vhostuser_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/vhostuser"
	"github.com/vgpu-project/vgpu/backend/virtq"
	"github.com/vgpu-project/vgpu/backend/virtq/virtqtest"
	"github.com/vgpu-project/vgpu/backend/vsock"
)

// Wire numbers (docs/interop/vhost-user.rst), repeated here so the test
// checks the server against the spec rather than against itself.
const (
	getFeatures         = 1
	setFeatures         = 2
	setOwner            = 3
	setMemTable         = 5
	setVringNum         = 8
	setVringAddr        = 9
	setVringBase        = 10
	getVringBase        = 11
	setVringKick        = 12
	setVringCall        = 13
	setVringErr         = 14
	getProtocolFeatures = 15
	setProtocolFeatures = 16
	getQueueNum         = 17
	setVringEnable      = 18
	getConfig           = 24
	resetOwner          = 4

	needReply = 1 << 3
	replyFlag = 1 << 2

	protoAll  = 1<<0 | 1<<3 | 1<<9 // MQ, REPLY_ACK, CONFIG
	userBase  = 0x7f1200000000     // QEMU's virtual address of guest RAM
	ramBase   = guestmem.GPA(0)
	ramSize   = 16 << 20
	guestCID  = 7
	testPort  = 5000
	queueSize = 64
)

// fakeQEMU is the front-end side of a vhost-user connection.
type fakeQEMU struct {
	t *testing.T
	c *net.UnixConn
}

func dialQEMU(t *testing.T, path string) *fakeQEMU {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &fakeQEMU{t: t, c: c}
}

func (q *fakeQEMU) send(req, flags uint32, body []byte, fds ...int) {
	q.t.Helper()
	b := make([]byte, 12+len(body))
	binary.LittleEndian.PutUint32(b[0:], req)
	binary.LittleEndian.PutUint32(b[4:], 1|flags)
	binary.LittleEndian.PutUint32(b[8:], uint32(len(body)))
	copy(b[12:], body)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := q.c.WriteMsgUnix(b, oob, nil); err != nil {
		q.t.Fatalf("send request %d: %v", req, err)
	}
}

// recv reads a reply; it returns an error if the server closed.
func (q *fakeQEMU) recv(req uint32) ([]byte, error) {
	q.t.Helper()
	q.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var h [12]byte
	if _, err := io.ReadFull(q.c, h[:]); err != nil {
		return nil, err
	}
	if got := binary.LittleEndian.Uint32(h[0:]); got != req {
		q.t.Fatalf("reply to request %d, want %d", got, req)
	}
	if flags := binary.LittleEndian.Uint32(h[4:]); flags != 1|replyFlag {
		q.t.Fatalf("reply flags %#x", flags)
	}
	body := make([]byte, binary.LittleEndian.Uint32(h[8:]))
	_, err := io.ReadFull(q.c, body)
	return body, err
}

func (q *fakeQEMU) get(req uint32, body []byte) []byte {
	q.t.Helper()
	q.send(req, 0, body)
	b, err := q.recv(req)
	if err != nil {
		q.t.Fatalf("request %d: %v", req, err)
	}
	return b
}

func (q *fakeQEMU) getU64(req uint32) uint64 {
	q.t.Helper()
	b := q.get(req, nil)
	if len(b) != 8 {
		q.t.Fatalf("request %d: %d-byte reply", req, len(b))
	}
	return binary.LittleEndian.Uint64(b)
}

// ack sends a request with need_reply and returns the REPLY_ACK value.
func (q *fakeQEMU) ack(req uint32, body []byte, fds ...int) uint64 {
	q.t.Helper()
	q.send(req, needReply, body, fds...)
	b, err := q.recv(req)
	if err != nil {
		q.t.Fatalf("request %d: no ack: %v", req, err)
	}
	if len(b) != 8 {
		q.t.Fatalf("request %d: %d-byte ack", req, len(b))
	}
	return binary.LittleEndian.Uint64(b)
}

func u64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func state(idx, num uint32) []byte {
	return binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, idx), num)
}

// handshake does what QEMU 7.2 does at realize time.
func (q *fakeQEMU) handshake() uint64 {
	q.t.Helper()
	feat := q.getU64(getFeatures)
	if q.getU64(getProtocolFeatures)&protoAll != protoAll {
		q.t.Fatal("MQ, REPLY_ACK or CONFIG not offered")
	}
	if got := q.ack(setProtocolFeatures, u64(protoAll)); got != 0 {
		q.t.Fatalf("SET_PROTOCOL_FEATURES nack %d", got)
	}
	if n := q.getU64(getQueueNum); n != 2 {
		q.t.Fatalf("GET_QUEUE_NUM = %d", n)
	}
	if got := q.ack(setOwner, nil); got != 0 {
		q.t.Fatal("SET_OWNER nack")
	}
	return feat
}

// vm is a guest with two rings, set up through the server.
type vm struct {
	mem    *virtqtest.Memory
	rx, tx *virtqtest.Driver
	rxBufs map[uint16][][]byte
}

func newVM(t *testing.T) *vm {
	t.Helper()
	mem, err := virtqtest.NewMemory(ramBase, ramSize)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mem.Close)
	v := &vm{mem: mem, rxBufs: map[uint16][][]byte{}}
	if v.rx, err = virtqtest.NewDriver(mem, queueSize, true); err != nil {
		t.Fatal(err)
	}
	if v.tx, err = virtqtest.NewDriver(mem, queueSize, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.rx.Close)
	t.Cleanup(v.tx.Close)
	for i := 0; i < 8; i++ {
		head, b, _ := v.rx.Add(nil, []int{vsock.HeaderSize, 4096})
		v.rxBufs[head] = b
	}
	return v
}

func uaddr(g guestmem.GPA) uint64 { return userBase + uint64(g-ramBase) }

// setup sends the memory table and both rings (what QEMU does at
// vhost_dev_start).
func (q *fakeQEMU) setup(v *vm, features uint64) {
	q.t.Helper()
	if got := q.ack(setFeatures, u64(features)); got != 0 {
		q.t.Fatal("SET_FEATURES nack")
	}
	mt := binary.LittleEndian.AppendUint32(nil, 1)
	mt = binary.LittleEndian.AppendUint32(mt, 0)
	for _, x := range []uint64{uint64(ramBase), ramSize, userBase, 0} {
		mt = binary.LittleEndian.AppendUint64(mt, x)
	}
	if got := q.ack(setMemTable, mt, v.mem.FD); got != 0 {
		q.t.Fatal("SET_MEM_TABLE nack")
	}
	for i, d := range []*virtqtest.Driver{v.rx, v.tx} {
		idx := uint32(i)
		if q.ack(setVringNum, state(idx, queueSize)) != 0 || q.ack(setVringBase, state(idx, 0)) != 0 {
			q.t.Fatal("vring num/base nack")
		}
		addr := binary.LittleEndian.AppendUint32(nil, idx)
		addr = binary.LittleEndian.AppendUint32(addr, 0)
		for _, x := range []uint64{uaddr(d.DescGPA), uaddr(d.UsedGPA), uaddr(d.AvailGPA), 0} {
			addr = binary.LittleEndian.AppendUint64(addr, x)
		}
		if q.ack(setVringAddr, addr) != 0 {
			q.t.Fatal("SET_VRING_ADDR nack")
		}
		if q.ack(setVringKick, u64(uint64(idx)), d.Kick.FD()) != 0 || q.ack(setVringCall, u64(uint64(idx)), d.Call.FD()) != 0 {
			q.t.Fatal("kick/call nack")
		}
		if q.ack(setVringEnable, state(idx, 1)) != 0 {
			q.t.Fatal("SET_VRING_ENABLE nack")
		}
	}
}

func serve(t *testing.T) (*vhostuser.VsockVM, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "vm.sock")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v, err := vhostuser.ServeVsock(ctx, vhostuser.VsockConfig{SocketPath: path, GuestCID: guestCID, Port: testPort, Logger: newTestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v, path
}

// request sends a vsock REQUEST from the guest and waits for the reply op.
func (v *vm) request(t *testing.T, guestPort uint32) uint16 {
	t.Helper()
	h := vsock.Header{SrcCID: guestCID, DstCID: 2, SrcPort: guestPort, DstPort: testPort, Type: vsock.TypeStream, Op: vsock.OpRequest, BufAlloc: 65536}
	b := make([]byte, vsock.HeaderSize)
	h.Encode(b)
	v.tx.Add([][]byte{b}, nil)
	deadline := time.After(10 * time.Second)
	for {
		for _, u := range v.rx.Collect() {
			var r vsock.Header
			r.Decode(v.rxBufs[u.Head][0])
			v.rx.Reuse(u.Head)
			if r.DstPort == guestPort {
				return r.Op
			}
		}
		select {
		case <-v.rx.Call.C():
		case <-time.After(5 * time.Millisecond):
		case <-deadline:
			t.Fatal("no reply to REQUEST")
		}
	}
}

func TestSessionLifecycle(t *testing.T) {
	srv, path := serve(t)
	q := dialQEMU(t, path)
	feat := q.handshake()
	for _, bit := range []uint{32, 30, 29, 28} {
		if feat&(1<<bit) == 0 {
			t.Fatalf("feature bit %d not offered (%#x)", bit, feat)
		}
	}
	cfg := q.get(getConfig, append(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 0), 8), 0), make([]byte, 8)...))
	if len(cfg) != 20 || binary.LittleEndian.Uint64(cfg[12:]) != guestCID {
		t.Fatalf("GET_CONFIG = %x", cfg)
	}
	v := newVM(t)
	q.setup(v, 1<<32|1<<30|1<<29|1<<28)

	// The device runs: a guest connection arrives at the listener.
	if op := v.request(t, 700); op != vsock.OpResponse {
		t.Fatalf("REQUEST answered with %s", vsock.OpName(op))
	}
	c, err := srv.Listener.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if c.Memory() == nil {
		t.Fatal("conn has no guest memory")
	}
	tbl, err := c.Memory().Acquire()
	if err != nil {
		t.Fatal(err)
	}
	if b, err := tbl.Slice(v.tx.DescGPA, 16); err != nil || len(b) != 16 {
		t.Fatalf("guest memory through the conn: %v", err)
	}
	tbl.Release()

	// An unprivileged guest port is refused.
	if op := v.request(t, 4000); op != vsock.OpRST {
		t.Fatalf("unprivileged REQUEST answered with %s", vsock.OpName(op))
	}

	// GET_VRING_BASE stops the device: where rx/tx stopped, conns reset.
	b := q.get(getVringBase, state(1, 0))
	if got := binary.LittleEndian.Uint32(b[4:]); got != uint32(v.tx.AvailIdx()) {
		t.Fatalf("tx base %d, want %d", got, v.tx.AvailIdx())
	}
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, vsock.ErrDeviceStopped) {
		t.Fatalf("Read after GET_VRING_BASE = %v", err)
	}

	// QEMU goes away and comes back: a fresh session on the same socket.
	q.c.Close()
	q2 := dialQEMU(t, path)
	q2.handshake()
	v2 := newVM(t)
	q2.setup(v2, 1<<32|1<<30|1<<29)
	if op := v2.request(t, 701); op != vsock.OpResponse {
		t.Fatalf("after reconnect REQUEST answered with %s", vsock.OpName(op))
	}
	if _, err := srv.Listener.Accept(); err != nil {
		t.Fatal(err)
	}
}

// TestMemTableSwap sends a second memory table while the device runs: the
// device restarts over it without losing the connection.
func TestMemTableSwap(t *testing.T) {
	srv, path := serve(t)
	q := dialQEMU(t, path)
	q.handshake()
	v := newVM(t)
	q.setup(v, 1<<32|1<<30|1<<29)
	if op := v.request(t, 702); op != vsock.OpResponse {
		t.Fatal("no RESPONSE")
	}
	c, _ := srv.Listener.Accept()
	mt := binary.LittleEndian.AppendUint32(nil, 1)
	mt = binary.LittleEndian.AppendUint32(mt, 0)
	for _, x := range []uint64{uint64(ramBase), ramSize, userBase, 0} {
		mt = binary.LittleEndian.AppendUint64(mt, x)
	}
	if got := q.ack(setMemTable, mt, v.mem.FD); got != 0 {
		t.Fatal("second SET_MEM_TABLE nack")
	}
	go c.Write([]byte("still here"))
	deadline := time.After(10 * time.Second)
	for {
		for _, u := range v.rx.Collect() {
			var r vsock.Header
			r.Decode(v.rxBufs[u.Head][0])
			if r.Op == vsock.OpRW && string(v.rxBufs[u.Head][1][:r.Len]) == "still here" {
				return
			}
			v.rx.Reuse(u.Head)
		}
		select {
		case <-v.rx.Call.C():
		case <-time.After(5 * time.Millisecond):
		case <-deadline:
			t.Fatal("connection did not survive the memory table change")
		}
	}
}

// badMessages are requests the server must refuse. closes means the
// connection ends (a request with its own reply cannot be nacked).
var badMessages = []struct {
	name   string
	req    uint32
	flags  uint32
	body   []byte
	fds    int
	closes bool
}{
	{"unknown request", 99, needReply, nil, 0, false},
	{"wrong version", getFeatures, 2 &^ 1, nil, 0, true},
	{"reply flag from front-end", setOwner, replyFlag | needReply, nil, 0, true},
	{"GET_FEATURES with a body", getFeatures, 0, make([]byte, 8), 0, true},
	{"SET_VRING_NUM short body", setVringNum, needReply, make([]byte, 4), 0, false},
	{"SET_VRING_NUM bad index", setVringNum, needReply, state(5, 64), 0, false},
	{"SET_VRING_NUM not a power of two", setVringNum, needReply, state(0, 3), 0, false},
	{"SET_VRING_NUM too big", setVringNum, needReply, state(0, 65536), 0, false},
	{"SET_VRING_BASE beyond 16 bits", setVringBase, needReply, state(0, 70000), 0, false},
	{"SET_VRING_KICK without fd", setVringKick, needReply, u64(0), 0, false},
	{"SET_VRING_KICK polling mode", setVringKick, needReply, u64(1 << 8), 0, false},
	{"SET_VRING_CALL unknown bits", setVringCall, needReply, u64(1 << 20), 0, false},
	{"SET_VRING_CALL extra fd", setVringCall, needReply, u64(1 << 8), 1, false},
	{"SET_MEM_TABLE no regions", setMemTable, needReply, make([]byte, 8), 0, false},
	{"SET_MEM_TABLE fd count", setMemTable, needReply, memTable(2), 1, false},
	{"SET_MEM_TABLE nine regions", setMemTable, needReply, memTable(9), 8, false},
	{"SET_MEM_TABLE region past file end", setMemTable, needReply, memTable(1), 1, false},
	{"SET_FEATURES not offered", setFeatures, needReply, u64(1 << 40), 0, false},
	{"SET_PROTOCOL_FEATURES not offered", setProtocolFeatures, needReply, u64(1 << 5), 0, false},
	{"SET_VRING_ENABLE 2", setVringEnable, needReply, state(0, 2), 0, false},
	{"GET_CONFIG too big", getConfig, 0, append(state(0, 300), make([]byte, 4)...), 0, true},
	{"GET_CONFIG beyond config space", getConfig, 0, append(append(state(4, 8), 0, 0, 0, 0), make([]byte, 8)...), 0, true},
	{"GET_VRING_BASE bad index", getVringBase, 0, state(9, 0), 0, true},
}

// memTable returns a SET_MEM_TABLE body of n regions of 32 MiB each (more
// than the 16 MiB memfd the tests pass).
func memTable(n int) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(n))
	b = binary.LittleEndian.AppendUint32(b, 0)
	for i := 0; i < n; i++ {
		for _, x := range []uint64{uint64(i) << 30, 32 << 20, userBase + uint64(i)<<30, 0} {
			b = binary.LittleEndian.AppendUint64(b, x)
		}
	}
	return b
}

func TestBadMessages(t *testing.T) {
	_, path := serve(t)
	for _, tc := range badMessages {
		t.Run(tc.name, func(t *testing.T) {
			q := dialQEMU(t, path)
			q.handshake()
			var fds []int
			for i := 0; i < tc.fds; i++ {
				fd, err := unix.MemfdCreate("bad", unix.MFD_CLOEXEC)
				if err != nil {
					t.Fatal(err)
				}
				unix.Ftruncate(fd, 16<<20)
				defer unix.Close(fd)
				fds = append(fds, fd)
			}
			q.send(tc.req, tc.flags, tc.body, fds...)
			if tc.closes {
				if _, err := q.recv(tc.req); err == nil {
					t.Fatal("server answered instead of closing")
				}
				return
			}
			b, err := q.recv(tc.req)
			if err != nil || len(b) != 8 || binary.LittleEndian.Uint64(b) == 0 {
				t.Fatalf("want a failure ack, got %x, %v", b, err)
			}
			// The session goes on.
			if q.getU64(getQueueNum) != 2 {
				t.Fatal("session broken after a refused request")
			}
		})
	}
}

func TestOversizedMessageCloses(t *testing.T) {
	_, path := serve(t)
	q := dialQEMU(t, path)
	h := make([]byte, 12)
	binary.LittleEndian.PutUint32(h[0:], setOwner)
	binary.LittleEndian.PutUint32(h[4:], 1)
	binary.LittleEndian.PutUint32(h[8:], 1<<20)
	q.c.Write(h)
	q.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := q.c.Read(make([]byte, 1)); err == nil {
		t.Fatal("server kept a connection that announced a 1 MiB body")
	}
}

// TestRingOutsideMemory: ring addresses QEMU cannot translate are refused
// when the ring would start, and the session goes on.
func TestRingOutsideMemory(t *testing.T) {
	_, path := serve(t)
	q := dialQEMU(t, path)
	q.handshake()
	v := newVM(t)
	v.tx.DescGPA = ramSize + 0x1000 // not in the table
	q.send(setFeatures, 0, u64(1<<32|1<<30))
	mt := binary.LittleEndian.AppendUint32(nil, 1)
	mt = binary.LittleEndian.AppendUint32(mt, 0)
	for _, x := range []uint64{uint64(ramBase), ramSize, userBase, 0} {
		mt = binary.LittleEndian.AppendUint64(mt, x)
	}
	if q.ack(setMemTable, mt, v.mem.FD) != 0 {
		t.Fatal("SET_MEM_TABLE nack")
	}
	var last uint64
	for i, d := range []*virtqtest.Driver{v.rx, v.tx} {
		idx := uint32(i)
		q.ack(setVringNum, state(idx, queueSize))
		addr := binary.LittleEndian.AppendUint32(nil, idx)
		addr = binary.LittleEndian.AppendUint32(addr, 0)
		for _, x := range []uint64{uaddr(d.DescGPA), uaddr(d.UsedGPA), uaddr(d.AvailGPA), 0} {
			addr = binary.LittleEndian.AppendUint64(addr, x)
		}
		q.ack(setVringAddr, addr)
		q.ack(setVringCall, u64(uint64(idx)), d.Call.FD())
		last = q.ack(setVringKick, u64(uint64(idx)), d.Kick.FD())
	}
	if last == 0 {
		t.Fatal("device started with a ring outside guest memory")
	}
	if q.getU64(getQueueNum) != 2 {
		t.Fatal("session broken")
	}
}

func TestListenRefusesLiveSocket(t *testing.T) {
	_, path := serve(t)
	if _, err := vhostuser.Listen(path, nil, nil); err == nil {
		t.Fatal("second Listen on a served socket succeeded")
	}
}

var _ = virtq.ErrBroken
var _ = syscall.EINVAL

// Issue 17: a front-end must own the device (SET_OWNER) before it sets
// anything up, and GET_CONFIG is served only once VHOST_USER_PROTOCOL_F_CONFIG
// was negotiated.
func TestOwnerAndConfigRules(t *testing.T) {
	_, path := serve(t)
	getCfg := append(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 0), 8), 0), make([]byte, 8)...)

	q := dialQEMU(t, path)
	q.getU64(getFeatures) // the negotiation is allowed before SET_OWNER
	if got := q.ack(setProtocolFeatures, u64(protoAll)); got != 0 {
		t.Fatalf("SET_PROTOCOL_FEATURES: %d", got)
	}
	for _, req := range []struct {
		req  uint32
		body []byte
	}{{setVringNum, state(0, 64)}, {setFeatures, u64(0)}, {setVringEnable, state(0, 1)}, {resetOwner, nil}} {
		if got := q.ack(req.req, req.body); got == 0 {
			t.Fatalf("request %d before SET_OWNER was accepted", req.req)
		}
	}
	q.send(getConfig, 0, getCfg)
	if _, err := q.recv(getConfig); err == nil {
		t.Fatal("GET_CONFIG before SET_OWNER was answered")
	}

	// Owner, but CONFIG not negotiated.
	q = dialQEMU(t, path)
	q.getU64(getFeatures)
	if got := q.ack(setProtocolFeatures, u64(protoAll&^(1<<9))); got != 0 {
		t.Fatalf("SET_PROTOCOL_FEATURES: %d", got)
	}
	if got := q.ack(setOwner, nil); got != 0 {
		t.Fatal("SET_OWNER nack")
	}
	if got := q.ack(setVringNum, state(0, 64)); got != 0 {
		t.Fatal("SET_VRING_NUM after SET_OWNER refused")
	}
	q.send(getConfig, 0, getCfg)
	if _, err := q.recv(getConfig); err == nil {
		t.Fatal("GET_CONFIG without PROTOCOL_F_CONFIG was answered")
	}

	// The whole handshake (CONFIG negotiated): served.
	q = dialQEMU(t, path)
	q.handshake()
	if cfg := q.get(getConfig, getCfg); len(cfg) != 20 {
		t.Fatalf("GET_CONFIG after the handshake: %d bytes", len(cfg))
	}
}
