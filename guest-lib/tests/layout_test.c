/*
 * layout_test.c - the driver library's own struct layouts
 * (src/cuda/cuda_types.h) and the runtime structs the C tests declare
 * (tests/rt_abi.h: the head of cudaDeviceProp, cudaMemcpy3DParms,
 * cudaPointerAttributes) against the real CUDA 11.8 headers, field by
 * field: layout_real.c is compiled against the real headers, this file
 * against ours, from the same field list (layout_fields.h). Built only where
 * /usr/include/driver_types.h exists.
 */
#include <stddef.h>
#include <stdio.h>

#include "rt_abi.h"

#define PROP struct rt_prop11_head
#define P3D struct rt_3d
#define LCFG CUlaunchConfig
#define PTRATTR struct rt_ptr_attrs
#define M2D CUDA_MEMCPY2D
#define M3D CUDA_MEMCPY3D
#define A3D CUDA_ARRAY3D_DESCRIPTOR
#define ARRD CUDA_ARRAY_DESCRIPTOR
#define RESD CUDA_RESOURCE_DESC
#define TEXD CUDA_TEXTURE_DESC
#define VIEWD CUDA_RESOURCE_VIEW_DESC
#define ROW(t, f) {#t "." #f, offsetof(t, f)},
#define SIZE(t) {"sizeof " #t, sizeof(t)},
static const struct {
	const char *what;
	size_t v;
} ours[] = {
#include "layout_fields.h"
};
extern const size_t layout_real[];

int main(void)
{
	int bad = 0;
	for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++)
		if (ours[i].v != layout_real[i]) {
			printf("FAIL %s: %zu, real header %zu\n", ours[i].what, ours[i].v, layout_real[i]);
			bad++;
		}
	printf("%s %zu offsets and sizes match the CUDA 11.8 headers\n", bad ? "FAIL" : "ok  ", sizeof ours / sizeof ours[0]);
	return bad != 0;
}
