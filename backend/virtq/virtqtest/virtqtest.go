// Package virtqtest plays the guest driver's side of split virtqueues in
// tests: guest RAM in a memfd (mapped twice, once for the "guest" and once
// through guestmem.NewTable for the device, as QEMU and the backend do),
// descriptor tables and rings laid out in it, buffers added to the avail
// ring and collected from the used ring, and raw descriptor writes for
// malformed chains.
//
// It trusts nothing the device writes beyond what a driver would: used
// entries are bounds-checked before being followed.
package virtqtest

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/virtq"
)

// Memory is guest RAM: one region at GPA Base.
type Memory struct {
	Base  guestmem.GPA
	Bytes []byte          // the guest's mapping
	Table *guestmem.Table // the device's mapping (one reference, owned by Memory)
	FD    int             // the memfd (guest side; the table holds a dup)
	next  uint64          // bump allocator offset
}

// NewMemory creates size bytes of guest RAM at base (page-aligned size).
func NewMemory(base guestmem.GPA, size int) (*Memory, error) {
	fd, err := unix.MemfdCreate("virtqtest-ram", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("ftruncate: %w", err)
	}
	b, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mmap: %w", err)
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		unix.Munmap(b)
		unix.Close(fd)
		return nil, err
	}
	t, err := guestmem.NewTable([]guestmem.RegionSpec{{GuestPhys: base, Size: uint64(size), UserAddr: 0x7f0000000000, FD: dup}})
	if err != nil {
		unix.Munmap(b)
		unix.Close(fd)
		return nil, err
	}
	return &Memory{Base: base, Bytes: b, Table: t, FD: fd}, nil
}

// Close unmaps the guest side and drops the table reference.
func (m *Memory) Close() {
	m.Table.Release()
	unix.Munmap(m.Bytes)
	unix.Close(m.FD)
}

// Alloc returns n bytes of guest memory aligned to align, and its GPA.
func (m *Memory) Alloc(n, align int) (guestmem.GPA, []byte) {
	off := (m.next + uint64(align) - 1) &^ (uint64(align) - 1)
	if off+uint64(n) > uint64(len(m.Bytes)) {
		panic(fmt.Sprintf("virtqtest: guest memory exhausted (%d + %d > %d)", off, n, len(m.Bytes)))
	}
	m.next = off + uint64(n)
	return m.Base + guestmem.GPA(off), m.Bytes[off : off+uint64(n)]
}

// At returns the guest bytes at gpa.
func (m *Memory) At(gpa guestmem.GPA, n int) []byte {
	off := uint64(gpa - m.Base)
	return m.Bytes[off : off+uint64(n)]
}

// Used is one entry the device put in the used ring.
type Used struct {
	Head uint16
	Len  uint32
}

// Driver is the guest side of one split queue.
type Driver struct {
	Mem      *Memory
	Size     uint16
	EventIdx bool
	Indirect bool
	DescGPA  guestmem.GPA
	AvailGPA guestmem.GPA
	UsedGPA  guestmem.GPA
	Kick     *virtq.Notifier // driver -> device
	Call     *virtq.Notifier // device -> driver
	desc     []byte
	avail    []byte
	used     []byte
	free     []uint16
	availIdx uint16
	lastUsed uint16
	chainLen map[uint16]int
}

// NewDriver lays out a queue of size descriptors in mem.
func NewDriver(mem *Memory, size uint16, eventIdx bool) (*Driver, error) {
	d := &Driver{Mem: mem, Size: size, EventIdx: eventIdx, Indirect: true, chainLen: map[uint16]int{}}
	n := int(size)
	d.DescGPA, d.desc = mem.Alloc(16*n, 16)
	d.AvailGPA, d.avail = mem.Alloc(6+2*n, 4)
	d.UsedGPA, d.used = mem.Alloc(6+8*n, 4)
	for i := n - 1; i >= 0; i-- {
		d.free = append(d.free, uint16(i))
	}
	var err error
	if d.Kick, err = virtq.NewEventfd("kick"); err != nil {
		return nil, err
	}
	if d.Call, err = virtq.NewEventfd("call"); err != nil {
		return nil, err
	}
	return d, nil
}

// Close closes the eventfds.
func (d *Driver) Close() {
	d.Kick.Close()
	d.Call.Close()
}

// Config is the queue configuration a device needs.
func (d *Driver) Config(name string) virtq.Config {
	return virtq.Config{Name: name, Size: d.Size, Desc: d.DescGPA, Avail: d.AvailGPA, Used: d.UsedGPA, EventIdx: d.EventIdx, Indirect: d.Indirect}
}

// Queue builds the device side of this queue.
func (d *Driver) Queue(name string) (*virtq.Queue, error) {
	return virtq.New(d.Mem.Table, d.Config(name), d.Kick, d.Call)
}

// WriteDesc writes descriptor i of the table raw.
func (d *Driver) WriteDesc(i uint16, addr guestmem.GPA, length uint32, flags, next uint16) {
	WriteDescAt(d.desc, int(i), addr, length, flags, next)
}

// WriteDescAt writes descriptor i of a table at b.
func WriteDescAt(b []byte, i int, addr guestmem.GPA, length uint32, flags, next uint16) {
	e := b[16*i:]
	binary.LittleEndian.PutUint64(e[0:], uint64(addr))
	binary.LittleEndian.PutUint32(e[8:], length)
	binary.LittleEndian.PutUint16(e[12:], flags)
	binary.LittleEndian.PutUint16(e[14:], next)
}

// Publish puts head in the avail ring, publishes the index and kicks the
// device if it asked for it.
func (d *Driver) Publish(head uint16) {
	binary.LittleEndian.PutUint16(d.avail[4+2*int(d.availIdx%d.Size):], head)
	old := d.availIdx
	d.availIdx++
	store32(d.avail, uint32(d.availIdx)<<16) // flags 0
	var kick bool
	if d.EventIdx {
		ev := binary.LittleEndian.Uint16(d.used[4+8*int(d.Size):])
		kick = uint16(d.availIdx-ev-1) < uint16(d.availIdx-old)
	} else {
		kick = load32(d.used)&1 == 0
	}
	if kick {
		d.Kick.Signal()
	}
}

// SetAvailIdx overwrites avail->idx raw (for malformed-ring tests).
func (d *Driver) SetAvailIdx(idx uint16) {
	d.availIdx = idx
	store32(d.avail, uint32(idx)<<16)
	d.Kick.Signal()
}

// SetUsedEvent writes used_event (event idx: interrupt me after this).
func (d *Driver) SetUsedEvent(v uint16) {
	binary.LittleEndian.PutUint16(d.avail[4+2*int(d.Size):], v)
}

// Add makes a chain of device-readable buffers (copies of out) followed by
// device-writable buffers of the given sizes, publishes it and returns the
// head and the writable buffers. It returns false when the ring is full.
func (d *Driver) Add(out [][]byte, in []int) (uint16, [][]byte, bool) {
	n := len(out) + len(in)
	if n == 0 || n > len(d.free) {
		return 0, nil, false
	}
	ids := d.free[len(d.free)-n:]
	d.free = d.free[:len(d.free)-n]
	var bufs [][]byte
	for k := 0; k < n; k++ {
		var gpa guestmem.GPA
		var flags uint16
		var length int
		if k < len(out) {
			var b []byte
			gpa, b = d.Mem.Alloc(len(out[k]), 8)
			copy(b, out[k])
			length = len(out[k])
		} else {
			var b []byte
			length = in[k-len(out)]
			gpa, b = d.Mem.Alloc(length, 8)
			bufs = append(bufs, b)
			flags |= virtq.DescFlagWrite
		}
		var next uint16
		if k+1 < n {
			flags |= virtq.DescFlagNext
			next = ids[k+1]
		}
		d.WriteDesc(ids[k], gpa, uint32(length), flags, next)
	}
	d.chainLen[ids[0]] = n
	head := ids[0]
	d.Publish(head)
	return head, bufs, true
}

// Reuse re-publishes a chain the device returned (rx buffers), keeping its
// descriptors and buffers.
func (d *Driver) Reuse(head uint16) {
	d.chainLen[head] = d.chainLenOf(head)
	d.Publish(head)
}

func (d *Driver) chainLenOf(head uint16) int {
	n := 1
	for i := head; ; n++ {
		e := d.desc[16*int(i):]
		if binary.LittleEndian.Uint16(e[12:])&virtq.DescFlagNext == 0 || n > int(d.Size) {
			return n
		}
		i = binary.LittleEndian.Uint16(e[14:])
	}
}

// Collect returns the used entries since the last call (acquire on
// used->idx).
func (d *Driver) Collect() []Used {
	idx := uint16(load32(d.used) >> 16)
	var out []Used
	for d.lastUsed != idx {
		e := d.used[4+8*int(d.lastUsed%d.Size):]
		out = append(out, Used{Head: uint16(binary.LittleEndian.Uint32(e[0:])), Len: binary.LittleEndian.Uint32(e[4:])})
		d.lastUsed++
	}
	if d.EventIdx {
		d.SetUsedEvent(d.lastUsed)
	}
	return out
}

// Free returns a used chain's descriptors to the free list (for chains
// added with Add that will not be reused).
func (d *Driver) Free(head uint16) {
	n, ok := d.chainLen[head]
	if !ok || head >= d.Size {
		return
	}
	delete(d.chainLen, head)
	i := head
	for k := 0; k < n; k++ {
		d.free = append(d.free, i)
		i = binary.LittleEndian.Uint16(d.desc[16*int(i)+14:])
	}
}

// UsedIdx returns the device's used->idx.
func (d *Driver) UsedIdx() uint16 {
	return uint16(load32(d.used) >> 16)
}

// AvailEvent returns avail_event (event idx) as the device last wrote it.
func (d *Driver) AvailEvent() uint16 {
	return binary.LittleEndian.Uint16(d.used[4+8*int(d.Size):])
}

// UsedFlags returns used->flags.
func (d *Driver) UsedFlags() uint16 {
	return uint16(load32(d.used))
}

// AvailIdx returns the driver's avail->idx (how many chains it published).
func (d *Driver) AvailIdx() uint16 { return d.availIdx }
