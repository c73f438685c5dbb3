/*
 * graph.c - stream capture and graphs of the driver API, forwarded: the
 * host's driver captures the stream (protocol area 0x07). A graph and an
 * executable graph are the session's handles, handed to the program as
 * opaque pointers. The simple calls (instantiate, launch, destroy) are
 * generated from the call registry (calls_gen.c); here are the ones that
 * keep state in the library: the count of captures in progress, which
 * lets cuStreamIsCapturing answer locally (no capture anywhere in the
 * process: no stream is capturing) and ask the host only while one is.
 */
#include <string.h>

#include "cuda_types.h"
#include "core.h"

#define CU_API VGPU_EXPORT CUresult

/* Driver captures begun by this process and not yet ended. */
static int captures;
static unsigned long long next_capture_id = 1;

int vgpu_cu_captures_active(void)
{
	return __atomic_load_n(&captures, __ATOMIC_ACQUIRE) > 0;
}

/* The host's capture status of s (CUstreamCaptureStatus). */
CUresult vgpu_cu_capture_status(CUstream s, int *status)
{
	struct vgpu_handle_req req = {.handle = vgpu_stream_handle(s)};
	struct vgpu_capture_status_reply rep = {0};
	CUresult rc = vgpu_call(VGPU_OP_STREAM_IS_CAPTURING, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	if (rc)
		return rc;
	*status = (int)rep.status;
	return 0;
}

CU_API cuStreamBeginCapture_v2(CUstream s, int mode)
{
	VGPU_API();
	if (mode < 0 || mode > 2)
		return VGPU_E_INVALID_VALUE;
	if (!vgpu_stream_handle(s))
		return 900; /* CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: the default stream */
	struct vgpu_begin_capture_req req = {.stream = s->handle, .mode = (uint32_t)mode};
	CUresult rc = vgpu_call(VGPU_OP_STREAM_BEGIN_CAPTURE, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
	if (rc)
		return rc;
	s->capture_id = __atomic_fetch_add(&next_capture_id, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&captures, 1, __ATOMIC_RELEASE);
	return 0;
}
VGPU_ALIAS(cuStreamBeginCapture_v2_ptsz, cuStreamBeginCapture_v2);

/* The CUDA 10.0 form: global mode. */
CU_API cuStreamBeginCapture(CUstream s)
{
	VGPU_API();
	return cuStreamBeginCapture_v2(s, 0);
}
VGPU_ALIAS(cuStreamBeginCapture_ptsz, cuStreamBeginCapture);

CU_API cuStreamEndCapture(CUstream s, void **graph)
{
	VGPU_API();
	if (!graph)
		return VGPU_E_INVALID_VALUE;
	if (!vgpu_stream_handle(s))
		return 401; /* CUDA_ERROR_ILLEGAL_STATE: the default stream never captures */
	struct vgpu_handle_req req = {.handle = s->handle};
	struct vgpu_handle_reply rep = {0};
	CUresult rc = vgpu_call(VGPU_OP_STREAM_END_CAPTURE, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	/* The capture is over whatever the answer, unless there was none. */
	if (rc != 401 && s->capture_id) {
		s->capture_id = 0;
		__atomic_fetch_sub(&captures, 1, __ATOMIC_RELEASE);
	}
	if (rc)
		return rc;
	*graph = (void *)(uintptr_t)rep.handle;
	return 0;
}
VGPU_ALIAS(cuStreamEndCapture_ptsz, cuStreamEndCapture);

/* CUDA 10.0-11.x: (exec, graph, error node, log buffer, its size). */
CU_API cuGraphInstantiate_v2(void **exec, void *graph, void **err_node, char *log, size_t log_size)
{
	VGPU_API();
	if (err_node)
		*err_node = NULL;
	if (log && log_size)
		log[0] = 0;
	return cuGraphInstantiateWithFlags(exec, graph, 0);
}
VGPU_ALIAS(cuGraphInstantiate, cuGraphInstantiate_v2);

/* CUDA_GRAPH_INSTANTIATE_PARAMS (cuda.h, 12.0). */
struct vgpu_instantiate_params {
	unsigned long long flags;
	CUstream upload_stream;
	void *err_node_out;
	int result_out; /* CUgraphInstantiateResult: 0 success, 1 error */
};

CU_API cuGraphInstantiateWithParams(void **exec, void *graph, struct vgpu_instantiate_params *p)
{
	VGPU_API();
	if (!p)
		return VGPU_E_INVALID_VALUE;
	/* UPLOAD (2) uploads on p->upload_stream; the host's instantiation
	 * uploads on its own, so the flag is honoured without it. */
	CUresult rc = cuGraphInstantiateWithFlags(exec, graph, p->flags);
	p->err_node_out = NULL;
	p->result_out = rc ? 1 : 0;
	return rc;
}
VGPU_ALIAS(cuGraphInstantiateWithParams_ptsz, cuGraphInstantiateWithParams);
