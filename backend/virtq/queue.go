package virtq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/vgpu-project/vgpu/backend/guestmem"
)

// Ring layout constants (virtio 1.x, 2.7).
const (
	descSize     = 16
	usedElemSize = 8

	DescFlagNext     = 1 // VIRTQ_DESC_F_NEXT
	DescFlagWrite    = 2 // VIRTQ_DESC_F_WRITE
	DescFlagIndirect = 4 // VIRTQ_DESC_F_INDIRECT

	availFlagNoInterrupt = 1 // VIRTQ_AVAIL_F_NO_INTERRUPT
	usedFlagNoNotify     = 1 // VIRTQ_USED_F_NO_NOTIFY

	// MaxSize is the largest split queue size (2^15).
	MaxSize = 32768
	// maxChainBytes caps the total length of one chain: used->len is 32 bits.
	maxChainBytes = 1<<32 - 1
)

// Feature bits the queue implementation understands.
const (
	FeatureIndirectDesc = 28 // VIRTIO_RING_F_INDIRECT_DESC
	FeatureEventIdx     = 29 // VIRTIO_RING_F_EVENT_IDX
)

// ErrBroken is wrapped by every error a queue returns after a protocol
// violation; the first cause follows it in the message.
var ErrBroken = errors.New("virtq: queue broken by guest")

// ChainError describes a malformed descriptor chain.
type ChainError struct {
	Queue  string
	Head   uint16
	Reason string
}

func (e *ChainError) Error() string {
	return fmt.Sprintf("virtq %s: descriptor chain at head %d: %s", e.Queue, e.Head, e.Reason)
}

// Unwrap lets errors.Is(err, ErrBroken) hold for chain errors.
func (e *ChainError) Unwrap() error { return ErrBroken }

// Config describes a queue as the driver set it up.
type Config struct {
	Name      string       // for errors and logs, e.g. "rx"
	Size      uint16       // number of descriptors, a power of two <= MaxSize
	Desc      guestmem.GPA // descriptor table
	Avail     guestmem.GPA // available (driver) ring
	Used      guestmem.GPA // used (device) ring
	LastAvail uint16       // next avail index to consume (SET_VRING_BASE)
	EventIdx  bool         // VIRTIO_RING_F_EVENT_IDX negotiated
	Indirect  bool         // VIRTIO_RING_F_INDIRECT_DESC negotiated
	// UsedIdx is the used index to start from. When ReadUsedIdx is true it is
	// read from the ring instead (vhost-user: the ring already holds it).
	UsedIdx     uint16
	ReadUsedIdx bool
}

// Chain is one descriptor chain taken from the available ring. Out holds the
// device-readable buffers in order, In the device-writable ones. The slices
// point into guest memory and are valid until the chain is pushed back and
// the table is released; Next reuses a Chain's slices.
type Chain struct {
	Head   uint16
	Out    [][]byte
	In     [][]byte
	OutLen uint64
	InLen  uint64
}

// Queue is the device side of one split virtqueue.
type Queue struct {
	cfg   Config
	mem   *guestmem.Table
	desc  []byte
	avail []byte
	used  []byte

	lastAvail  uint16
	usedIdx    uint16
	usedFlags  uint16
	signalled  uint16 // used idx at the last call (event idx)
	signalSet  bool
	notifyOff  bool
	broken     error
	call       atomic.Pointer[Notifier]
	kick       *Notifier
	pendingUse bool
}

// New validates cfg against mem and returns a queue. It takes its own
// reference on mem (released by Close). kick and call may be nil (tests,
// polling); the queue owns neither.
func New(mem *guestmem.Table, cfg Config, kick, call *Notifier) (*Queue, error) {
	if cfg.Size == 0 || cfg.Size > MaxSize || cfg.Size&(cfg.Size-1) != 0 {
		return nil, fmt.Errorf("virtq %s: size %d is not a power of two in 1..%d", cfg.Name, cfg.Size, MaxSize)
	}
	if cfg.Desc%16 != 0 || cfg.Avail%2 != 0 || cfg.Used%4 != 0 {
		return nil, fmt.Errorf("virtq %s: ring addresses desc %#x avail %#x used %#x are misaligned (want 16/2/4)", cfg.Name, cfg.Desc, cfg.Avail, cfg.Used)
	}
	n := uint64(cfg.Size)
	q := &Queue{cfg: cfg, lastAvail: cfg.LastAvail, kick: kick}
	var err error
	if q.desc, err = mem.Slice(cfg.Desc, descSize*n); err != nil {
		return nil, fmt.Errorf("virtq %s: descriptor table: %w", cfg.Name, err)
	}
	// avail: flags, idx, ring[n], used_event.
	if q.avail, err = mem.Slice(cfg.Avail, 6+2*n); err != nil {
		return nil, fmt.Errorf("virtq %s: available ring: %w", cfg.Name, err)
	}
	// used: flags, idx, ring[n], avail_event.
	if q.used, err = mem.Slice(cfg.Used, 6+usedElemSize*n); err != nil {
		return nil, fmt.Errorf("virtq %s: used ring: %w", cfg.Name, err)
	}
	if err := mem.Retain(); err != nil {
		return nil, fmt.Errorf("virtq %s: %w", cfg.Name, err)
	}
	q.mem = mem
	if cfg.ReadUsedIdx {
		q.usedIdx = load16(q.used, 2)
	} else {
		q.usedIdx = cfg.UsedIdx
	}
	if call != nil {
		q.call.Store(call)
	}
	return q, nil
}

// Close releases the queue's reference on guest memory. Chains taken from
// the queue must not be used afterwards.
func (q *Queue) Close() {
	if q.mem != nil {
		q.mem.Release()
		q.mem = nil
	}
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.cfg.Name }

// Memory returns the table the queue translates through.
func (q *Queue) Memory() *guestmem.Table { return q.mem }

// LastAvail returns the next available index the device will consume (the
// value GET_VRING_BASE reports).
func (q *Queue) LastAvail() uint16 { return q.lastAvail }

// UsedIdx returns the device's used index.
func (q *Queue) UsedIdx() uint16 { return q.usedIdx }

// Kick returns the queue's kick notifier (may be nil).
func (q *Queue) Kick() *Notifier { return q.kick }

// SetCall replaces the call notifier (QEMU swaps it when the guest masks the
// interrupt). It returns the previous one.
func (q *Queue) SetCall(n *Notifier) *Notifier { return q.call.Swap(n) }

// Err returns the first protocol violation, wrapped with ErrBroken, or nil.
func (q *Queue) Err() error { return q.broken }

func (q *Queue) fail(head uint16, headValid bool, reason string) error {
	err := &ChainError{Queue: q.cfg.Name, Head: head, Reason: reason}
	if headValid {
		// The spec lets the device return a buffer it did not use: give the
		// head back with length 0 so the driver can reclaim it.
		q.Push(head, 0)
		q.Notify()
	}
	if q.broken == nil {
		q.broken = err
	}
	return err
}

// availIdx returns the driver's avail->idx (acquire).
func (q *Queue) availIdx() uint16 { return load16(q.avail, 2) }

// Pending reports whether the driver has made buffers available that the
// device has not taken yet.
func (q *Queue) Pending() bool {
	if q.broken != nil {
		return false
	}
	return q.availIdx() != q.lastAvail
}

// Next takes the next available chain into c. It returns false when the
// ring is empty. A malformed chain returns a *ChainError (wrapping
// ErrBroken) and breaks the queue; later calls return the first error.
func (q *Queue) Next(c *Chain) (bool, error) {
	if q.broken != nil {
		return false, q.broken
	}
	idx := q.availIdx()
	if idx == q.lastAvail {
		return false, nil
	}
	if uint16(idx-q.lastAvail) > q.cfg.Size {
		return false, q.fail(0, false, fmt.Sprintf("avail index %d is %d ahead of %d, more than the ring size %d", idx, uint16(idx-q.lastAvail), q.lastAvail, q.cfg.Size))
	}
	slot := uint64(q.lastAvail % q.cfg.Size)
	head := binary.LittleEndian.Uint16(q.avail[4+2*slot:])
	q.lastAvail++
	if head >= q.cfg.Size {
		return false, q.fail(head, false, fmt.Sprintf("head index %d >= queue size %d", head, q.cfg.Size))
	}
	if reason := q.walk(c, head); reason != "" {
		return false, q.fail(head, true, reason)
	}
	return true, nil
}

// walk fills c from the chain at head; it returns a reason when the chain is
// malformed.
func (q *Queue) walk(c *Chain, head uint16) string {
	c.Head = head
	c.Out = c.Out[:0]
	c.In = c.In[:0]
	c.OutLen, c.InLen = 0, 0
	table := q.desc
	max := uint32(q.cfg.Size)
	idx := uint32(head)
	indirect := false
	for hops := uint32(0); ; hops++ {
		if hops >= max {
			return fmt.Sprintf("more than %d descriptors: loop", max)
		}
		d := table[idx*descSize : idx*descSize+descSize]
		addr := binary.LittleEndian.Uint64(d[0:])
		length := binary.LittleEndian.Uint32(d[8:])
		flags := binary.LittleEndian.Uint16(d[12:])
		next := binary.LittleEndian.Uint16(d[14:])
		if flags&DescFlagIndirect != 0 {
			switch {
			case !q.cfg.Indirect:
				return "indirect descriptor without VIRTIO_RING_F_INDIRECT_DESC"
			case indirect:
				return "indirect descriptor inside an indirect table"
			case flags&DescFlagNext != 0:
				return "indirect descriptor with NEXT set"
			case length == 0 || length%descSize != 0:
				return fmt.Sprintf("indirect table length %d is not a non-zero multiple of 16", length)
			case length/descSize > MaxSize:
				return fmt.Sprintf("indirect table of %d descriptors exceeds %d", length/descSize, MaxSize)
			}
			t, err := q.mem.Slice(guestmem.GPA(addr), uint64(length))
			if err != nil {
				return fmt.Sprintf("indirect table: %v", err)
			}
			table = t
			max = length / descSize
			idx = 0
			hops = ^uint32(0) // becomes 0 after the increment
			indirect = true
			continue
		}
		if length > 0 {
			b, err := q.mem.Slice(guestmem.GPA(addr), uint64(length))
			if err != nil {
				return fmt.Sprintf("descriptor %d: %v", idx, err)
			}
			if flags&DescFlagWrite != 0 {
				c.In = append(c.In, b)
				c.InLen += uint64(length)
			} else {
				if len(c.In) > 0 {
					return fmt.Sprintf("descriptor %d: device-readable buffer after a writable one", idx)
				}
				c.Out = append(c.Out, b)
				c.OutLen += uint64(length)
			}
			if c.InLen+c.OutLen > maxChainBytes {
				return "total length exceeds 4 GiB"
			}
		}
		if flags&DescFlagNext == 0 {
			return ""
		}
		if uint32(next) >= max {
			return fmt.Sprintf("next index %d >= table size %d", next, max)
		}
		idx = uint32(next)
	}
}

// Push returns a chain to the driver with the number of bytes written into
// its device-writable buffers. The new used index is published at once
// (release); call Notify after a batch.
func (q *Queue) Push(head uint16, written uint32) {
	slot := uint64(q.usedIdx % q.cfg.Size)
	e := q.used[4+usedElemSize*slot:]
	binary.LittleEndian.PutUint32(e[0:], uint32(head))
	binary.LittleEndian.PutUint32(e[4:], written)
	q.usedIdx++
	storeUsedHeader(q.used, q.usedFlags, q.usedIdx)
	q.pendingUse = true
}

// Notify signals the driver if it wants an interrupt for the buffers pushed
// since the last notification (event index or the NO_INTERRUPT flag).
func (q *Queue) Notify() {
	if !q.pendingUse {
		return
	}
	q.pendingUse = false
	fence()
	if q.needCall() {
		if n := q.call.Load(); n != nil {
			n.Signal()
		}
	}
}

func (q *Queue) needCall() bool {
	if !q.cfg.EventIdx {
		return load16(q.avail, 0)&availFlagNoInterrupt == 0
	}
	newIdx := q.usedIdx
	old := q.signalled
	valid := q.signalSet
	q.signalled, q.signalSet = newIdx, true
	if !valid {
		return true
	}
	event := load16(q.avail, 4+2*int(q.cfg.Size))
	// vring_need_event: notify if event is in [old, new).
	return uint16(newIdx-event-1) < uint16(newIdx-old)
}

// DisableNotify asks the driver not to kick while the device is busy.
func (q *Queue) DisableNotify() {
	if q.notifyOff || q.cfg.EventIdx {
		// With event idx the device simply does not advance avail_event.
		q.notifyOff = true
		return
	}
	q.notifyOff = true
	q.usedFlags |= usedFlagNoNotify
	storeUsedHeader(q.used, q.usedFlags, q.usedIdx)
}

// EnableNotify asks the driver to kick for new buffers and reports whether
// buffers became available meanwhile (then the caller must process them
// instead of waiting for a kick).
func (q *Queue) EnableNotify() bool {
	q.notifyOff = false
	if q.cfg.EventIdx {
		store16Fenced(q.used, 4+usedElemSize*int(q.cfg.Size), q.lastAvail)
	} else {
		q.usedFlags &^= usedFlagNoNotify
		storeUsedHeader(q.used, q.usedFlags, q.usedIdx)
	}
	fence()
	return q.Pending()
}

// Undo returns the chain taken by the last successful Next to the ring
// unused: the next call to Next takes it again.
func (q *Queue) Undo() { q.lastAvail-- }

// String describes the ring state for diagnostics.
func (q *Queue) String() string {
	if q.mem == nil {
		return fmt.Sprintf("%s: closed", q.cfg.Name)
	}
	// Only what the ring's shared memory says (read atomically): the
	// queue's own indices belong to the goroutine that runs it, and
	// String is called from others (DebugState) while it does.
	return fmt.Sprintf("%s: size=%d avail.idx=%d avail.flags=%#x used_event=%d used.idx=%d avail_event=%d event_idx=%v",
		q.cfg.Name, q.cfg.Size, q.availIdx(), load16(q.avail, 0), load16(q.avail, 4+2*int(q.cfg.Size)),
		load16(q.used, 2), load16(q.used, 4+usedElemSize*int(q.cfg.Size)), q.cfg.EventIdx)
}
