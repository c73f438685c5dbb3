package engine

import (
	"encoding/binary"
	"sync"

	"github.com/vgpu-project/vgpu/backend/device"
)

// copyPTX is the gather/scatter kernel: for each descriptor {dst, src, len}
// (device addresses; guest memory is device-mapped host memory), one block
// copies len bytes, 16 bytes per thread per step when dst, src and len are
// all 16-byte aligned, else byte by byte. Blocks stride over descriptors.
// The descriptors themselves are read from pinned, device-mapped host
// memory (24 bytes per page moved: no upload step). Checked with ptxas
// (nvcc 11.8) for sm_52 and sm_90; the driver JIT-compiles it for the
// device at hand.
const copyPTX = `
.version 7.0
.target sm_52
.address_size 64

.visible .entry vgpu_copy(
	.param .u64 vgpu_copy_descs,
	.param .u32 vgpu_copy_n
)
{
	.reg .pred 	%p<4>;
	.reg .b32 	%r<12>;
	.reg .b64 	%rd<16>;

	ld.param.u64 	%rd1, [vgpu_copy_descs];
	ld.param.u32 	%r1, [vgpu_copy_n];
	cvta.to.global.u64 	%rd1, %rd1;
	mov.u32 	%r2, %ctaid.x;
	mov.u32 	%r3, %nctaid.x;
	mov.u32 	%r4, %tid.x;
	mov.u32 	%r5, %ntid.x;
$L_desc:
	setp.ge.u32 	%p1, %r2, %r1;
	@%p1 bra 	$L_done;
	mul.wide.u32 	%rd2, %r2, 24;
	add.s64 	%rd3, %rd1, %rd2;
	ld.global.u64 	%rd4, [%rd3];
	ld.global.u64 	%rd5, [%rd3+8];
	ld.global.u64 	%rd6, [%rd3+16];
	cvta.to.global.u64 	%rd4, %rd4;
	cvta.to.global.u64 	%rd5, %rd5;
	or.b64 	%rd7, %rd4, %rd5;
	or.b64 	%rd7, %rd7, %rd6;
	and.b64 	%rd7, %rd7, 15;
	setp.ne.s64 	%p2, %rd7, 0;
	@%p2 bra 	$L_bytes;
	mul.wide.u32 	%rd8, %r4, 16;
	mul.wide.u32 	%rd9, %r5, 16;
$L_vec:
	setp.ge.u64 	%p3, %rd8, %rd6;
	@%p3 bra 	$L_next;
	add.s64 	%rd10, %rd5, %rd8;
	add.s64 	%rd11, %rd4, %rd8;
	ld.global.v4.u32 	{%r6, %r7, %r8, %r9}, [%rd10];
	st.global.v4.u32 	[%rd11], {%r6, %r7, %r8, %r9};
	add.s64 	%rd8, %rd8, %rd9;
	bra.uni 	$L_vec;
$L_bytes:
	cvt.u64.u32 	%rd8, %r4;
	cvt.u64.u32 	%rd9, %r5;
$L_byte:
	setp.ge.u64 	%p3, %rd8, %rd6;
	@%p3 bra 	$L_next;
	add.s64 	%rd10, %rd5, %rd8;
	add.s64 	%rd11, %rd4, %rd8;
	ld.global.u8 	%r6, [%rd10];
	st.global.u8 	[%rd11], %r6;
	add.s64 	%rd8, %rd8, %rd9;
	bra.uni 	$L_byte;
$L_next:
	add.s32 	%r2, %r2, %r3;
	bra.uni 	$L_desc;
$L_done:
	ret;
}
`

// Gather geometry: descriptors go in slots of slotDescs; while the device
// copies with one slot the CPU fills the next, so translating guest
// addresses overlaps the transfer. The first batch of a copy is launched
// after firstBatch descriptors and each later one may hold twice as many as
// the one before (up to slotDescs), so the device starts moving bytes while
// the CPU is still translating the rest of the list. Filling a whole first
// slot kept the H100 idle for ~250 µs of a ~5 ms copy: the ramp took 256 MiB
// of scattered 4 KiB pages from 84-87 % to 88-91 % of native pinned
// bandwidth (HtoD) and from 87-90 % to 90-94 % (DtoH) over ten runs. Kernel
// variants measured beside it changed nothing
// (bench/results/2026-11-22-h100-engine).
const (
	descSize      = 24
	slotDescs     = 8192
	numSlots      = 4
	gatherThreads = 256
	eventNoTiming = 0x2 // CU_EVENT_DISABLE_TIMING
)

// firstBatch is the size of a copy's first launch (a variable so that the
// GPU benchmark can compare it with no ramp, firstBatch = slotDescs).
var firstBatch = 256

type slot struct {
	host []byte       // pinned, device-mapped descriptor buffer
	dev  device.Ptr   // its device address
	ev   device.Event // recorded after the launch that reads it
	busy bool
}

// gatherState is one context's kernel and descriptor slots, shared by every
// engine of the process (the PTX is JIT-compiled once per context).
type gatherState struct {
	mu    sync.Mutex
	fn    device.Function
	slots [numSlots]slot
	next  int
	err   error
}

var gatherStates sync.Map // device.Context -> *gatherState

// getGather returns c's gather state, locked.
func getGather(c device.Context) *gatherState {
	v, _ := gatherStates.LoadOrStore(c, &gatherState{})
	g := v.(*gatherState)
	g.mu.Lock()
	if g.fn == 0 && g.err == nil {
		g.err = g.init(c)
	}
	return g
}

// gatherBroken returns why c's gather kernel cannot be used (nil if it can).
func gatherBroken(c device.Context) error {
	g := getGather(c)
	defer g.mu.Unlock()
	return g.err
}

func (g *gatherState) init(c device.Context) error {
	m, err := c.ModuleLoad([]byte(copyPTX))
	if err != nil {
		return err
	}
	fn, err := c.ModuleGetFunction(m, "vgpu_copy")
	if err != nil {
		return err
	}
	for i := range g.slots {
		host, err := mapAnon(slotDescs * descSize)
		if err != nil {
			return device.Errorf("engine.Gather", device.ErrOutOfMemory, "descriptor buffer: %v", err)
		}
		d, err := c.HostRegister(host, false)
		if err != nil {
			unmapAnon(host)
			return err
		}
		ev, err := c.EventCreate(eventNoTiming)
		if err != nil {
			return err
		}
		g.slots[i] = slot{host: host, dev: d, ev: ev}
	}
	g.fn = fn
	return nil
}

// gather copies with the kernel, one launch per filled slot.
func (e *Engine) gather(c device.Context, dir Dir, dev device.Ptr, src Source, s device.Stream) error {
	g := getGather(c)
	defer g.mu.Unlock()
	if g.err != nil {
		return g.err
	}
	le := binary.LittleEndian
	var cc chunkCache
	var sl *slot
	n := 0
	limit := min(max(firstBatch, 1), slotDescs) // this batch's size
	take := func() error {
		sl = &g.slots[g.next]
		g.next = (g.next + 1) % numSlots
		n = 0
		if sl.busy { // still read by an earlier launch
			if err := c.EventSynchronize(sl.ev); err != nil {
				return err
			}
			sl.busy = false
		}
		return nil
	}
	launch := func() error {
		if n == 0 {
			return nil
		}
		var params [16]byte
		le.PutUint64(params[0:], uint64(sl.dev))
		le.PutUint32(params[8:], uint32(n))
		cfg := device.LaunchConfig{Grid: [3]uint32{uint32(n), 1, 1}, Block: [3]uint32{gatherThreads, 1, 1}, Stream: s}
		if err := c.Launch(g.fn, cfg, params[:12]); err != nil {
			return err
		}
		if err := c.EventRecord(sl.ev, s); err != nil {
			return err
		}
		sl.busy = true
		return nil
	}
	add := func(dst, srcp device.Ptr, l uint64) error {
		if n == limit {
			if err := launch(); err != nil {
				return err
			}
			if err := take(); err != nil {
				return err
			}
			limit = min(2*limit, slotDescs)
		}
		d := sl.host[n*descSize : (n+1)*descSize]
		le.PutUint64(d[0:], uint64(dst))
		le.PutUint64(d[8:], uint64(srcp))
		le.PutUint64(d[16:], l)
		n++
		return nil
	}
	if err := take(); err != nil {
		return err
	}
	var off uint64
	emit := func(run *Piece) error {
		p := *run
		for len(p.Host) > 0 {
			q := p
			if p.Dev == 0 { // stop at the registration chunk's end
				if l := (p.Off/ChunkSize+1)*ChunkSize - p.Off; uint64(len(q.Host)) > l {
					q.Host = p.Host[:l]
				}
			}
			hd, err := e.devOf(&cc, c, &q)
			if err != nil {
				return err
			}
			l := uint64(len(q.Host))
			dst, from := dev+device.Ptr(off), hd
			if dir == DtoH {
				dst, from = hd, dev+device.Ptr(off)
			}
			if err := add(dst, from, l); err != nil {
				return err
			}
			off += l
			p.Host = p.Host[l:]
			p.Off += l
			if p.Dev != 0 {
				p.Dev += device.Ptr(l)
			}
		}
		return nil
	}
	if err := eachRun(src, emit); err != nil {
		return err
	}
	return launch()
}
