package virtq_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/virtq"
	"github.com/vgpu-project/vgpu/backend/virtq/virtqtest"
)

const ramBase = guestmem.GPA(0x100000)

func setup(t testing.TB, size uint16, eventIdx bool) (*virtqtest.Driver, *virtq.Queue) {
	t.Helper()
	mem, err := virtqtest.NewMemory(ramBase, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mem.Close)
	drv, err := virtqtest.NewDriver(mem, size, eventIdx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drv.Close)
	q, err := drv.Queue("test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	return drv, q
}

func TestChainDirect(t *testing.T) {
	drv, q := setup(t, 8, false)
	head, in, ok := drv.Add([][]byte{[]byte("hello "), []byte("world")}, []int{16, 8})
	if !ok {
		t.Fatal("ring full")
	}
	var c virtq.Chain
	got, err := q.Next(&c)
	if err != nil || !got {
		t.Fatalf("Next = %v, %v", got, err)
	}
	if c.Head != head || len(c.Out) != 2 || len(c.In) != 2 || c.OutLen != 11 || c.InLen != 24 {
		t.Fatalf("chain = head %d out %d/%d in %d/%d", c.Head, len(c.Out), c.OutLen, len(c.In), c.InLen)
	}
	if string(c.Out[0])+string(c.Out[1]) != "hello world" {
		t.Fatalf("out = %q %q", c.Out[0], c.Out[1])
	}
	copy(c.In[0], "from the device!")
	q.Push(c.Head, 16)
	q.Notify()
	if got, _ := q.Next(&c); got {
		t.Fatal("second Next found a chain")
	}
	used := drv.Collect()
	if len(used) != 1 || used[0] != (virtqtest.Used{Head: head, Len: 16}) {
		t.Fatalf("used = %+v", used)
	}
	if string(in[0]) != "from the device!" {
		t.Fatalf("device wrote %q", in[0])
	}
	select {
	case <-drv.Call.C():
	case <-time.After(5 * time.Second):
		t.Fatal("no call after Notify")
	}
}

func TestChainIndirect(t *testing.T) {
	drv, q := setup(t, 8, true)
	tblGPA, tbl := drv.Mem.Alloc(3*16, 16)
	aGPA, a := drv.Mem.Alloc(4, 8)
	copy(a, "abcd")
	bGPA, _ := drv.Mem.Alloc(100, 8)
	cGPA, _ := drv.Mem.Alloc(200, 8)
	virtqtest.WriteDescAt(tbl, 0, aGPA, 4, virtq.DescFlagNext, 2)
	virtqtest.WriteDescAt(tbl, 2, bGPA, 100, virtq.DescFlagNext|virtq.DescFlagWrite, 1)
	virtqtest.WriteDescAt(tbl, 1, cGPA, 200, virtq.DescFlagWrite, 0)
	drv.WriteDesc(5, tblGPA, 48, virtq.DescFlagIndirect, 0)
	drv.Publish(5)
	var c virtq.Chain
	if got, err := q.Next(&c); err != nil || !got {
		t.Fatalf("Next = %v, %v", got, err)
	}
	if c.Head != 5 || c.OutLen != 4 || c.InLen != 300 || string(c.Out[0]) != "abcd" {
		t.Fatalf("chain = %+v", c)
	}
}

// malformed lists chains the device must refuse. setup writes descriptors
// and returns the head to publish; headValid says whether the head comes
// back on the used ring.
var malformed = []struct {
	name      string
	indirect  bool
	setup     func(d *virtqtest.Driver) uint16
	headValid bool
	reason    string
}{
	{"loop", true, func(d *virtqtest.Driver) uint16 {
		g, _ := d.Mem.Alloc(16, 8)
		d.WriteDesc(0, g, 16, virtq.DescFlagNext, 1)
		d.WriteDesc(1, g, 16, virtq.DescFlagNext, 0)
		return 0
	}, true, "loop"},
	{"next out of range", true, func(d *virtqtest.Driver) uint16 {
		g, _ := d.Mem.Alloc(16, 8)
		d.WriteDesc(0, g, 16, virtq.DescFlagNext, 99)
		return 0
	}, true, "next index"},
	{"head out of range", true, func(d *virtqtest.Driver) uint16 { return 200 }, false, "head index"},
	{"address outside RAM", true, func(d *virtqtest.Driver) uint16 {
		d.WriteDesc(3, 0x10, 16, 0, 0)
		return 3
	}, true, "outside guest RAM"},
	{"range wraps", true, func(d *virtqtest.Driver) uint16 {
		d.WriteDesc(3, ^guestmem.GPA(0)-4, 16, 0, 0)
		return 3
	}, true, "wraps"},
	{"crosses end of RAM", true, func(d *virtqtest.Driver) uint16 {
		d.WriteDesc(3, ramBase+1<<20-8, 16, 0, 0)
		return 3
	}, true, "crosses the end"},
	{"readable after writable", true, func(d *virtqtest.Driver) uint16 {
		g, _ := d.Mem.Alloc(16, 8)
		d.WriteDesc(0, g, 16, virtq.DescFlagWrite|virtq.DescFlagNext, 1)
		d.WriteDesc(1, g, 16, 0, 0)
		return 0
	}, true, "readable buffer after a writable"},
	{"indirect not negotiated", false, func(d *virtqtest.Driver) uint16 {
		g, _ := d.Mem.Alloc(32, 16)
		d.WriteDesc(0, g, 32, virtq.DescFlagIndirect, 0)
		return 0
	}, true, "without VIRTIO_RING_F_INDIRECT_DESC"},
	{"indirect with next", true, func(d *virtqtest.Driver) uint16 {
		g, _ := d.Mem.Alloc(32, 16)
		d.WriteDesc(0, g, 32, virtq.DescFlagIndirect|virtq.DescFlagNext, 1)
		return 0
	}, true, "NEXT set"},
	{"indirect length", true, func(d *virtqtest.Driver) uint16 {
		g, _ := d.Mem.Alloc(32, 16)
		d.WriteDesc(0, g, 20, virtq.DescFlagIndirect, 0)
		return 0
	}, true, "multiple of 16"},
	{"nested indirect", true, func(d *virtqtest.Driver) uint16 {
		g, tbl := d.Mem.Alloc(32, 16)
		virtqtest.WriteDescAt(tbl, 0, g, 32, virtq.DescFlagIndirect, 0)
		d.WriteDesc(0, g, 32, virtq.DescFlagIndirect, 0)
		return 0
	}, true, "inside an indirect table"},
	{"indirect loop", true, func(d *virtqtest.Driver) uint16 {
		g, tbl := d.Mem.Alloc(32, 16)
		b, _ := d.Mem.Alloc(8, 8)
		virtqtest.WriteDescAt(tbl, 0, b, 8, virtq.DescFlagNext, 1)
		virtqtest.WriteDescAt(tbl, 1, b, 8, virtq.DescFlagNext, 0)
		d.WriteDesc(0, g, 32, virtq.DescFlagIndirect, 0)
		return 0
	}, true, "loop"},
	{"indirect table outside RAM", true, func(d *virtqtest.Driver) uint16 {
		d.WriteDesc(0, 0x1000, 32, virtq.DescFlagIndirect, 0)
		return 0
	}, true, "indirect table"},
}

func TestChainMalformed(t *testing.T) {
	for _, tc := range malformed {
		t.Run(tc.name, func(t *testing.T) {
			mem, err := virtqtest.NewMemory(ramBase, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			defer mem.Close()
			drv, err := virtqtest.NewDriver(mem, 8, false)
			if err != nil {
				t.Fatal(err)
			}
			defer drv.Close()
			drv.Indirect = tc.indirect
			q, err := drv.Queue("bad")
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			drv.Publish(tc.setup(drv))
			var c virtq.Chain
			got, err := q.Next(&c)
			var ce *virtq.ChainError
			if got || !errors.As(err, &ce) || !errors.Is(err, virtq.ErrBroken) {
				t.Fatalf("Next = %v, %v; want a ChainError", got, err)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("error %q does not mention %q", err, tc.reason)
			}
			used := drv.Collect()
			if tc.headValid && (len(used) != 1 || used[0].Len != 0) {
				t.Errorf("rejected head not returned with length 0: used = %+v", used)
			}
			if !tc.headValid && len(used) != 0 {
				t.Errorf("invalid head returned: used = %+v", used)
			}
			// Broken: later calls fail fast with the first cause.
			drv.Add([][]byte{[]byte("x")}, nil)
			if got, err2 := q.Next(&c); got || !errors.Is(err2, virtq.ErrBroken) || err2.Error() != err.Error() {
				t.Errorf("after break: Next = %v, %v", got, err2)
			}
		})
	}
}

func TestAvailIndexJump(t *testing.T) {
	drv, q := setup(t, 8, false)
	drv.SetAvailIdx(100)
	var c virtq.Chain
	if _, err := q.Next(&c); !errors.Is(err, virtq.ErrBroken) {
		t.Fatalf("Next = %v, want ErrBroken", err)
	}
}

func TestEventIdx(t *testing.T) {
	drv, q := setup(t, 8, true)
	var c virtq.Chain
	// Kick suppression: EnableNotify publishes avail_event = last_avail.
	drv.Add([][]byte{[]byte("a")}, nil)
	if more := q.EnableNotify(); !more {
		t.Fatal("EnableNotify missed a pending buffer")
	}
	q.Next(&c)
	if more := q.EnableNotify(); more {
		t.Fatal("EnableNotify reported work on an empty ring")
	}
	if ev := drv.AvailEvent(); ev != 1 {
		t.Fatalf("avail_event = %d, want 1", ev)
	}
	// Interrupt suppression: the driver asks for a call only after used
	// index 3; the first Notify always signals (no state yet).
	drainCall(drv)
	q.Push(c.Head, 0)
	q.Notify()
	if !drainCall(drv) {
		t.Fatal("first Notify did not call")
	}
	drv.SetUsedEvent(2) // call when used idx passes 2 (i.e. reaches 3)
	for i := 0; i < 2; i++ {
		drv.Add([][]byte{[]byte("b")}, nil)
		q.Next(&c)
		q.Push(c.Head, 0)
		q.Notify()
		want := i == 1
		if got := drainCall(drv); got != want {
			t.Fatalf("push %d: call = %v, want %v", i+2, got, want)
		}
	}
}

func TestNoInterruptFlag(t *testing.T) {
	drv, q := setup(t, 8, false)
	q.DisableNotify()
	if drv.UsedFlags()&1 == 0 {
		t.Fatal("DisableNotify did not set VIRTQ_USED_F_NO_NOTIFY")
	}
	q.EnableNotify()
	if drv.UsedFlags()&1 != 0 {
		t.Fatal("EnableNotify did not clear VIRTQ_USED_F_NO_NOTIFY")
	}
}

func TestUndo(t *testing.T) {
	drv, q := setup(t, 8, false)
	head, _, _ := drv.Add(nil, []int{8})
	var c virtq.Chain
	q.Next(&c)
	q.Undo()
	if got, _ := q.Next(&c); !got || c.Head != head {
		t.Fatal("Undo did not give the chain back")
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	drv, _ := setup(t, 8, false)
	for _, tc := range []struct {
		name string
		mod  func(*virtq.Config)
	}{
		{"size not power of two", func(c *virtq.Config) { c.Size = 6 }},
		{"size zero", func(c *virtq.Config) { c.Size = 0 }},
		{"misaligned desc", func(c *virtq.Config) { c.Desc++ }},
		{"used outside RAM", func(c *virtq.Config) { c.Used = 0x10 }},
		{"desc table past the end", func(c *virtq.Config) { c.Desc = ramBase + 1<<20 - 16; c.Size = 64 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := drv.Config("x")
			tc.mod(&cfg)
			if q, err := virtq.New(drv.Mem.Table, cfg, nil, nil); err == nil {
				q.Close()
				t.Fatal("New accepted a bad config")
			}
		})
	}
}

func drainCall(d *virtqtest.Driver) bool {
	var b [8]byte
	n, _ := readNonblock(d.Call.FD(), b[:])
	return n == 8 && binary.LittleEndian.Uint64(b[:]) > 0
}

// FuzzDescriptorChain builds a ring from fuzz bytes: the descriptor table,
// the avail ring entries, an indirect table and guest data all come from
// the input, and the device walks whatever is there. It must never panic or
// return a slice outside guest RAM.
func FuzzDescriptorChain(f *testing.F) {
	// Seeds: a valid chain, and each malformed case's descriptor bytes.
	seed := make([]byte, 16*8+16)
	binary.LittleEndian.PutUint64(seed[0:], uint64(ramBase)+0x8000)
	binary.LittleEndian.PutUint32(seed[8:], 64)
	binary.LittleEndian.PutUint16(seed[12:], virtq.DescFlagNext)
	binary.LittleEndian.PutUint16(seed[14:], 1)
	binary.LittleEndian.PutUint64(seed[16:], uint64(ramBase)+0x9000)
	binary.LittleEndian.PutUint32(seed[24:], 64)
	binary.LittleEndian.PutUint16(seed[28:], virtq.DescFlagWrite)
	f.Add(seed, uint16(1))
	loop := bytes.Clone(seed)
	binary.LittleEndian.PutUint16(loop[28:], virtq.DescFlagNext)
	binary.LittleEndian.PutUint16(loop[30:], 0)
	f.Add(loop, uint16(1))
	ind := bytes.Clone(seed)
	binary.LittleEndian.PutUint16(ind[12:], virtq.DescFlagIndirect)
	binary.LittleEndian.PutUint32(ind[8:], 32)
	f.Add(ind, uint16(3))
	f.Add([]byte{}, uint16(9))
	f.Add(bytes.Repeat([]byte{0xff}, 200), uint16(0xffff))

	mem, err := virtqtest.NewMemory(ramBase, 1<<16)
	if err != nil {
		f.Fatal(err)
	}
	defer mem.Close()
	drv, err := virtqtest.NewDriver(mem, 8, true)
	if err != nil {
		f.Fatal(err)
	}
	defer drv.Close()
	descs := mem.At(drv.DescGPA, 16*8)
	heads := mem.At(drv.AvailGPA+4, 16)
	data := mem.Bytes[0x8000:]
	f.Fuzz(func(t *testing.T, b []byte, avail uint16) {
		clear(descs)
		clear(heads)
		n := copy(descs, b)
		n += copy(heads, b[n:])
		copy(data, b[n:])
		// A fresh queue per input: a broken queue stays broken.
		cfg := drv.Config("fuzz")
		q, err := virtq.New(mem.Table, cfg, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		drv.SetAvailIdx(avail)
		var c virtq.Chain
		for i := 0; i < 16; i++ {
			got, err := q.Next(&c)
			if err != nil || !got {
				return
			}
			for _, s := range append(c.Out, c.In...) {
				if !inside(mem.Table, s) {
					t.Fatalf("chain slice outside guest RAM")
				}
			}
			q.Push(c.Head, uint32(c.InLen))
		}
	})
}

// inside reports whether s lies within one region's mapping.
func inside(t *guestmem.Table, s []byte) bool {
	for _, r := range t.Regions() {
		if len(s) == 0 {
			return true
		}
		if sliceWithin(r.Host, s) {
			return true
		}
	}
	return false
}
