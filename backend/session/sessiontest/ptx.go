package sessiontest

// FillPTX is a small kernel for tests on a real GPU (hand-written PTX, checked
// with ptxas from nvcc 11.8 for sm_52 and sm_90):
//
//	struct S { float scale, bias; };
//	extern "C" __global__ void fill(float *out, unsigned n, S s, unsigned char flag)
//	{ unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
//	  if (i < n) out[i] = i * s.scale + s.bias + flag; }
//
// Its parameter block is 21 bytes: out@0 (8), n@8 (4), s@12 (8, align 4),
// flag@20 (1).
const FillPTX = `
.version 7.0
.target sm_52
.address_size 64

.visible .entry fill(
	.param .u64 fill_out,
	.param .u32 fill_n,
	.param .align 4 .b8 fill_s[8],
	.param .u8 fill_flag
)
{
	.reg .pred 	%p<2>;
	.reg .b16 	%rs<2>;
	.reg .b32 	%r<8>;
	.reg .f32 	%f<8>;
	.reg .b64 	%rd<8>;

	ld.param.u64 	%rd1, [fill_out];
	ld.param.u32 	%r1, [fill_n];
	ld.param.f32 	%f1, [fill_s];
	ld.param.f32 	%f2, [fill_s+4];
	ld.param.u8 	%rs1, [fill_flag];
	mov.u32 	%r2, %ctaid.x;
	mov.u32 	%r3, %ntid.x;
	mov.u32 	%r4, %tid.x;
	mad.lo.s32 	%r5, %r2, %r3, %r4;
	setp.ge.u32 	%p1, %r5, %r1;
	@%p1 bra 	$L_done;
	cvt.rn.f32.u32 	%f3, %r5;
	fma.rn.f32 	%f4, %f3, %f1, %f2;
	cvt.u32.u16 	%r6, %rs1;
	cvt.rn.f32.u32 	%f5, %r6;
	add.f32 	%f6, %f4, %f5;
	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.u32 	%rd3, %r5, 4;
	add.s64 	%rd4, %rd2, %rd3;
	st.global.f32 	[%rd4], %f6;
$L_done:
	ret;
}

.visible .entry nop()
{
	ret;
}
`

// FillParams packs fill's parameter block.
func FillParams(out uint64, n uint32, scale, bias float32, flag uint8) []byte {
	b := make([]byte, 21)
	putU64(b[0:], out)
	putU32(b[8:], n)
	putU32(b[12:], f32bits(scale))
	putU32(b[16:], f32bits(bias))
	b[20] = flag
	return b
}
