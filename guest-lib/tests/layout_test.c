/*
 * layout_test.c - the library's own CUDA 11.x struct layouts (src/cudart/rt.h,
 * src/cuda/cuda_types.h) against the real CUDA 11.8 headers, field by field:
 * layout_real.c is compiled against the real headers, this file against
 * ours, from the same field list (layout_fields.h). Built only where
 * /usr/include/driver_types.h exists. The 12.x/13.x cudaDeviceProp layouts
 * are checked through each library's version node by hostmode_test.
 */
#include <stddef.h>
#include <stdio.h>

#include "rt.h"

#define PROP struct rt_prop11
#define FATTR struct rt_func_attrs
#define P3D struct rt_3d
#define LCFG CUlaunchConfig
#define PTRATTR struct rt_ptr_attrs
#define KNODE struct rt_kernel_params
#define MSET struct rt_memset_params
#define HNODE struct rt_host_params
#define RLCFG struct rt_launch_config
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
