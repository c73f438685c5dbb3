// Package shmring is the shared-memory transport (FeatureShmRing): a
// request ring and a completion ring, each a single-producer
// single-consumer byte stream carrying the same frames the stream would.
// The layout and rules are protocol/ring.go's. Host mode keeps them in a
// memfd the library shares with the backend, with eventfd doorbells
// (NewServer); a guest keeps them in pages of its RAM that vgpu.ko
// allocated, which the backend sees through its guest-memory mapping page
// by page, with doorbells that travel as vsock frames (NewGuestServer).
//
// An Endpoint is one side: it reads its receive ring and writes its send
// ring as a byte stream (io.Reader, io.Writer), so the session reads and
// writes frames on it exactly as on the socket. The backend is the Server
// side (NewServer); tests play the Client side (NewClient).
//
// Trust: the peer can write any byte of the shared memory at any time. An
// Endpoint keeps its own positions locally and only publishes them; of the
// peer's it reads each once per step and checks it (0 <= tail-head <=
// ring size), and a position that breaks the rule ends the stream with
// ErrCorrupt. Bytes are copied out of the ring before anyone parses them.
// The memfd must be sealed against shrinking (a shorter file would fault
// the backend); the doorbells must be eventfds. Waiting is bounded by the
// spin time, then poll(2) on the doorbell, the endpoint's own wake-up
// eventfd (Close) and, where given, the socket (its end ends the stream).
package shmring

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/protocol"
)

// Errors.
var (
	// ErrCorrupt: the peer broke the ring's rules (a position out of range).
	ErrCorrupt = errors.New("shmring: the peer corrupted the ring")
	// ErrBadSetup: the memfd, eventfds or size of a setup are not acceptable.
	ErrBadSetup = errors.New("shmring: bad ring setup")
)

// ring is one direction. Its bytes are in equal chunks of 1<<shift bytes
// (host mode: one chunk, the whole ring; a guest: its pages, which need
// not be contiguous in the backend's mapping).
type ring struct {
	chunks [][]byte
	shift  uint
	size   uint64
	tail   *uint64 // producer's published position
	head   *uint64 // consumer's published position
}

// copyOut copies len(b) bytes starting at position pos out of the ring.
func (r *ring) copyOut(b []byte, pos uint64) {
	mask := uint64(1)<<r.shift - 1
	for len(b) > 0 {
		off := pos % r.size
		k := copy(b, r.chunks[off>>r.shift][off&mask:])
		b = b[k:]
		pos += uint64(k)
	}
}

// copyIn copies b into the ring starting at position pos.
func (r *ring) copyIn(pos uint64, b []byte) {
	mask := uint64(1)<<r.shift - 1
	for len(b) > 0 {
		off := pos % r.size
		k := copy(r.chunks[off>>r.shift][off&mask:], b)
		b = b[k:]
		pos += uint64(k)
	}
}

// Bell names a doorbell of a guest ring (NewGuestServer).
type Bell uint32

// The doorbells, as protocol.RingBellReq and RingBellNotify name them.
const (
	BellRequests Bell = protocol.RingBellRequests // requests (or, to the guest, completions) were written
	BellSpace    Bell = protocol.RingBellSpace    // ring space was freed
)

// Options tune an endpoint.
type Options struct {
	// Spin is how long a side that found nothing to do polls the ring
	// before it sleeps on its doorbell (0: DefaultSpin(); negative: never
	// spin).
	Spin time.Duration
	// Sock, if >= 0, is a socket whose readability interrupts waits:
	// OnSock is called then, and returns true once the socket has ended
	// (the peer closed it). The endpoint closes Sock when it is released.
	Sock   int
	OnSock func() (ended bool)
}

// Endpoint is one side of a ring pair.
type Endpoint struct {
	mem    []byte
	rx, tx ring
	rxPos  uint64 // consumed (local, authoritative)
	txPos  uint64 // produced (local, authoritative)
	// txHeadSeen is the peer's send-ring head as last read and checked
	// (under wmu; spaceFor).
	txHeadSeen uint64
	carriers   *uint64 // the library's count of fd carriers sent
	taken      *uint64 // request bytes the session took (guest mode)
	mySleep    *uint32
	myWait     *uint32
	peerSlp    *uint32
	peerWt     *uint32
	// rxBell and spaceBell are the eventfds slept on; ringPeer rings the
	// peer's (for data, or for space); fds are closed on release.
	rxBell, spaceBell int
	ringPeer          func(Bell)
	fds               []int
	wake              int
	opt               Options
	// mem is unmapped on release (host mode); onRelease runs then (a
	// guest's: drops its hold on guest memory).
	onRelease func()

	consumed  atomic.Uint64 // rxPos, for other goroutines
	rmu, wmu  sync.Mutex
	use       sync.RWMutex // Read and Write hold it shared; release exclusively
	closed    atomic.Bool
	ended     atomic.Bool // the socket ended
	broken    atomic.Pointer[error]
	wdeadline atomic.Int64 // unix ns; 0: none
	closeOnce sync.Once
	released  bool
}

func u64(mem []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&mem[off])) }
func u32(mem []byte, off int) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }

// DefaultSpin is protocol.RingDefaultSpinNs where the machine has CPUs to
// spare (4 or more), else -1 (no spinning): with two CPUs, a side that
// spins takes the CPU the other side needs to answer it.
func DefaultSpin() time.Duration {
	if runtime.NumCPU() < 4 {
		return -1
	}
	return protocol.RingDefaultSpinNs
}

// CheckSize checks one ring's size.
func CheckSize(n uint64) error {
	if n < protocol.RingMinBytes || n > protocol.RingMaxBytes || bits.OnesCount64(n) != 1 {
		return fmt.Errorf("%w: ring size %d is not a power of two in [%d, %d]", ErrBadSetup, n, protocol.RingMinBytes, protocol.RingMaxBytes)
	}
	return nil
}

// MemfdSize is the memfd length for rings of n bytes each.
func MemfdSize(n uint64) uint64 { return protocol.RingHeaderSize + 2*n }

// NewServer takes the protocol.RingFDs fds of an OpRingSetup (ownership:
// it closes them on error, and the eventfds when the endpoint is released;
// the memfd once mapped) and maps rings of ringBytes each.
func NewServer(fds []int, ringBytes uint64, opt Options) (*Endpoint, error) {
	ep, err := newEndpoint(fds, ringBytes, opt, true)
	if err != nil {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
		if opt.Sock >= 0 {
			_ = unix.Close(opt.Sock)
		}
	}
	return ep, err
}

// NewClient is the library's side (tests): fds in the same order as
// NewServer's; the caller keeps them (NewClient dups what it keeps).
func NewClient(fds []int, ringBytes uint64, opt Options) (*Endpoint, error) {
	d := make([]int, len(fds))
	for i, fd := range fds {
		n, err := unix.Dup(fd)
		if err != nil {
			for _, x := range d[:i] {
				_ = unix.Close(x)
			}
			return nil, err
		}
		d[i] = n
	}
	ep, err := newEndpoint(d, ringBytes, opt, false)
	if err != nil {
		for _, fd := range d {
			_ = unix.Close(fd)
		}
	}
	return ep, err
}

func newEndpoint(fds []int, ringBytes uint64, opt Options, server bool) (*Endpoint, error) {
	if len(fds) != protocol.RingFDs {
		return nil, fmt.Errorf("%w: %d file descriptors, want %d (memfd and 4 eventfds)", ErrBadSetup, len(fds), protocol.RingFDs)
	}
	if err := CheckSize(ringBytes); err != nil {
		return nil, err
	}
	size := MemfdSize(ringBytes)
	if err := checkMemfd(fds[0], size); err != nil {
		return nil, err
	}
	for i, fd := range fds[1:] {
		if err := checkEventfd(fd); err != nil {
			return nil, fmt.Errorf("%w: fd %d: %v", ErrBadSetup, i+1, err)
		}
	}
	mem, err := unix.Mmap(fds[0], 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%w: mmap of %d bytes: %v", ErrBadSetup, size, err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		_ = unix.Munmap(mem)
		return nil, fmt.Errorf("shmring: eventfd: %w", err)
	}
	_ = unix.Close(fds[0])
	shift := uint(bits.TrailingZeros64(ringBytes))
	reqData := [][]byte{mem[protocol.RingHeaderSize : protocol.RingHeaderSize+ringBytes]}
	compData := [][]byte{mem[protocol.RingHeaderSize+ringBytes : size]}
	e := assemble(mem[:protocol.RingHeaderSize], reqData, compData, shift, ringBytes, server, opt)
	e.mem, e.wake = mem, wake
	e.fds = append([]int(nil), fds[1:]...)
	var peerRx, peerSpace int
	if server {
		e.rxBell, e.spaceBell, peerRx, peerSpace = fds[1], fds[2], fds[3], fds[4]
	} else {
		e.rxBell, e.spaceBell, peerRx, peerSpace = fds[3], fds[4], fds[1], fds[2]
	}
	e.ringPeer = func(b Bell) {
		if b == BellSpace {
			ringBell(peerSpace)
		} else {
			ringBell(peerRx)
		}
	}
	return e, nil
}

// assemble builds an endpoint over a header (RingHeaderSize bytes) and the
// two rings' chunks; the caller sets the doorbells and what to release.
func assemble(hdr []byte, reqData, compData [][]byte, shift uint, ringBytes uint64, server bool, opt Options) *Endpoint {
	if opt.Spin == 0 {
		opt.Spin = DefaultSpin()
	}
	req := ring{chunks: reqData, shift: shift, size: ringBytes,
		tail: u64(hdr, protocol.RingOffReqTail), head: u64(hdr, protocol.RingOffReqHead)}
	comp := ring{chunks: compData, shift: shift, size: ringBytes,
		tail: u64(hdr, protocol.RingOffCompTail), head: u64(hdr, protocol.RingOffCompHead)}
	e := &Endpoint{opt: opt, carriers: u64(hdr, protocol.RingOffCarriers), taken: u64(hdr, protocol.RingOffReqTaken)}
	srvSleep, srvWait := u32(hdr, protocol.RingOffSrvSleep), u32(hdr, protocol.RingOffSrvWait)
	cliSleep, cliWait := u32(hdr, protocol.RingOffCliSleep), u32(hdr, protocol.RingOffCliWait)
	if server {
		e.rx, e.tx = req, comp
		e.mySleep, e.myWait, e.peerSlp, e.peerWt = srvSleep, srvWait, cliSleep, cliWait
	} else {
		e.rx, e.tx = comp, req
		e.mySleep, e.myWait, e.peerSlp, e.peerWt = cliSleep, cliWait, srvSleep, srvWait
	}
	// Positions start where the header says (the library zeroes them);
	// ours are local from now on.
	e.rxPos = atomic.LoadUint64(e.rx.head)
	e.txPos = atomic.LoadUint64(e.tx.tail)
	e.txHeadSeen = e.txPos - e.tx.size // no room known: the first write reads the head
	e.consumed.Store(e.rxPos)
	return e
}

// GuestPages is the memory of a ring pair in guest RAM as the backend maps
// it: the header page and the pages of each ring, in ring order, each
// protocol.RingPageSize bytes (NewGuestServer).
type GuestPages struct {
	Header    []byte
	Req, Comp [][]byte
}

// NewGuestServer is the backend's side of rings in guest RAM (a guest's
// OpRingSetup with RingSetupGuestPages): pages as the session mapped them
// (each page of guest RAM checked, and held until release runs); ringPeer
// sends the guest a doorbell (a RingBellNotify frame), and Kick is how the
// guest's doorbells (RingBellReq frames) reach the endpoint. release runs
// once, when the endpoint is closed and nothing reads or writes the pages
// any more.
func NewGuestServer(pg GuestPages, ringBytes uint64, ringPeer func(Bell), release func(), opt Options) (*Endpoint, error) {
	return newGuest(pg, ringBytes, true, ringPeer, release, opt)
}

// NewGuestClient is the library's side of rings in guest RAM (tests; the
// guest's is guest-lib's): ringPeer sends the backend a doorbell, Kick
// takes the backend's.
func NewGuestClient(pg GuestPages, ringBytes uint64, ringPeer func(Bell), opt Options) (*Endpoint, error) {
	return newGuest(pg, ringBytes, false, ringPeer, nil, opt)
}

func newGuest(pg GuestPages, ringBytes uint64, server bool, ringPeer func(Bell), release func(), opt Options) (*Endpoint, error) {
	if err := CheckSize(ringBytes); err != nil {
		return nil, err
	}
	n := ringBytes / protocol.RingPageSize
	if len(pg.Header) < protocol.RingHeaderSize || uint64(len(pg.Req)) != n || uint64(len(pg.Comp)) != n {
		return nil, fmt.Errorf("%w: guest rings of %d bytes need a %d-byte header and %d pages each (got %d, %d and %d)",
			ErrBadSetup, ringBytes, protocol.RingHeaderSize, n, len(pg.Header), len(pg.Req), len(pg.Comp))
	}
	for _, p := range append(append([][]byte(nil), pg.Req...), pg.Comp...) {
		if len(p) != protocol.RingPageSize {
			return nil, fmt.Errorf("%w: a guest ring page of %d bytes (want %d)", ErrBadSetup, len(p), protocol.RingPageSize)
		}
	}
	var fds [3]int
	for i := range fds {
		fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
		if err != nil {
			for _, x := range fds[:i] {
				_ = unix.Close(x)
			}
			return nil, fmt.Errorf("shmring: eventfd: %w", err)
		}
		fds[i] = fd
	}
	opt.Sock, opt.OnSock = -1, nil
	e := assemble(pg.Header, pg.Req, pg.Comp, uint(bits.TrailingZeros64(protocol.RingPageSize)), ringBytes, server, opt)
	e.rxBell, e.spaceBell, e.wake = fds[0], fds[1], fds[2]
	e.fds = fds[:2]
	e.ringPeer, e.onRelease = ringPeer, release
	return e, nil
}

// Kick is a doorbell from the peer (guest rings' endpoints): bytes to
// read (BellRequests) or space to write (BellSpace).
func (e *Endpoint) Kick(b Bell) {
	e.use.RLock()
	defer e.use.RUnlock()
	if e.released {
		return
	}
	if b == BellSpace {
		ringBell(e.spaceBell)
	} else {
		ringBell(e.rxBell)
	}
}

// NoteTaken publishes how many request-ring bytes the session has taken
// in order (protocol.RingOffReqTaken; a guest's library sends a frame on
// the stream only once this reached its tail).
func (e *Endpoint) NoteTaken(pos uint64) {
	e.use.RLock()
	defer e.use.RUnlock()
	if !e.released {
		atomic.StoreUint64(e.taken, pos)
	}
}

// InitMemfd writes a fresh header (tests: the library's part).
func InitMemfd(mem []byte, ringBytes uint64) {
	clear(mem[:protocol.RingHeaderSize])
	*u32(mem, protocol.RingOffMagic) = protocol.RingMagic
	*u32(mem, protocol.RingOffMagic+4) = protocol.RingVersion
	*u64(mem, protocol.RingOffMagic+8) = ringBytes
}

func checkMemfd(fd int, size uint64) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%w: stat: %v", ErrBadSetup, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%w: fd 0 is not a memfd (file mode %#o)", ErrBadSetup, st.Mode)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return fmt.Errorf("%w: fd 0 is not a memfd (F_GET_SEALS: %v)", ErrBadSetup, err)
	}
	const want = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if seals&want != want {
		return fmt.Errorf("%w: memfd seals %#x, want F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL", ErrBadSetup, seals)
	}
	if uint64(st.Size) != size {
		return fmt.Errorf("%w: memfd is %d bytes, want %d (header and two rings)", ErrBadSetup, st.Size, size)
	}
	return nil
}

func checkEventfd(fd int) error {
	link, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return err
	}
	if link != "anon_inode:[eventfd]" {
		return fmt.Errorf("not an eventfd (%s)", link)
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return err
	}
	if fl&unix.O_NONBLOCK == 0 {
		return errors.New("eventfd not created with EFD_NONBLOCK")
	}
	return nil
}

// avail returns the unread bytes of the receive ring.
func (e *Endpoint) avail() (uint64, error) {
	n := atomic.LoadUint64(e.rx.tail) - e.rxPos
	if n > e.rx.size {
		return 0, e.corrupt(fmt.Errorf("%w: receive ring tail %d is %d bytes past our head %d (ring of %d)", ErrCorrupt, e.rxPos+n, n, e.rxPos, e.rx.size))
	}
	return n, nil
}

// space returns the free bytes of the send ring.
func (e *Endpoint) space() (uint64, error) {
	head := atomic.LoadUint64(e.tx.head)
	used := e.txPos - head
	if used > e.tx.size {
		return 0, e.corrupt(fmt.Errorf("%w: send ring head is %d bytes behind our tail %d (ring of %d)", ErrCorrupt, used, e.txPos, e.tx.size))
	}
	e.txHeadSeen = head
	return e.tx.size - used, nil
}

// spaceFor returns the free bytes of the send ring for a write of n: what
// the peer's head last read leaves free when that is enough, without
// reading its cache line again (it only moves forward).
func (e *Endpoint) spaceFor(n int) (uint64, error) {
	if free := e.tx.size - (e.txPos - e.txHeadSeen); free >= uint64(n) {
		return free, nil
	}
	return e.space()
}

func (e *Endpoint) corrupt(err error) error {
	e.broken.CompareAndSwap(nil, &err)
	return *e.broken.Load()
}

func (e *Endpoint) failed() error {
	if p := e.broken.Load(); p != nil {
		return *p
	}
	return nil
}

// ReadPos is how many bytes of the receive ring have been consumed.
func (e *Endpoint) ReadPos() uint64 { return e.consumed.Load() }

// Carriers reads the library's count of fd carriers sent (server side;
// the library's word, so a hint: a count it does not keep only leaves its
// own fds unclaimed).
func (e *Endpoint) Carriers() uint64 {
	e.use.RLock()
	defer e.use.RUnlock()
	if e.released {
		return 0
	}
	return atomic.LoadUint64(e.carriers)
}

// NoteCarrier adds one to the count of fd carriers sent (the library's
// side: after sending a carrier, before writing its frame).
func (e *Endpoint) NoteCarrier() {
	e.use.RLock()
	defer e.use.RUnlock()
	if !e.released {
		atomic.AddUint64(e.carriers, 1)
	}
}

// WritePos is how many bytes have been written to the send ring: the
// position the next Write starts at (an fd carrier names it).
func (e *Endpoint) WritePos() uint64 {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	return e.txPos
}

// Read reads what the receive ring holds (at least one byte), waiting for
// it. It returns io.EOF once the socket ended and the ring is empty.
func (e *Endpoint) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	e.use.RLock()
	defer e.use.RUnlock()
	e.rmu.Lock()
	defer e.rmu.Unlock()
	for {
		if e.closed.Load() || e.released {
			return 0, net.ErrClosed
		}
		n, err := e.avail()
		if err != nil {
			return 0, err
		}
		if n > 0 {
			n = min(n, uint64(len(b)))
			e.rx.copyOut(b[:n], e.rxPos)
			e.rxPos += n
			e.consumed.Store(e.rxPos)
			atomic.StoreUint64(e.rx.head, e.rxPos)
			e.ringIf(e.peerWt, BellSpace)
			return int(n), nil
		}
		if e.ended.Load() {
			return 0, io.EOF
		}
		ready := func() bool { n, err := e.avail(); return n > 0 || err != nil }
		if err := e.wait(e.rxBell, e.mySleep, ready, 0); err != nil {
			return 0, err
		}
	}
}

// Write writes all of b to the send ring, waiting for space as needed.
func (e *Endpoint) Write(b []byte) (int, error) {
	e.use.RLock()
	defer e.use.RUnlock()
	e.wmu.Lock()
	defer e.wmu.Unlock()
	done := 0
	for done < len(b) {
		if e.closed.Load() || e.released {
			return done, net.ErrClosed
		}
		if e.ended.Load() {
			return done, fmt.Errorf("shmring: write: %w", io.ErrClosedPipe)
		}
		free, err := e.spaceFor(len(b) - done)
		if err != nil {
			return done, err
		}
		if free == 0 {
			ready := func() bool { n, err := e.space(); return n > 0 || err != nil }
			if err := e.wait(e.spaceBell, e.myWait, ready, e.wdeadline.Load()); err != nil {
				return done, err
			}
			continue
		}
		n := min(free, uint64(len(b)-done))
		e.tx.copyIn(e.txPos, b[done:done+int(n)])
		e.txPos += n
		atomic.StoreUint64(e.tx.tail, e.txPos)
		e.ringIf(e.peerSlp, BellRequests)
		done += int(n)
	}
	return done, nil
}

// TryWrite writes what of b fits in the send ring now, without waiting,
// and returns how much that was (0 when the ring is full).
func (e *Endpoint) TryWrite(b []byte) (int, error) {
	e.use.RLock()
	defer e.use.RUnlock()
	e.wmu.Lock()
	defer e.wmu.Unlock()
	if e.closed.Load() || e.released {
		return 0, net.ErrClosed
	}
	if e.ended.Load() {
		return 0, fmt.Errorf("shmring: write: %w", io.ErrClosedPipe)
	}
	free, err := e.spaceFor(len(b))
	if err != nil || free == 0 {
		return 0, err
	}
	n := min(free, uint64(len(b)))
	e.tx.copyIn(e.txPos, b[:n])
	e.txPos += n
	atomic.StoreUint64(e.tx.tail, e.txPos)
	e.ringIf(e.peerSlp, BellRequests)
	return int(n), nil
}

// ringIf wakes the peer if its flag says it sleeps (1); the flag becomes 2
// so a burst rings once; the peer clears it when it wakes.
func (e *Endpoint) ringIf(flag *uint32, b Bell) {
	if atomic.LoadUint32(flag) == 1 && atomic.CompareAndSwapUint32(flag, 1, 2) {
		e.ringPeer(b)
	}
}

// ringBell adds 1 to an eventfd. A full counter (the peer's doing) means a
// wake-up is pending anyway; poll first so a peer that made the eventfd
// blocking cannot block us.
func ringBell(fd int) {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	if n, _ := unix.Poll(pfd, 0); n != 1 || pfd[0].Revents&unix.POLLOUT == 0 {
		return
	}
	var one = [8]byte{1}
	_, _ = unix.Write(fd, one[:])
}

// wait spins until ready, then sleeps on bell with flag set. It returns nil
// when ready may have become true, or why it cannot wait any more.
func (e *Endpoint) wait(bell int, flag *uint32, ready func() bool, deadline int64) error {
	if e.opt.Spin > 0 {
		start := time.Now()
		for i := 0; ; i++ {
			if ready() {
				return nil
			}
			if i&63 == 63 && (time.Since(start) > e.opt.Spin || e.closed.Load()) {
				break
			}
			cpuRelax()
		}
	}
	atomic.StoreUint32(flag, 1)
	defer atomic.StoreUint32(flag, 0)
	fds := []unix.PollFd{{Fd: int32(bell), Events: unix.POLLIN}, {Fd: int32(e.wake), Events: unix.POLLIN}, {Fd: -1}}
	if e.opt.Sock >= 0 {
		fds[2] = unix.PollFd{Fd: int32(e.opt.Sock), Events: unix.POLLIN}
	}
	for {
		if ready() {
			return nil
		}
		if e.closed.Load() {
			return net.ErrClosed
		}
		if e.ended.Load() {
			return nil // the caller sees it
		}
		if err := e.failed(); err != nil {
			return err
		}
		timeout := -1
		if deadline != 0 {
			left := time.Until(time.Unix(0, deadline))
			if left <= 0 {
				return os.ErrDeadlineExceeded
			}
			timeout = int(left/time.Millisecond) + 1
		}
		for i := range fds {
			fds[i].Revents = 0
		}
		if _, err := unix.Poll(fds, timeout); err != nil && err != unix.EINTR {
			return fmt.Errorf("shmring: poll: %w", err)
		}
		if fds[0].Revents&unix.POLLIN != 0 {
			var b [8]byte
			_, _ = unix.Read(bell, b[:])
		}
		if fds[0].Revents&(unix.POLLERR|unix.POLLNVAL) != 0 {
			return e.corrupt(fmt.Errorf("%w: doorbell eventfd failed (revents %#x)", ErrCorrupt, fds[0].Revents))
		}
		if fds[2].Revents != 0 && e.opt.OnSock != nil && e.opt.OnSock() {
			e.ended.Store(true)
		}
		if atomic.LoadUint32(flag) == 2 {
			atomic.StoreUint32(flag, 1) // rung: sleep again if still not ready
		}
	}
}

// SetWriteDeadline bounds how long Write waits for space (zero: forever).
func (e *Endpoint) SetWriteDeadline(t time.Time) {
	if t.IsZero() {
		e.wdeadline.Store(0)
	} else {
		e.wdeadline.Store(t.UnixNano())
	}
}

// Ended reports whether the socket ended.
func (e *Endpoint) Ended() bool { return e.ended.Load() }

// Close wakes every waiter, waits until Read and Write have returned, and
// releases the mapping and the fds.
func (e *Endpoint) Close() error {
	e.closeOnce.Do(func() {
		e.closed.Store(true)
		var one = [8]byte{1}
		_, _ = unix.Write(e.wake, one[:])
		e.use.Lock()
		e.released = true
		if e.mem != nil {
			_ = unix.Munmap(e.mem)
			e.mem = nil
		}
		for _, fd := range append(e.fds, e.wake) {
			_ = unix.Close(fd)
		}
		if e.onRelease != nil {
			e.onRelease()
		}
		if e.opt.Sock >= 0 {
			_ = unix.Close(e.opt.Sock)
		}
		e.use.Unlock()
	})
	return nil
}
