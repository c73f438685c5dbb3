/*
 * texture.c - texture and surface objects (libcuda.so.1). The object is
 * the host driver's value (kernels take it by value); its resource names
 * the session's arrays (CUarray) or device memory as the guest sees them,
 * and the backend resolves and checks both.
 */
#include <string.h>

#include "cuda_types.h"

#define CU_API VGPU_EXPORT CUresult

_Static_assert(sizeof(CUDA_RESOURCE_DESC) == 144, "CUDA_RESOURCE_DESC");
_Static_assert(sizeof(CUDA_TEXTURE_DESC) == 104, "CUDA_TEXTURE_DESC");
_Static_assert(sizeof(CUDA_RESOURCE_VIEW_DESC) == 112, "CUDA_RESOURCE_VIEW_DESC");

enum { RES_ARRAY = 0, RES_MIPMAP = 1, RES_LINEAR = 2, RES_PITCH2D = 3 };

static uint32_t fbits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

static void to_wire(const CUDA_RESOURCE_DESC *r, struct vgpu_resource_desc *o)
{
	memset(o, 0, sizeof *o);
	o->type = (uint32_t)r->resType;
	o->flags = r->flags;
	switch (r->resType) {
	case RES_ARRAY:
		o->array = (uint64_t)(uintptr_t)r->res.array.hArray;
		break;
	case RES_MIPMAP:
		o->array = (uint64_t)(uintptr_t)r->res.mipmap.hMipmappedArray;
		break;
	case RES_LINEAR:
		o->ptr = r->res.linear.devPtr;
		o->format = (uint32_t)r->res.linear.format;
		o->channels = r->res.linear.numChannels;
		o->width = r->res.linear.sizeInBytes;
		break;
	case RES_PITCH2D:
		o->ptr = r->res.pitch2D.devPtr;
		o->format = (uint32_t)r->res.pitch2D.format;
		o->channels = r->res.pitch2D.numChannels;
		o->width = r->res.pitch2D.width;
		o->height = r->res.pitch2D.height;
		o->pitch = r->res.pitch2D.pitchInBytes;
		break;
	}
}

static void from_wire(const struct vgpu_resource_desc *o, CUDA_RESOURCE_DESC *r)
{
	memset(r, 0, sizeof *r);
	r->resType = (int)o->type;
	r->flags = o->flags;
	switch (o->type) {
	case RES_ARRAY:
		r->res.array.hArray = (CUarray)(uintptr_t)o->array;
		break;
	case RES_LINEAR:
		r->res.linear.devPtr = o->ptr;
		r->res.linear.format = (int)o->format;
		r->res.linear.numChannels = o->channels;
		r->res.linear.sizeInBytes = o->width;
		break;
	case RES_PITCH2D:
		r->res.pitch2D.devPtr = o->ptr;
		r->res.pitch2D.format = (int)o->format;
		r->res.pitch2D.numChannels = o->channels;
		r->res.pitch2D.width = o->width;
		r->res.pitch2D.height = o->height;
		r->res.pitch2D.pitchInBytes = o->pitch;
		break;
	}
}

CU_API cuTexObjectCreate(CUtexObject *p, const CUDA_RESOURCE_DESC *r, const CUDA_TEXTURE_DESC *t,
			 const CUDA_RESOURCE_VIEW_DESC *v)
{
	VGPU_API();
	if (!p || !r || !t)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_tex_object_create_req req;
	memset(&req, 0, sizeof req);
	to_wire(r, &req.res);
	req.tex.address_mode0 = (uint32_t)t->addressMode[0];
	req.tex.address_mode1 = (uint32_t)t->addressMode[1];
	req.tex.address_mode2 = (uint32_t)t->addressMode[2];
	req.tex.filter = (uint32_t)t->filterMode;
	req.tex.flags = t->flags;
	req.tex.max_anisotropy = t->maxAnisotropy;
	req.tex.mipmap_filter = (uint32_t)t->mipmapFilterMode;
	req.tex.mipmap_bias = fbits(t->mipmapLevelBias);
	req.tex.min_mipmap_clamp = fbits(t->minMipmapLevelClamp);
	req.tex.max_mipmap_clamp = fbits(t->maxMipmapLevelClamp);
	req.tex.border0 = fbits(t->borderColor[0]);
	req.tex.border1 = fbits(t->borderColor[1]);
	req.tex.border2 = fbits(t->borderColor[2]);
	req.tex.border3 = fbits(t->borderColor[3]);
	if (v) {
		req.has_view = 1;
		req.view.format = (uint32_t)v->format;
		req.view.width = v->width;
		req.view.height = v->height;
		req.view.depth = v->depth;
		req.view.first_mip = v->firstMipmapLevel;
		req.view.last_mip = v->lastMipmapLevel;
		req.view.first_layer = v->firstLayer;
		req.view.last_layer = v->lastLayer;
	}
	struct vgpu_handle_reply rep = {0};
	CUresult rc = vgpu_call(VGPU_OP_TEX_OBJECT_CREATE, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	if (!rc)
		*p = rep.handle;
	return rc;
}

CU_API cuTexObjectDestroy(CUtexObject o)
{
	VGPU_API();
	struct vgpu_handle_req req = {.handle = o};
	return vgpu_call(VGPU_OP_TEX_OBJECT_DESTROY, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
}

static CUresult get_resource(uint16_t op, CUDA_RESOURCE_DESC *r, uint64_t o)
{
	if (!r)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_handle_req req = {.handle = o};
	struct vgpu_resource_desc rep;
	memset(&rep, 0, sizeof rep);
	CUresult rc = vgpu_call(op, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	if (!rc)
		from_wire(&rep, r);
	return rc;
}

CU_API cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *r, CUtexObject o)
{
	VGPU_API();
	return get_resource(VGPU_OP_TEX_OBJECT_GET_RESOURCE_DESC, r, o);
}

static float fval(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

CU_API cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC *t, CUtexObject o)
{
	VGPU_API();
	if (!t)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_handle_req req = {.handle = o};
	struct vgpu_texture_desc r;
	memset(&r, 0, sizeof r);
	CUresult rc = vgpu_call(VGPU_OP_TEX_OBJECT_GET_TEXTURE_DESC, &req, sizeof req, NULL, 0, &r, sizeof r, NULL, 0, NULL);
	if (rc)
		return rc;
	memset(t, 0, sizeof *t);
	t->addressMode[0] = (int)r.address_mode0;
	t->addressMode[1] = (int)r.address_mode1;
	t->addressMode[2] = (int)r.address_mode2;
	t->filterMode = (int)r.filter;
	t->flags = r.flags;
	t->maxAnisotropy = r.max_anisotropy;
	t->mipmapFilterMode = (int)r.mipmap_filter;
	t->mipmapLevelBias = fval(r.mipmap_bias);
	t->minMipmapLevelClamp = fval(r.min_mipmap_clamp);
	t->maxMipmapLevelClamp = fval(r.max_mipmap_clamp);
	t->borderColor[0] = fval(r.border0);
	t->borderColor[1] = fval(r.border1);
	t->borderColor[2] = fval(r.border2);
	t->borderColor[3] = fval(r.border3);
	return 0;
}

/* The view the object was made with (all zero, CU_RES_VIEW_FORMAT_NONE,
 * when it was made without one). */
CU_API cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC *v, CUtexObject o)
{
	VGPU_API();
	if (!v)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_handle_req req = {.handle = o};
	struct vgpu_view_reply r;
	memset(&r, 0, sizeof r);
	CUresult rc = vgpu_call(VGPU_OP_TEX_OBJECT_GET_VIEW_DESC, &req, sizeof req, NULL, 0, &r, sizeof r, NULL, 0, NULL);
	if (rc)
		return rc;
	memset(v, 0, sizeof *v);
	v->format = (int)r.view.format;
	v->width = r.view.width;
	v->height = r.view.height;
	v->depth = r.view.depth;
	v->firstMipmapLevel = r.view.first_mip;
	v->lastMipmapLevel = r.view.last_mip;
	v->firstLayer = r.view.first_layer;
	v->lastLayer = r.view.last_layer;
	return 0;
}

CU_API cuSurfObjectCreate(CUsurfObject *p, const CUDA_RESOURCE_DESC *r)
{
	VGPU_API();
	if (!p || !r)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_resource_desc req;
	to_wire(r, &req);
	struct vgpu_handle_reply rep = {0};
	CUresult rc = vgpu_call(VGPU_OP_SURF_OBJECT_CREATE, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	if (!rc)
		*p = rep.handle;
	return rc;
}

CU_API cuSurfObjectDestroy(CUsurfObject o)
{
	VGPU_API();
	struct vgpu_handle_req req = {.handle = o};
	return vgpu_call(VGPU_OP_SURF_OBJECT_DESTROY, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
}

CU_API cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *r, CUsurfObject o)
{
	VGPU_API();
	return get_resource(VGPU_OP_SURF_OBJECT_GET_RESOURCE_DESC, r, o);
}
