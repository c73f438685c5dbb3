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
#include <pthread.h>
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
	if (rc) {
		/* 901 (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED): a call in the
		 * capture failed; the host destroyed the graph. */
		*graph = NULL;
		return rc;
	}
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

/* ---- graphs node by node: node handles are the session's, as opaque
 * pointers (CUgraphNode), each of one graph. ---- */

#include <stdlib.h>

/* CUmemorytype (cuda.h). */
#define MEMTYPE_HOST 1
#define MEMTYPE_DEVICE 2
#define MEMTYPE_ARRAY 3
#define MEMTYPE_UNIFIED 4

/* CUDA_KERNEL_NODE_PARAMS (cuda.h): the first version is 56 bytes; _v2
 * (CUDA 12) adds the CUkernel and the context. */
struct kernel_node_params {
	void *func;
	unsigned grid[3];
	unsigned block[3];
	unsigned shared_mem;
	void **kernel_params;
	void **extra;
	void *kern; /* _v2 only */
	void *ctx; /* _v2 only */
};
_Static_assert(offsetof(struct kernel_node_params, kernel_params) == 40, "CUDA_KERNEL_NODE_PARAMS.kernelParams");
_Static_assert(offsetof(struct kernel_node_params, kern) == 56, "CUDA_KERNEL_NODE_PARAMS_v2.kern");

/* CUDA_MEMCPY3D (cuda.h). */
struct memcpy3d_side {
	size_t x_bytes, y, z, lod;
	int type;
	const void *host;
	CUdeviceptr device;
	void *array;
	void *reserved;
	size_t pitch, height;
};
struct memcpy3d {
	struct memcpy3d_side src, dst;
	size_t width, height, depth;
};
_Static_assert(sizeof(struct memcpy3d) == 200, "CUDA_MEMCPY3D size");
_Static_assert(offsetof(struct memcpy3d, dst) == 88, "CUDA_MEMCPY3D.dstXInBytes");

/* CUDA_MEMSET_NODE_PARAMS (cuda.h). */
struct memset_node_params {
	CUdeviceptr dst;
	size_t pitch;
	unsigned value;
	unsigned element_size;
	size_t width, height;
};
_Static_assert(sizeof(struct memset_node_params) == 40, "CUDA_MEMSET_NODE_PARAMS size");

static uint64_t node_handle(void *n) { return (uint64_t)(uintptr_t)n; }

CU_API cuGraphCreate(void **graph, unsigned flags)
{
	VGPU_API();
	if (!graph || flags)
		return VGPU_E_INVALID_VALUE;
	int d;
	CUresult rc = vgpu_ctx_device(&d);
	if (rc)
		return rc;
	struct vgpu_graph_create_req req = {.device = (uint32_t)d};
	struct vgpu_handle_reply rep = {0};
	rc = vgpu_call(VGPU_OP_GRAPH_CREATE, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	if (rc)
		return rc;
	*graph = (void *)(uintptr_t)rep.handle;
	return 0;
}

/* cuGraphGetNodes / cuGraphGetRootNodes: nodes NULL asks the count; else
 * up to *num handles, the rest of the array NULL, *num the handles given. */
static CUresult graph_nodes(void *graph, void **nodes, size_t *num, uint32_t roots)
{
	if (!graph || !num)
		return VGPU_E_INVALID_VALUE;
	size_t want = nodes ? *num : 0, got = 0;
	uint64_t *ids = malloc(VGPU_MAX_GRAPH_NODE_LIST * sizeof *ids);
	if (!ids)
		return VGPU_E_OUT_OF_MEMORY;
	struct vgpu_graph_nodes_reply rep = {0};
	CUresult rc;
	for (;;) {
		struct vgpu_graph_nodes_req req = {.graph = node_handle(graph), .roots = roots, .first = (uint32_t)got};
		uint32_t tl = 0;
		rc = vgpu_call(VGPU_OP_GRAPH_GET_NODES, &req, sizeof req, NULL, 0, &rep, sizeof rep, ids,
			       VGPU_MAX_GRAPH_NODE_LIST * sizeof *ids, &tl);
		if (rc)
			break;
		uint32_t n = rep.count;
		if (n > tl / sizeof *ids)
			n = tl / sizeof *ids;
		for (uint32_t i = 0; i < n && got < want; i++)
			nodes[got++] = (void *)(uintptr_t)ids[i];
		if (!nodes || got >= want || got >= rep.total || n == 0)
			break;
	}
	free(ids);
	if (rc)
		return rc;
	if (nodes) {
		for (size_t i = got; i < want; i++)
			nodes[i] = NULL;
		*num = got;
	} else {
		*num = rep.total;
	}
	return 0;
}

CU_API cuGraphGetNodes(void *graph, void **nodes, size_t *num)
{
	VGPU_API();
	return graph_nodes(graph, nodes, num, 0);
}

CU_API cuGraphGetRootNodes(void *graph, void **nodes, size_t *num)
{
	VGPU_API();
	return graph_nodes(graph, nodes, num, 1);
}

CU_API cuGraphNodeGetType(void *node, int *type)
{
	VGPU_API();
	if (!node || !type)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_handle_req req = {.handle = node_handle(node)};
	struct vgpu_graph_node_type_reply rep = {0};
	CUresult rc = vgpu_call(VGPU_OP_GRAPH_NODE_GET_TYPE, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	if (!rc)
		*type = (int)rep.type;
	return rc;
}

/*
 * A node request: the fixed part (fixed bytes, whose first fields are the
 * graph and the dependency count), then the dependencies, then extra
 * bytes; sent, and the new node's handle stored in *node. The caller has
 * filled everything of the fixed part but the graph and the count.
 */
static CUresult add_node(uint16_t op, void **node, void *graph, void *const *deps, size_t ndeps, void *fixed,
			 size_t fixed_len, const void *extra, size_t extra_len)
{
	if (!node || !graph || (ndeps && !deps) || ndeps > VGPU_MAX_GRAPH_DEPS)
		return VGPU_E_INVALID_VALUE;
	size_t len = fixed_len + ndeps * 8 + extra_len;
	uint8_t *b = malloc(len);
	if (!b)
		return VGPU_E_OUT_OF_MEMORY;
	struct {
		uint64_t graph;
		uint32_t num_deps;
	} head = {node_handle(graph), (uint32_t)ndeps};
	memcpy(fixed, &head.graph, 8);
	memcpy((uint8_t *)fixed + 8, &head.num_deps, 4);
	memcpy(b, fixed, fixed_len);
	for (size_t i = 0; i < ndeps; i++) {
		if (!deps[i]) {
			free(b);
			return VGPU_E_INVALID_VALUE;
		}
		uint64_t id = node_handle(deps[i]);
		memcpy(b + fixed_len + 8 * i, &id, 8);
	}
	if (extra_len)
		memcpy(b + fixed_len + ndeps * 8, extra, extra_len);
	struct vgpu_handle_reply rep = {0};
	CUresult rc = vgpu_call(op, b, (uint32_t)len, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	free(b);
	if (!rc)
		*node = (void *)(uintptr_t)rep.handle;
	return rc;
}

/* The launch of kernel node parameters p (_v2: a CUkernel may stand for
 * func) as the host takes it: *l and the packed block in params
 * (VGPU_MAX_PARAM_BYTES + 4 bytes). */
static CUresult kernel_launch(const struct kernel_node_params *p, int v2, struct vgpu_launch_req *l, uint8_t *params)
{
	if (!p)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_func *f = p->func;
	if (!f && v2)
		f = p->kern;
	if (!f)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = vgpu_func_resolve(&f);
	if (rc)
		return rc;
	memset(l, 0, sizeof *l);
	l->func = f->handle;
	l->grid_x = p->grid[0];
	l->grid_y = p->grid[1];
	l->grid_z = p->grid[2];
	l->block_x = p->block[0];
	l->block_y = p->block[1];
	l->block_z = p->block[2];
	l->shared_mem = p->shared_mem;
	return vgpu_pack_params(f, p->kernel_params, p->extra, params, &l->param_size);
}

static CUresult add_kernel_node(void **node, void *graph, void *const *deps, size_t ndeps,
				const struct kernel_node_params *p, int v2)
{
	uint8_t *params = malloc(VGPU_MAX_PARAM_BYTES + 4);
	if (!params)
		return VGPU_E_OUT_OF_MEMORY;
	struct vgpu_graph_add_kernel_node_req req;
	memset(&req, 0, sizeof req);
	CUresult rc = kernel_launch(p, v2, &req.launch, params);
	if (!rc)
		rc = add_node(VGPU_OP_GRAPH_ADD_KERNEL_NODE, node, graph, deps, ndeps, &req, sizeof req, params,
			      req.launch.param_size);
	free(params);
	return rc;
}

/* The CUDA 10-11 form (CUDA_KERNEL_NODE_PARAMS of 56 bytes). */
CU_API cuGraphAddKernelNode(void **node, void *graph, void *const *deps, size_t ndeps, const void *params)
{
	VGPU_API();
	struct kernel_node_params p;
	if (!params)
		return VGPU_E_INVALID_VALUE;
	memset(&p, 0, sizeof p);
	memcpy(&p, params, offsetof(struct kernel_node_params, kern));
	return add_kernel_node(node, graph, deps, ndeps, &p, 0);
}

/* CUDA 12+: CUDA_KERNEL_NODE_PARAMS_v2 (a CUkernel may stand for func). */
CU_API cuGraphAddKernelNode_v2(void **node, void *graph, void *const *deps, size_t ndeps,
			       const struct kernel_node_params *params)
{
	VGPU_API();
	return add_kernel_node(node, graph, deps, ndeps, params, 1);
}

/* One side of a 1D copy: device memory (*dev) or host memory (*host). */
static CUresult copy_side(const struct memcpy3d_side *s, size_t height, uint64_t *dev, const uint8_t **host)
{
	if (s->array || s->type == MEMTYPE_ARRAY || s->lod)
		return VGPU_E_NOT_SUPPORTED; /* CUDA arrays: not on vgpu */
	uint64_t off = s->x_bytes + (s->y + (uint64_t)s->z * s->height) * s->pitch;
	(void)height;
	switch (s->type) {
	case MEMTYPE_HOST:
		*host = (const uint8_t *)s->host + off;
		return 0;
	case MEMTYPE_DEVICE:
		*dev = s->device + off;
		return 0;
	case MEMTYPE_UNIFIED: {
		/* One address space: device memory if it is an allocation. */
		uint64_t base, size;
		int d;
		if (vgpu_devmap_find(s->device, &base, &size, &d))
			*dev = s->device + off;
		else
			*host = (const uint8_t *)(uintptr_t)s->device + off;
		return 0;
	}
	}
	return VGPU_E_INVALID_VALUE;
}

/* A CUDA_MEMCPY3D of a graph node as the host takes it: one contiguous
 * range on each side, host memory only pinned (CUDA_ERROR_NOT_SUPPORTED
 * otherwise, with a log line saying why). */
static CUresult graph_copy(const char *fn, const struct memcpy3d *p, struct vgpu_graph_memcpy_params *out)
{
	if (!p)
		return VGPU_E_INVALID_VALUE;
	uint64_t h = p->height ? p->height : 1, dp = p->depth ? p->depth : 1;
	/* One contiguous run of bytes on each side (what a 1D copy node is). */
	int flat = h * dp == 1 || (p->src.pitch == p->width && p->dst.pitch == p->width &&
				  (dp == 1 || (p->src.height == h && p->dst.height == h)));
	if (!p->width)
		return VGPU_E_INVALID_VALUE;
	if (!flat) {
		VWARN("%s: only copies of one contiguous range are supported (width %zu, height %zu, depth %zu, pitches %zu/%zu)",
		      fn, p->width, p->height, p->depth, p->src.pitch, p->dst.pitch);
		return VGPU_E_NOT_SUPPORTED;
	}
	uint64_t n = p->width * h * dp;
	uint64_t sdev = 0, ddev = 0;
	const uint8_t *shost = NULL, *dhost = NULL;
	CUresult rc = copy_side(&p->src, h, &sdev, &shost);
	if (!rc)
		rc = copy_side(&p->dst, h, &ddev, &dhost);
	if (rc)
		return rc;
	memset(out, 0, sizeof *out);
	const uint8_t *host = shost ? shost : dhost;
	if (shost && dhost) {
		VWARN("%s: host-to-host copy nodes are not supported on vgpu", fn);
		return VGPU_E_NOT_SUPPORTED;
	}
	out->dst = ddev;
	out->src = sdev;
	if (host) {
		struct vgpu_hostrange hr;
		if (!vgpu_regions_usable() || !vgpu_hostmap_find(host, n, &hr) || !hr.region) {
			VWARN("%s: host memory %p (+%llu) is not pinned: graph memcpy nodes need pinned host memory (cudaMallocHost/cudaHostRegister)",
			      fn, (const void *)host, (unsigned long long)n);
			return VGPU_E_NOT_SUPPORTED;
		}
		out->host.kind = VGPU_BUF_REGION;
		out->host.region = hr.region;
		out->host.offset = (uint64_t)(host - (const uint8_t *)hr.addr);
		out->host.len = n;
		out->dir = shost ? VGPU_GRAPH_COPY_HTOD : VGPU_GRAPH_COPY_DTOH;
	} else {
		out->dir = VGPU_GRAPH_COPY_DTOD;
		out->size = n;
	}
	return 0;
}

CU_API cuGraphAddMemcpyNode(void **node, void *graph, void *const *deps, size_t ndeps, const struct memcpy3d *p,
			    void *ctx)
{
	VGPU_API();
	struct vgpu_graph_memcpy_params c;
	CUresult rc = graph_copy("cuGraphAddMemcpyNode", p, &c);
	if (rc)
		return rc;
	struct vgpu_graph_add_memcpy_node_req req;
	memset(&req, 0, sizeof req);
	req.dir = c.dir;
	req.dst = c.dst;
	req.src = c.src;
	req.size = c.size;
	req.host = c.host;
	(void)ctx;
	return add_node(VGPU_OP_GRAPH_ADD_MEMCPY_NODE, node, graph, deps, ndeps, &req, sizeof req, NULL, 0);
}

CU_API cuGraphAddMemsetNode(void **node, void *graph, void *const *deps, size_t ndeps,
			    const struct memset_node_params *p, void *ctx)
{
	VGPU_API();
	if (!p)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_graph_add_memset_node_req req;
	memset(&req, 0, sizeof req);
	req.elem_size = p->element_size;
	req.dst = p->dst;
	req.value = p->value;
	req.width = p->width;
	req.height = p->height;
	req.pitch = p->pitch;
	(void)ctx;
	return add_node(VGPU_OP_GRAPH_ADD_MEMSET_NODE, node, graph, deps, ndeps, &req, sizeof req, NULL, 0);
}

CU_API cuGraphAddEmptyNode(void **node, void *graph, void *const *deps, size_t ndeps)
{
	VGPU_API();
	struct vgpu_graph_add_empty_node_req req;
	memset(&req, 0, sizeof req);
	return add_node(VGPU_OP_GRAPH_ADD_EMPTY_NODE, node, graph, deps, ndeps, &req, sizeof req, NULL, 0);
}

/* CUgraphExecUpdateResultInfo (cuda.h, CUDA 12). */
struct exec_update_info {
	int result;
	void *error_node;
	void *error_from_node;
};

/* GRAPH_EXEC_UPDATE: *result the CUgraphExecUpdateResult, *node the
 * node that failed (NULL: none named); not updated: 910. */
static CUresult exec_update(void *exec, void *graph, int *result, void **node)
{
	if (!exec || !graph)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_graph_exec_update_req req = {.exec = node_handle(exec), .graph = node_handle(graph)};
	struct vgpu_graph_exec_update_reply rep = {0};
	CUresult rc = vgpu_call(VGPU_OP_GRAPH_EXEC_UPDATE, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	if (rc)
		return rc;
	*result = (int)rep.result;
	*node = (void *)(uintptr_t)rep.error_node;
	return rep.result ? 910 /* CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE */ : 0;
}

/* CUDA 12+. */
CU_API cuGraphExecUpdate_v2(void *exec, void *graph, struct exec_update_info *info)
{
	VGPU_API();
	int result = 0;
	void *node = NULL;
	if (!info)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = exec_update(exec, graph, &result, &node);
	info->result = result;
	info->error_node = node;
	info->error_from_node = NULL;
	return rc;
}

/* CUDA 10.2-11.x: (exec, graph, error node, result). */
CU_API cuGraphExecUpdate(void *exec, void *graph, void **error_node, int *result)
{
	VGPU_API();
	int r = 0;
	void *node = NULL;
	if (!error_node || !result)
		return VGPU_E_INVALID_VALUE;
	CUresult rc = exec_update(exec, graph, &r, &node);
	*result = r;
	*error_node = node;
	return rc;
}

/* ---- node parameters: read from a graph's node, set on it or on its
 * copy in an executable graph instantiated from its graph. ---- */

/*
 * What cuGraphKernelNodeGetParams hands out: the parameter values and one
 * pointer to each, kept per node. The driver's stay valid until the node's
 * parameters change, so a read that finds them unchanged hands out the
 * same pointers again; a changed node's (set since) are freed.
 */
struct node_args {
	uint64_t node;
	uint64_t func;
	uint32_t size;
	void **ptrs;
	uint8_t *block;
	struct node_args *next;
};
static struct node_args *args_list;
static pthread_mutex_t args_mu = PTHREAD_MUTEX_INITIALIZER;

/* Keeps block and ptrs (the node's values as just read) or, when the node
 * is unchanged since the last read, frees them; returns the pointers to
 * hand out. */
static void **keep_args(uint64_t node, uint64_t func, uint32_t size, void **ptrs, uint8_t *block)
{
	struct node_args *a = NULL;
	pthread_mutex_lock(&args_mu);
	for (struct node_args *i = args_list; i; i = i->next)
		if (i->node == node) {
			a = i;
			break;
		}
	if (a && a->func == func && a->size == size && !memcmp(a->block, block, size)) {
		void **kept = a->ptrs;
		pthread_mutex_unlock(&args_mu);
		free(ptrs);
		free(block);
		return kept;
	}
	if (a) {
		free(a->ptrs);
		free(a->block);
	} else if ((a = calloc(1, sizeof *a))) {
		a->node = node;
		a->next = args_list;
		args_list = a;
	}
	if (a) {
		a->func = func;
		a->size = size;
		a->ptrs = ptrs;
		a->block = block;
	} /* else out of memory: the values leak rather than dangle */
	pthread_mutex_unlock(&args_mu);
	return ptrs;
}

static CUresult kernel_get(void *node, struct kernel_node_params *p, int v2)
{
	if (!node || !p)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_handle_req req = {.handle = node_handle(node)};
	struct vgpu_launch_req rep;
	uint8_t *block = malloc(VGPU_MAX_PARAM_BYTES + 4);
	if (!block)
		return VGPU_E_OUT_OF_MEMORY;
	uint32_t tl = 0;
	CUresult rc = vgpu_call(VGPU_OP_GRAPH_KERNEL_NODE_GET_PARAMS, &req, sizeof req, NULL, 0, &rep, sizeof rep, block,
				VGPU_MAX_PARAM_BYTES + 4, &tl);
	if (rc) {
		free(block);
		return rc;
	}
	struct vgpu_func *f = vgpu_func_by_handle(rep.func);
	if (!f || tl != rep.param_size || rep.param_size != f->param_bytes) {
		VERR("cuGraphKernelNodeGetParams: host named function %#llx (%s) with a %u-byte block in %u bytes",
		     (unsigned long long)rep.func, f ? "loaded" : "not loaded", rep.param_size, tl);
		free(block);
		return VGPU_E_UNKNOWN;
	}
	void **ptrs = calloc(f->nparams ? f->nparams : 1, sizeof *ptrs);
	if (!ptrs) {
		free(block);
		return VGPU_E_OUT_OF_MEMORY;
	}
	for (uint32_t i = 0; i < f->nparams; i++)
		ptrs[i] = block + f->params[i].offset;
	ptrs = keep_args(req.handle, rep.func, rep.param_size, ptrs, block);
	if (v2)
		memset(p, 0, sizeof *p);
	else
		memset(p, 0, offsetof(struct kernel_node_params, kern));
	p->func = f;
	p->grid[0] = rep.grid_x;
	p->grid[1] = rep.grid_y;
	p->grid[2] = rep.grid_z;
	p->block[0] = rep.block_x;
	p->block[1] = rep.block_y;
	p->block[2] = rep.block_z;
	p->shared_mem = rep.shared_mem;
	p->kernel_params = ptrs;
	return 0;
}

/* The CUDA 10-11 form (CUDA_KERNEL_NODE_PARAMS of 56 bytes). */
CU_API cuGraphKernelNodeGetParams(void *node, struct kernel_node_params *p)
{
	VGPU_API();
	return kernel_get(node, p, 0);
}

CU_API cuGraphKernelNodeGetParams_v2(void *node, struct kernel_node_params *p)
{
	VGPU_API();
	return kernel_get(node, p, 1);
}

static CUresult kernel_set(void *exec, void *node, const struct kernel_node_params *p, int v2)
{
	if (!node || !p)
		return VGPU_E_INVALID_VALUE;
	struct kernel_node_params k;
	memset(&k, 0, sizeof k);
	memcpy(&k, p, v2 ? sizeof k : offsetof(struct kernel_node_params, kern));
	/* the request: its fixed part, then the parameter block */
	struct vgpu_graph_kernel_node_set_req req;
	uint8_t *b = malloc(sizeof req + VGPU_MAX_PARAM_BYTES + 4);
	if (!b)
		return VGPU_E_OUT_OF_MEMORY;
	memset(&req, 0, sizeof req);
	req.node = node_handle(node);
	req.exec = node_handle(exec);
	CUresult rc = kernel_launch(&k, v2, &req.launch, b + sizeof req);
	if (!rc) {
		memcpy(b, &req, sizeof req);
		rc = vgpu_call(VGPU_OP_GRAPH_KERNEL_NODE_SET_PARAMS, b, (uint32_t)(sizeof req + req.launch.param_size), NULL,
			       0, NULL, 0, NULL, 0, NULL);
	}
	free(b);
	return rc;
}

CU_API cuGraphKernelNodeSetParams(void *node, const struct kernel_node_params *p)
{
	VGPU_API();
	return kernel_set(NULL, node, p, 0);
}

CU_API cuGraphKernelNodeSetParams_v2(void *node, const struct kernel_node_params *p)
{
	VGPU_API();
	return kernel_set(NULL, node, p, 1);
}

CU_API cuGraphExecKernelNodeSetParams(void *exec, void *node, const struct kernel_node_params *p)
{
	VGPU_API();
	if (!exec)
		return VGPU_E_INVALID_VALUE;
	return kernel_set(exec, node, p, 0);
}

CU_API cuGraphExecKernelNodeSetParams_v2(void *exec, void *node, const struct kernel_node_params *p)
{
	VGPU_API();
	if (!exec)
		return VGPU_E_INVALID_VALUE;
	return kernel_set(exec, node, p, 1);
}

CU_API cuGraphMemsetNodeGetParams(void *node, struct memset_node_params *p)
{
	VGPU_API();
	if (!node || !p)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_handle_req req = {.handle = node_handle(node)};
	struct vgpu_graph_memset_params rep = {0};
	CUresult rc = vgpu_call(VGPU_OP_GRAPH_MEMSET_NODE_GET_PARAMS, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	if (rc)
		return rc;
	p->dst = rep.dst;
	p->pitch = rep.pitch;
	p->value = rep.value;
	p->element_size = rep.elem_size;
	p->width = rep.width;
	p->height = rep.height;
	return 0;
}

static CUresult memset_set(void *exec, void *node, const struct memset_node_params *p)
{
	if (!node || !p)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_graph_memset_node_set_req req;
	memset(&req, 0, sizeof req);
	req.node = node_handle(node);
	req.exec = node_handle(exec);
	req.params.dst = p->dst;
	req.params.value = p->value;
	req.params.elem_size = p->element_size;
	req.params.width = p->width;
	req.params.height = p->height;
	req.params.pitch = p->pitch;
	return vgpu_call(VGPU_OP_GRAPH_MEMSET_NODE_SET_PARAMS, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
}

CU_API cuGraphMemsetNodeSetParams(void *node, const struct memset_node_params *p)
{
	VGPU_API();
	return memset_set(NULL, node, p);
}

CU_API cuGraphExecMemsetNodeSetParams(void *exec, void *node, const struct memset_node_params *p, void *ctx)
{
	VGPU_API();
	(void)ctx;
	if (!exec)
		return VGPU_E_INVALID_VALUE;
	return memset_set(exec, node, p);
}

/* A node's copy as a CUDA_MEMCPY3D of one row: device pointers, or the
 * program's pinned memory the host region is. */
CU_API cuGraphMemcpyNodeGetParams(void *node, struct memcpy3d *p)
{
	VGPU_API();
	if (!node || !p)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_handle_req req = {.handle = node_handle(node)};
	struct vgpu_graph_memcpy_params rep;
	memset(&rep, 0, sizeof rep);
	CUresult rc = vgpu_call(VGPU_OP_GRAPH_MEMCPY_NODE_GET_PARAMS, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	if (rc)
		return rc;
	const uint8_t *host = NULL;
	uint64_t n = rep.size;
	if (rep.dir == VGPU_GRAPH_COPY_HTOD || rep.dir == VGPU_GRAPH_COPY_DTOH) {
		struct vgpu_hostrange hr;
		if (!vgpu_hostmap_region(rep.host.region, &hr) || rep.host.offset > hr.len ||
		    rep.host.len > hr.len - rep.host.offset) {
			VERR("cuGraphMemcpyNodeGetParams: host region %#llx [%llu, +%llu) is not this process's pinned memory",
			     (unsigned long long)rep.host.region, (unsigned long long)rep.host.offset,
			     (unsigned long long)rep.host.len);
			return VGPU_E_UNKNOWN;
		}
		host = (const uint8_t *)hr.addr + rep.host.offset;
		n = rep.host.len;
	} else if (rep.dir != VGPU_GRAPH_COPY_DTOD) {
		return VGPU_E_UNKNOWN;
	}
	memset(p, 0, sizeof *p);
	p->width = n;
	p->height = 1;
	p->depth = 1;
	p->src.pitch = p->dst.pitch = n;
	p->src.height = p->dst.height = 1;
	p->src.type = p->dst.type = MEMTYPE_DEVICE;
	p->src.device = rep.src;
	p->dst.device = rep.dst;
	if (rep.dir == VGPU_GRAPH_COPY_HTOD) {
		p->src.type = MEMTYPE_HOST;
		p->src.device = 0;
		p->src.host = host;
	} else if (rep.dir == VGPU_GRAPH_COPY_DTOH) {
		p->dst.type = MEMTYPE_HOST;
		p->dst.device = 0;
		p->dst.host = host;
	}
	return 0;
}

static CUresult memcpy_set(const char *fn, void *exec, void *node, const struct memcpy3d *p)
{
	if (!node)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_graph_memcpy_node_set_req req;
	memset(&req, 0, sizeof req);
	CUresult rc = graph_copy(fn, p, &req.params);
	if (rc)
		return rc;
	req.node = node_handle(node);
	req.exec = node_handle(exec);
	return vgpu_call(VGPU_OP_GRAPH_MEMCPY_NODE_SET_PARAMS, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
}

CU_API cuGraphMemcpyNodeSetParams(void *node, const struct memcpy3d *p)
{
	VGPU_API();
	return memcpy_set("cuGraphMemcpyNodeSetParams", NULL, node, p);
}

CU_API cuGraphExecMemcpyNodeSetParams(void *exec, void *node, const struct memcpy3d *p, void *ctx)
{
	VGPU_API();
	(void)ctx;
	if (!exec)
		return VGPU_E_INVALID_VALUE;
	return memcpy_set("cuGraphExecMemcpyNodeSetParams", exec, node, p);
}

/* ---- edges after the fact ---- */

/* CUgraphEdgeData (cuda.h, 12.3): vgpu serves the default edge only. */
struct edge_data {
	unsigned char from_port, to_port, type, reserved[5];
};
_Static_assert(sizeof(struct edge_data) == 8, "CUgraphEdgeData size");

/* Whether edges' data (NULL: default) is the default edge's, which is
 * all that is served. */
static int default_edges(const char *fn, const struct edge_data *d, size_t n)
{
	static const struct edge_data zero;
	for (size_t i = 0; d && i < n; i++)
		if (memcmp(&d[i], &zero, sizeof zero)) {
			VWARN("%s: edge %zu has port or type data (from port %u, to port %u, type %u): only default edges are supported on vgpu",
			      fn, i, d[i].from_port, d[i].to_port, d[i].type);
			return 0;
		}
	return 1;
}

static CUresult edges(uint16_t op, void *graph, void *const *from, void *const *to, size_t n)
{
	if (!graph || (n && (!from || !to)) || n > VGPU_MAX_GRAPH_EDGES)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_graph_edges_req req = {.graph = node_handle(graph), .count = (uint32_t)n};
	uint8_t *b = malloc(sizeof req + 16 * n);
	if (!b)
		return VGPU_E_OUT_OF_MEMORY;
	memcpy(b, &req, sizeof req);
	for (size_t i = 0; i < n; i++) {
		uint64_t pair[2] = {node_handle(from[i]), node_handle(to[i])};
		if (!pair[0] || !pair[1]) {
			free(b);
			return VGPU_E_INVALID_VALUE;
		}
		memcpy(b + sizeof req + 16 * i, pair, 16);
	}
	CUresult rc = vgpu_call(op, b, (uint32_t)(sizeof req + 16 * n), NULL, 0, NULL, 0, NULL, 0, NULL);
	free(b);
	return rc;
}

CU_API cuGraphAddDependencies(void *graph, void *const *from, void *const *to, size_t n)
{
	VGPU_API();
	return edges(VGPU_OP_GRAPH_ADD_DEPENDENCIES, graph, from, to, n);
}

CU_API cuGraphAddDependencies_v2(void *graph, void *const *from, void *const *to, const struct edge_data *data,
				 size_t n)
{
	VGPU_API();
	if (!default_edges("cuGraphAddDependencies_v2", data, n))
		return VGPU_E_NOT_SUPPORTED;
	return edges(VGPU_OP_GRAPH_ADD_DEPENDENCIES, graph, from, to, n);
}

CU_API cuGraphRemoveDependencies(void *graph, void *const *from, void *const *to, size_t n)
{
	VGPU_API();
	return edges(VGPU_OP_GRAPH_REMOVE_DEPENDENCIES, graph, from, to, n);
}

CU_API cuGraphRemoveDependencies_v2(void *graph, void *const *from, void *const *to, const struct edge_data *data,
				    size_t n)
{
	VGPU_API();
	if (!default_edges("cuGraphRemoveDependencies_v2", data, n))
		return VGPU_E_NOT_SUPPORTED;
	return edges(VGPU_OP_GRAPH_REMOVE_DEPENDENCIES, graph, from, to, n);
}

/*
 * A listing the host answers in pages (GRAPH_GET_EDGES: two handles an
 * entry; GRAPH_NODE_GET_DEPENDENCIES: one): out[k] (k < width) of up to
 * *num entries, the rest of the arrays NULL, *num the entries given; all
 * of out NULL asks the count. ask sends the request for entries from
 * `first` on.
 */
typedef CUresult (*list_ask)(const void *arg, uint32_t first, struct vgpu_graph_nodes_reply *rep, uint64_t *ids,
			     uint32_t cap, uint32_t *tl);

static CUresult list(list_ask ask, const void *arg, int width, void **out[2], size_t *num)
{
	if (!num)
		return VGPU_E_INVALID_VALUE;
	int counting = !out[0] && (width == 1 || !out[1]);
	if (!counting && (!out[0] || (width == 2 && !out[1])))
		return VGPU_E_INVALID_VALUE;
	size_t want = counting ? 0 : *num, got = 0;
	uint32_t cap = VGPU_MAX_GRAPH_NODE_LIST * sizeof(uint64_t);
	uint64_t *ids = malloc(cap);
	if (!ids)
		return VGPU_E_OUT_OF_MEMORY;
	struct vgpu_graph_nodes_reply rep = {0};
	CUresult rc;
	for (;;) {
		uint32_t tl = 0;
		rc = ask(arg, (uint32_t)got, &rep, ids, cap, &tl);
		if (rc)
			break;
		uint32_t n = rep.count;
		if (n > tl / (width * sizeof *ids))
			n = tl / (width * sizeof *ids);
		for (uint32_t i = 0; i < n && got < want; i++, got++)
			for (int k = 0; k < width; k++)
				out[k][got] = (void *)(uintptr_t)ids[width * i + k];
		if (counting || got >= want || got >= rep.total || n == 0)
			break;
	}
	free(ids);
	if (rc)
		return rc;
	if (counting) {
		*num = rep.total;
		return 0;
	}
	for (size_t i = got; i < want; i++)
		for (int k = 0; k < width; k++)
			out[k][i] = NULL;
	*num = got;
	return 0;
}

static CUresult ask_edges(const void *arg, uint32_t first, struct vgpu_graph_nodes_reply *rep, uint64_t *ids,
			  uint32_t cap, uint32_t *tl)
{
	struct vgpu_graph_get_edges_req req = {.graph = *(const uint64_t *)arg, .first = first};
	return vgpu_call(VGPU_OP_GRAPH_GET_EDGES, &req, sizeof req, NULL, 0, rep, sizeof *rep, ids, cap, tl);
}

static CUresult get_edges(void *graph, void **from, void **to, size_t *num)
{
	if (!graph)
		return VGPU_E_INVALID_VALUE;
	uint64_t g = node_handle(graph);
	void **out[2] = {from, to};
	return list(ask_edges, &g, 2, out, num);
}

CU_API cuGraphGetEdges(void *graph, void **from, void **to, size_t *num)
{
	VGPU_API();
	return get_edges(graph, from, to, num);
}

/* Every edge served is a default one: its data reads as zeros. */
CU_API cuGraphGetEdges_v2(void *graph, void **from, void **to, struct edge_data *data, size_t *num)
{
	VGPU_API();
	size_t want = num ? *num : 0;
	CUresult rc = get_edges(graph, from, to, num);
	if (!rc && data && from)
		memset(data, 0, want * sizeof *data);
	return rc;
}

struct deps_arg {
	uint64_t node;
	uint32_t dependents;
};

static CUresult ask_deps(const void *arg, uint32_t first, struct vgpu_graph_nodes_reply *rep, uint64_t *ids,
			 uint32_t cap, uint32_t *tl)
{
	const struct deps_arg *a = arg;
	struct vgpu_graph_node_deps_req req = {.node = a->node, .dependents = a->dependents, .first = first};
	return vgpu_call(VGPU_OP_GRAPH_NODE_GET_DEPENDENCIES, &req, sizeof req, NULL, 0, rep, sizeof *rep, ids, cap, tl);
}

static CUresult node_deps(void *node, void **nodes, struct edge_data *data, size_t *num, uint32_t dependents)
{
	if (!node)
		return VGPU_E_INVALID_VALUE;
	size_t want = num ? *num : 0;
	struct deps_arg a = {node_handle(node), dependents};
	void **out[2] = {nodes, NULL};
	CUresult rc = list(ask_deps, &a, 1, out, num);
	if (!rc && data && nodes)
		memset(data, 0, want * sizeof *data);
	return rc;
}

CU_API cuGraphNodeGetDependencies(void *node, void **deps, size_t *num)
{
	VGPU_API();
	return node_deps(node, deps, NULL, num, 0);
}

CU_API cuGraphNodeGetDependencies_v2(void *node, void **deps, struct edge_data *data, size_t *num)
{
	VGPU_API();
	return node_deps(node, deps, data, num, 0);
}

CU_API cuGraphNodeGetDependentNodes(void *node, void **deps, size_t *num)
{
	VGPU_API();
	return node_deps(node, deps, NULL, num, 1);
}

CU_API cuGraphNodeGetDependentNodes_v2(void *node, void **deps, struct edge_data *data, size_t *num)
{
	VGPU_API();
	return node_deps(node, deps, data, num, 1);
}

/* ---- event and child graph nodes ---- */

static CUresult add_event_node(void **node, void *graph, void *const *deps, size_t ndeps, CUevent ev, uint32_t wait)
{
	if (!ev)
		return VGPU_E_INVALID_HANDLE;
	struct vgpu_graph_add_event_node_req req;
	memset(&req, 0, sizeof req);
	req.wait = wait;
	req.event = ev->handle;
	return add_node(VGPU_OP_GRAPH_ADD_EVENT_NODE, node, graph, deps, ndeps, &req, sizeof req, NULL, 0);
}

CU_API cuGraphAddEventRecordNode(void **node, void *graph, void *const *deps, size_t ndeps, CUevent ev)
{
	VGPU_API();
	return add_event_node(node, graph, deps, ndeps, ev, 0);
}

CU_API cuGraphAddEventWaitNode(void **node, void *graph, void *const *deps, size_t ndeps, CUevent ev)
{
	VGPU_API();
	return add_event_node(node, graph, deps, ndeps, ev, 1);
}

static CUresult event_get(void *node, CUevent *out, uint32_t wait)
{
	if (!node || !out)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_graph_event_node_req req = {.node = node_handle(node), .wait = wait};
	struct vgpu_handle_reply rep = {0};
	CUresult rc = vgpu_call(VGPU_OP_GRAPH_EVENT_NODE_GET_EVENT, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	if (rc)
		return rc;
	struct vgpu_event *e = vgpu_event_by_handle(rep.handle);
	if (!e) {
		VERR("cuGraphEvent*NodeGetEvent: host named event %#llx, which this process does not have",
		     (unsigned long long)rep.handle);
		return VGPU_E_INVALID_VALUE;
	}
	*out = e;
	return 0;
}

CU_API cuGraphEventRecordNodeGetEvent(void *node, CUevent *out)
{
	VGPU_API();
	return event_get(node, out, 0);
}

CU_API cuGraphEventWaitNodeGetEvent(void *node, CUevent *out)
{
	VGPU_API();
	return event_get(node, out, 1);
}

static CUresult event_set(void *exec, void *node, CUevent ev, uint32_t wait)
{
	if (!node)
		return VGPU_E_INVALID_VALUE;
	if (!ev)
		return VGPU_E_INVALID_HANDLE;
	struct vgpu_graph_event_node_req req = {.node = node_handle(node), .exec = node_handle(exec), .event = ev->handle, .wait = wait};
	return vgpu_call(VGPU_OP_GRAPH_EVENT_NODE_SET_EVENT, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
}

CU_API cuGraphEventRecordNodeSetEvent(void *node, CUevent ev)
{
	VGPU_API();
	return event_set(NULL, node, ev, 0);
}

CU_API cuGraphEventWaitNodeSetEvent(void *node, CUevent ev)
{
	VGPU_API();
	return event_set(NULL, node, ev, 1);
}

CU_API cuGraphExecEventRecordNodeSetEvent(void *exec, void *node, CUevent ev)
{
	VGPU_API();
	if (!exec)
		return VGPU_E_INVALID_VALUE;
	return event_set(exec, node, ev, 0);
}

CU_API cuGraphExecEventWaitNodeSetEvent(void *exec, void *node, CUevent ev)
{
	VGPU_API();
	if (!exec)
		return VGPU_E_INVALID_VALUE;
	return event_set(exec, node, ev, 1);
}

CU_API cuGraphAddChildGraphNode(void **node, void *graph, void *const *deps, size_t ndeps, void *child)
{
	VGPU_API();
	if (!child)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_graph_add_child_node_req req;
	memset(&req, 0, sizeof req);
	req.child = node_handle(child);
	return add_node(VGPU_OP_GRAPH_ADD_CHILD_NODE, node, graph, deps, ndeps, &req, sizeof req, NULL, 0);
}

/* ---- kernel node attributes: those of a stream but the synchronization
 * policy, and COOPERATIVE (CUkernelNodeAttrValue is the launch attribute
 * union; only the attribute's own bytes are read or written). ---- */

CU_API cuGraphKernelNodeSetAttribute(void *node, int attr, const void *value)
{
	VGPU_API();
	if (!node || !value)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_graph_kernel_node_attr_req req = {.node = node_handle(node), .attr = (uint32_t)attr};
	if (vgpu_attr_encode(attr, value, &req.value)) {
		VWARN("cuGraphKernelNodeSetAttribute: attribute %d is not served on vgpu (1, 2, 8, 9, 10 are)", attr);
		return VGPU_E_NOT_SUPPORTED;
	}
	return vgpu_call(VGPU_OP_GRAPH_KERNEL_NODE_SET_ATTRIBUTE, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
}

CU_API cuGraphKernelNodeGetAttribute(void *node, int attr, void *value)
{
	VGPU_API();
	if (!node || !value)
		return VGPU_E_INVALID_VALUE;
	struct vgpu_graph_kernel_node_attr_req req = {.node = node_handle(node), .attr = (uint32_t)attr};
	struct vgpu_stream_attr_value rep;
	memset(&rep, 0, sizeof rep);
	CUresult rc = vgpu_call(VGPU_OP_GRAPH_KERNEL_NODE_GET_ATTRIBUTE, &req, sizeof req, NULL, 0, &rep, sizeof rep, NULL, 0, NULL);
	if (rc)
		return rc;
	vgpu_attr_decode(attr, &rep, value);
	return 0;
}
