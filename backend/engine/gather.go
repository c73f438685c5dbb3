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
// Checked with ptxas (nvcc 11.8) for sm_52 and sm_90; JIT-compiled by the
// driver for the device at hand.
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

// Gather kernel geometry and descriptor budget per launch.
const (
	descSize       = 24
	maxDescs       = 1 << 17 // 3 MiB of descriptors: 512 MiB of 4 KiB pages per launch
	gatherThreads  = 256
	gatherMaxGrid  = 16384
	gatherMaxPiece = 1 << 30 // descriptors never cross a registration chunk
)

// gatherState is one context's kernel and descriptor buffers, shared by
// every engine in the process (the PTX is JIT-compiled once per context).
type gatherState struct {
	mu      sync.Mutex
	fn      device.Function
	host    []byte     // pinned descriptor staging buffer
	devDesc device.Ptr // device copy of the descriptors
	last    *device.Stream
	lastCtx device.Context
	err     error
}

var gatherStates sync.Map // device.Context -> *gatherState

func getGather(c device.Context) *gatherState {
	v, _ := gatherStates.LoadOrStore(c, &gatherState{})
	g := v.(*gatherState)
	g.mu.Lock()
	if g.fn == 0 && g.err == nil {
		g.err = g.init(c)
	}
	return g // locked
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
	host, err := mapAnon(maxDescs * descSize)
	if err != nil {
		return device.Errorf("engine.Gather", device.ErrOutOfMemory, "descriptor buffer: %v", err)
	}
	if _, err := c.HostRegister(host, false); err != nil {
		unmapAnon(host)
		return err
	}
	dd, err := c.MemAlloc(maxDescs * descSize)
	if err != nil {
		_ = c.HostUnregister(host)
		unmapAnon(host)
		return err
	}
	g.fn, g.host, g.devDesc = fn, host, dd
	return nil
}

// gather copies with the kernel: descriptors pair each (chunk-split) piece
// of guest memory, by its device-mapped address, with its place in dev.
func (e *Engine) gather(c device.Context, dir Dir, dev device.Ptr, pieces []Piece, s device.Stream) error {
	g := getGather(c)
	defer g.mu.Unlock()
	if g.err != nil {
		return g.err
	}
	// The descriptor buffers may still feed the previous launch.
	if g.last != nil {
		if err := g.lastCtx.StreamSynchronize(*g.last); err != nil {
			return err
		}
		g.last = nil
	}
	n := 0
	var off uint64
	le := binary.LittleEndian
	flush := func() error {
		if n == 0 {
			return nil
		}
		if err := c.MemcpyHtoD(g.devDesc, g.host[:n*descSize], s, true); err != nil {
			return err
		}
		var params [16]byte
		le.PutUint64(params[0:], uint64(g.devDesc))
		le.PutUint32(params[8:], uint32(n))
		grid := uint32(min(n, gatherMaxGrid))
		cfg := device.LaunchConfig{Grid: [3]uint32{grid, 1, 1}, Block: [3]uint32{gatherThreads, 1, 1}, Stream: s}
		if err := c.Launch(g.fn, cfg, params[:12]); err != nil {
			return err
		}
		n = 0
		// Reusing the buffers needs the stream to pass this launch.
		return c.StreamSynchronize(s)
	}
	for _, p := range pieces {
		for len(p.Host) > 0 {
			piece := p
			hostDev := p.Dev
			if hostDev == 0 {
				if p.Region == nil {
					return device.Errorf("engine.Gather", device.ErrInvalidValue, "guest memory without a device mapping")
				}
				// Split at registration chunk boundaries.
				chunkEnd := (p.Off/ChunkSize + 1) * ChunkSize
				if l := chunkEnd - p.Off; uint64(len(p.Host)) > l {
					piece.Host = p.Host[:l]
				}
				d, err := e.reg.Ensure(c, p.Region, p.Off, uint64(len(piece.Host)))
				if err != nil {
					return err
				}
				hostDev = d
			} else if uint64(len(p.Host)) > gatherMaxPiece {
				piece.Host = p.Host[:gatherMaxPiece]
			}
			dst, src := dev+device.Ptr(off), hostDev
			if dir == DtoH {
				dst, src = hostDev, dev+device.Ptr(off)
			}
			d := g.host[n*descSize:]
			le.PutUint64(d[0:], uint64(dst))
			le.PutUint64(d[8:], uint64(src))
			le.PutUint64(d[16:], uint64(len(piece.Host)))
			n++
			if n == maxDescs {
				if err := flush(); err != nil {
					return err
				}
			}
			off += uint64(len(piece.Host))
			p.Host = p.Host[len(piece.Host):]
			p.Off += uint64(len(piece.Host))
			if p.Dev != 0 {
				p.Dev += device.Ptr(len(piece.Host))
			}
		}
	}
	if n == 0 {
		return nil
	}
	if err := c.MemcpyHtoD(g.devDesc, g.host[:n*descSize], s, true); err != nil {
		return err
	}
	var params [16]byte
	le.PutUint64(params[0:], uint64(g.devDesc))
	le.PutUint32(params[8:], uint32(n))
	cfg := device.LaunchConfig{Grid: [3]uint32{uint32(min(n, gatherMaxGrid)), 1, 1}, Block: [3]uint32{gatherThreads, 1, 1}, Stream: s}
	if err := c.Launch(g.fn, cfg, params[:12]); err != nil {
		return err
	}
	st := s
	g.last, g.lastCtx = &st, c
	return nil
}
