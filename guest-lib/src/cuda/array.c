/*
 * array.c - CUDA arrays and 3D copies (libcuda.so.1).
 *
 * An array lives on the host GPU; its CUarray is the session's handle for
 * it. Copies between device memory and arrays are one MEMCPY_3D each. A
 * copy with a host side is staged through device memory: the host box
 * travels as the ordinary host<->device copies (which read and write guest
 * memory as every other copy does) into or out of a dense device buffer,
 * and MEMCPY_3D moves that buffer to or from the array. Staged copies are
 * complete when they return, the async forms too (the driver may finish an
 * async copy early; the staging buffer is freed at once).
 */
#include <string.h>

#include "cuda_types.h"

#define CU_API VGPU_EXPORT CUresult

static uint64_t arr_handle(void *a) { return (uint64_t)(uintptr_t)a; }

static CUresult array_create(CUarray *p, size_t w, size_t h, size_t d, int fmt, unsigned ch, unsigned flags)
{
	if (!p)
		return VGPU_E_INVALID_VALUE;
	int dev;
	CUresult rc = vgpu_ctx_device(&dev);
	if (rc)
		return rc;
	struct vgpu_array_create_req req = {.device = (uint32_t)dev, .format = (uint32_t)fmt, .channels = ch,
					    .flags = flags, .width = w, .height = h, .depth = d};
	struct vgpu_handle_reply rep = {0};
	rc = vgpu_call(VGPU_OP_ARRAY_CREATE, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	if (!rc)
		*p = (CUarray)(uintptr_t)rep.handle;
	return rc;
}

CU_API cuArrayCreate_v2(CUarray *p, const CUDA_ARRAY_DESCRIPTOR *d)
{
	VGPU_API();
	if (!d)
		return VGPU_E_INVALID_VALUE;
	return array_create(p, d->Width, d->Height, 0, d->Format, d->NumChannels, 0);
}

CU_API cuArray3DCreate_v2(CUarray *p, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	VGPU_API();
	if (!d)
		return VGPU_E_INVALID_VALUE;
	return array_create(p, d->Width, d->Height, d->Depth, d->Format, d->NumChannels, d->Flags);
}

static CUresult array_desc(CUarray a, struct vgpu_array_desc_reply *r)
{
	if (!a)
		return VGPU_E_INVALID_HANDLE;
	struct vgpu_handle_req req = {.handle = arr_handle(a)};
	return vgpu_call(VGPU_OP_ARRAY_GET_DESCRIPTOR, &req, sizeof req, NULL, 0, r, sizeof *r, NULL, 0, NULL);
}

CU_API cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *d, CUarray a)
{
	VGPU_API();
	if (!d)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_array_desc_reply r = {0};
	CUresult rc = array_desc(a, &r);
	if (rc)
		return rc;
	d->Width = r.width;
	d->Height = r.height;
	d->Format = (int)r.format;
	d->NumChannels = r.channels;
	return 0;
}

CU_API cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray a)
{
	VGPU_API();
	if (!d)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_array_desc_reply r = {0};
	CUresult rc = array_desc(a, &r);
	if (rc)
		return rc;
	d->Width = r.width;
	d->Height = r.height;
	d->Depth = r.depth;
	d->Format = (int)r.format;
	d->NumChannels = r.channels;
	d->Flags = r.flags;
	return 0;
}

/* ---------------- 3D copies ---------------- */

/* What one side of a copy is. */
enum { SIDE_HOST, SIDE_DEVICE, SIDE_ARRAY, SIDE_BAD };

static int side_kind(int type, CUdeviceptr dev, void *arr)
{
	switch (type) {
	case VGPU_MT_HOST:
		return SIDE_HOST;
	case VGPU_MT_DEVICE:
		return SIDE_DEVICE;
	case VGPU_MT_ARRAY:
		return arr ? SIDE_ARRAY : SIDE_BAD;
	case VGPU_MT_UNIFIED:
		return vgpu_devmap_find(dev, NULL, NULL, NULL) ? SIDE_DEVICE : SIDE_HOST;
	default:
		return SIDE_BAD;
	}
}

/* Fills one side of MEMCPY_3D (device memory or an array). */
static void box_side(struct vgpu_copy_side *o, int kind, CUdeviceptr dev, void *arr, size_t x, size_t y, size_t z,
		     size_t pitch, size_t height)
{
	memset(o, 0, sizeof *o);
	o->x = x;
	o->y = y;
	o->z = z;
	if (kind == SIDE_ARRAY) {
		o->array = arr_handle(arr);
		return;
	}
	o->ptr = dev;
	o->pitch = pitch;
	o->height = height;
}

/* One MEMCPY_3D: queued when async, else answered. */
static CUresult box_copy(struct vgpu_box_copy_req *req, CUstream s, int async)
{
	req->stream = vgpu_stream_handle(s);
	req->flags = async ? VGPU_COPY_ASYNC : 0;
	if (async)
		return vgpu_queue(VGPU_OP_MEMCPY_3D, req, sizeof *req);
	return vgpu_call(VGPU_OP_MEMCPY_3D, req, sizeof *req, NULL, 0, NULL, 0, NULL, 0, NULL);
}

/* Slice z of a linear (host or device) 3D box as a 2D copy: row
 * (Z+z)*height + Y of memory in rows of pitch bytes. */
static CUresult linear_slices(const CUDA_MEMCPY3D *c, CUstream s, int async)
{
	size_t sp = c->srcPitch ? c->srcPitch : c->WidthInBytes, dp = c->dstPitch ? c->dstPitch : c->WidthInBytes;
	if (c->Depth > 1 && (c->srcHeight < c->Height + c->srcY || c->dstHeight < c->Height + c->dstY))
		return VGPU_E_INVALID_VALUE;
	for (size_t z = 0; z < c->Depth; z++) {
		CUDA_MEMCPY2D m = {
			.srcXInBytes = c->srcXInBytes, .srcY = (c->srcZ + z) * c->srcHeight + c->srcY,
			.srcMemoryType = c->srcMemoryType, .srcHost = c->srcHost, .srcDevice = c->srcDevice, .srcPitch = sp,
			.dstXInBytes = c->dstXInBytes, .dstY = (c->dstZ + z) * c->dstHeight + c->dstY,
			.dstMemoryType = c->dstMemoryType, .dstHost = c->dstHost, .dstDevice = c->dstDevice, .dstPitch = dp,
			.WidthInBytes = c->WidthInBytes, .Height = c->Height,
		};
		CUresult rc = vgpu_copy2d(&m, s, async);
		if (rc)
			return rc;
	}
	return 0;
}

/* Host <-> array, through a dense device buffer of the box. */
static CUresult staged(const CUDA_MEMCPY3D *c, int src_host, CUstream s)
{
	size_t w = c->WidthInBytes, h = c->Height, d = c->Depth;
	if (h && d && (w > SIZE_MAX / h || w * h > SIZE_MAX / d))
		return VGPU_E_INVALID_VALUE;
	int dev;
	CUresult rc = vgpu_ctx_device(&dev);
	if (rc)
		return rc;
	uint64_t buf;
	rc = vgpu_mem_alloc(dev, (uint64_t)w * h * d, &buf);
	if (rc)
		return rc;
	/* the host side as a linear copy to or from the buffer (pitch w, h rows a slice) */
	CUDA_MEMCPY3D lin = *c;
	struct vgpu_box_copy_req req = {.width = w, .height = h, .depth = d};
	if (src_host) {
		lin.dstMemoryType = VGPU_MT_DEVICE;
		lin.dstDevice = buf;
		lin.dstXInBytes = lin.dstY = lin.dstZ = 0;
		lin.dstPitch = w;
		lin.dstHeight = h;
		box_side(&req.src, SIDE_DEVICE, buf, NULL, 0, 0, 0, w, h);
		box_side(&req.dst, SIDE_ARRAY, 0, c->dstArray, c->dstXInBytes, c->dstY, c->dstZ, 0, 0);
		rc = linear_slices(&lin, s, 0);
		if (!rc)
			rc = box_copy(&req, s, 0);
	} else {
		lin.srcMemoryType = VGPU_MT_DEVICE;
		lin.srcDevice = buf;
		lin.srcXInBytes = lin.srcY = lin.srcZ = 0;
		lin.srcPitch = w;
		lin.srcHeight = h;
		box_side(&req.src, SIDE_ARRAY, 0, c->srcArray, c->srcXInBytes, c->srcY, c->srcZ, 0, 0);
		box_side(&req.dst, SIDE_DEVICE, buf, NULL, 0, 0, 0, w, h);
		rc = box_copy(&req, s, 0);
		if (!rc)
			rc = linear_slices(&lin, s, 0);
	}
	CUresult frc = vgpu_mem_free(buf);
	return rc ? rc : frc;
}

CUresult vgpu_copy3d(const CUDA_MEMCPY3D *c, CUstream s, int async)
{
	if (!c || c->srcLOD || c->dstLOD || c->reserved0 || c->reserved1)
		return VGPU_E_INVALID_VALUE;
	int sk = side_kind(c->srcMemoryType, c->srcDevice, c->srcArray);
	int dk = side_kind(c->dstMemoryType, c->dstDevice, c->dstArray);
	if (sk == SIDE_BAD || dk == SIDE_BAD)
		return c->srcMemoryType == VGPU_MT_ARRAY || c->dstMemoryType == VGPU_MT_ARRAY ? VGPU_E_INVALID_HANDLE
											 : VGPU_E_INVALID_VALUE;
	if (!c->WidthInBytes || !c->Height || !c->Depth)
		return 0;
	if (sk != SIDE_ARRAY && dk != SIDE_ARRAY)
		return linear_slices(c, s, async);
	if (sk == SIDE_HOST || dk == SIDE_HOST)
		return staged(c, sk == SIDE_HOST, s);
	size_t sp = c->srcPitch ? c->srcPitch : c->WidthInBytes, dp = c->dstPitch ? c->dstPitch : c->WidthInBytes;
	size_t sh = c->srcHeight ? c->srcHeight : c->Height, dh = c->dstHeight ? c->dstHeight : c->Height;
	struct vgpu_box_copy_req req = {.width = c->WidthInBytes, .height = c->Height, .depth = c->Depth};
	box_side(&req.src, sk, c->srcDevice, c->srcArray, c->srcXInBytes, c->srcY, c->srcZ, sp, sh);
	box_side(&req.dst, dk, c->dstDevice, c->dstArray, c->dstXInBytes, c->dstY, c->dstZ, dp, dh);
	return box_copy(&req, s, async);
}

CU_API cuMemcpy3D_v2(const CUDA_MEMCPY3D *c)
{
	VGPU_API();
	return vgpu_copy3d(c, NULL, 0);
}
VGPU_ALIAS(cuMemcpy3D_v2_ptds, cuMemcpy3D_v2);

CU_API cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *c, CUstream s)
{
	VGPU_API();
	return vgpu_copy3d(c, s, 1);
}
VGPU_ALIAS(cuMemcpy3DAsync_v2_ptsz, cuMemcpy3DAsync_v2);

/* The 1D array copies: bytes [off, off+n) of an array's first row. */
static CUresult copy1d(int st, const void *sh, CUdeviceptr sd, CUarray sa, size_t soff, int dt, void *dh,
		       CUdeviceptr dd, CUarray da, size_t doff, size_t n, CUstream s, int async)
{
	if ((st == VGPU_MT_ARRAY && !sa) || (dt == VGPU_MT_ARRAY && !da))
		return VGPU_E_INVALID_HANDLE;
	CUDA_MEMCPY3D m = {
		.srcXInBytes = st == VGPU_MT_ARRAY ? soff : 0, .srcMemoryType = st, .srcHost = sh,
		.srcDevice = sd, .srcArray = sa, .srcPitch = n, .srcHeight = 1,
		.dstXInBytes = dt == VGPU_MT_ARRAY ? doff : 0, .dstMemoryType = dt, .dstHost = dh,
		.dstDevice = dd, .dstArray = da, .dstPitch = n, .dstHeight = 1,
		.WidthInBytes = n, .Height = 1, .Depth = 1,
	};
	return vgpu_copy3d(&m, s, async);
}

CU_API cuMemcpyHtoA_v2(CUarray dst, size_t off, const void *src, size_t n)
{
	VGPU_API();
	return copy1d(VGPU_MT_HOST, src, 0, NULL, 0, VGPU_MT_ARRAY, NULL, 0, dst, off, n, NULL, 0);
}
VGPU_ALIAS(cuMemcpyHtoA_v2_ptds, cuMemcpyHtoA_v2);

CU_API cuMemcpyAtoH_v2(void *dst, CUarray src, size_t off, size_t n)
{
	VGPU_API();
	return copy1d(VGPU_MT_ARRAY, NULL, 0, src, off, VGPU_MT_HOST, dst, 0, NULL, 0, n, NULL, 0);
}
VGPU_ALIAS(cuMemcpyAtoH_v2_ptds, cuMemcpyAtoH_v2);

CU_API cuMemcpyHtoAAsync_v2(CUarray dst, size_t off, const void *src, size_t n, CUstream s)
{
	VGPU_API();
	return copy1d(VGPU_MT_HOST, src, 0, NULL, 0, VGPU_MT_ARRAY, NULL, 0, dst, off, n, s, 1);
}
VGPU_ALIAS(cuMemcpyHtoAAsync_v2_ptsz, cuMemcpyHtoAAsync_v2);

CU_API cuMemcpyAtoHAsync_v2(void *dst, CUarray src, size_t off, size_t n, CUstream s)
{
	VGPU_API();
	return copy1d(VGPU_MT_ARRAY, NULL, 0, src, off, VGPU_MT_HOST, dst, 0, NULL, 0, n, s, 1);
}
VGPU_ALIAS(cuMemcpyAtoHAsync_v2_ptsz, cuMemcpyAtoHAsync_v2);

CU_API cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t off, size_t n)
{
	VGPU_API();
	return copy1d(VGPU_MT_ARRAY, NULL, 0, src, off, VGPU_MT_DEVICE, NULL, dst, NULL, 0, n, NULL, 0);
}
VGPU_ALIAS(cuMemcpyAtoD_v2_ptds, cuMemcpyAtoD_v2);

CU_API cuMemcpyDtoA_v2(CUarray dst, size_t off, CUdeviceptr src, size_t n)
{
	VGPU_API();
	return copy1d(VGPU_MT_DEVICE, NULL, src, NULL, 0, VGPU_MT_ARRAY, NULL, 0, dst, off, n, NULL, 0);
}
VGPU_ALIAS(cuMemcpyDtoA_v2_ptds, cuMemcpyDtoA_v2);

CU_API cuMemcpyAtoA_v2(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n)
{
	VGPU_API();
	return copy1d(VGPU_MT_ARRAY, NULL, 0, src, soff, VGPU_MT_ARRAY, NULL, 0, dst, doff, n, NULL, 0);
}
VGPU_ALIAS(cuMemcpyAtoA_v2_ptds, cuMemcpyAtoA_v2);
