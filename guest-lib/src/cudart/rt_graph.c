/*
 * rt_graph.c - CUDA graphs, kept in the library: a graph is a recorded
 * list of calls (kernel, memcpy, memset, host function, empty) in an order
 * that respects their dependencies (a node can only depend on nodes added
 * before it), and launching an instantiated graph replays the list on a
 * stream; the asynchronous calls go out as one batch. Stream capture
 * records into a graph instead of executing; streams join a capture by
 * waiting on an event recorded in it. (Protocol area 0x07 is reserved for
 * host-side graphs later.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

enum { NODE_KERNEL = 0, NODE_MEMCPY = 1, NODE_MEMSET = 2, NODE_HOST = 3, NODE_GRAPH = 4, NODE_EMPTY = 5 };

struct rt_node {
	int type;
	struct rt_graph *graph;
	/* kernel */
	const void *host_fun; /* what the program named it by (for GetParams) */
	void **argv;          /* pointers into params, handed out by GetParams */
	struct vgpu_func *func;
	dim3 grid, block;
	unsigned smem;
	uint32_t psize;
	uint8_t *params;
	/* memcpy */
	struct rt_3d copy;
	/* memset */
	void *dst;
	size_t pitch, width, height;
	unsigned value, elem;
	/* host */
	void (*fn)(void *);
	void *user;
};

struct rt_graph {
	struct rt_node **nodes;
	size_t n, cap;
};

struct rt_exec {
	struct rt_graph g;
};

typedef struct rt_graph *cudaGraph_t;
typedef struct rt_node *cudaGraphNode_t;
typedef struct rt_exec *cudaGraphExec_t;

static unsigned long long capture_ids;

static cudaError_t add(struct rt_graph *g, struct rt_node *n, cudaGraphNode_t *out)
{
	if (g->n == g->cap) {
		size_t nc = g->cap ? g->cap * 2 : 16;
		struct rt_node **a = realloc(g->nodes, nc * sizeof *a);
		if (!a)
			return cudaErrorMemoryAllocation;
		g->nodes = a;
		g->cap = nc;
	}
	n->graph = g;
	g->nodes[g->n++] = n;
	if (out)
		*out = n;
	return 0;
}

static struct rt_node *node_new(int type)
{
	struct rt_node *n = calloc(1, sizeof *n);
	if (n)
		n->type = type;
	return n;
}

static void node_free(struct rt_node *n)
{
	if (n) {
		free(n->params);
		free(n->argv);
		free(n);
	}
}

static struct rt_node *node_clone(const struct rt_node *o)
{
	struct rt_node *n = malloc(sizeof *n);
	if (!n)
		return NULL;
	*n = *o;
	n->argv = NULL;
	if (o->params) {
		n->params = malloc(o->psize ? o->psize : 1);
		if (!n->params) {
			free(n);
			return NULL;
		}
		memcpy(n->params, o->params, o->psize);
	}
	return n;
}

static void graph_clear(struct rt_graph *g)
{
	for (size_t i = 0; i < g->n; i++)
		node_free(g->nodes[i]);
	free(g->nodes);
	memset(g, 0, sizeof *g);
}

static cudaError_t graph_copy(struct rt_graph *dst, const struct rt_graph *src)
{
	memset(dst, 0, sizeof *dst);
	for (size_t i = 0; i < src->n; i++) {
		struct rt_node *n = node_clone(src->nodes[i]);
		if (!n || add(dst, n, NULL)) {
			node_free(n);
			graph_clear(dst);
			return cudaErrorMemoryAllocation;
		}
	}
	return 0;
}

/* Packs a kernel's arguments now: the pointers in args are only valid
 * during the call that adds the node. */
static cudaError_t kernel_node(const void *host_fun, struct vgpu_func *f, dim3 grid, dim3 block, size_t smem,
			       void **args, struct rt_node **out)
{
	struct rt_node *n = node_new(NODE_KERNEL);
	if (!n)
		return cudaErrorMemoryAllocation;
	n->host_fun = host_fun;
	n->func = f;
	n->grid = grid;
	n->block = block;
	n->smem = (unsigned)smem;
	n->psize = f->param_bytes;
	n->params = calloc(1, n->psize ? n->psize : 1);
	if (!n->params) {
		free(n);
		return cudaErrorMemoryAllocation;
	}
	for (uint32_t i = 0; i < f->nparams; i++) {
		if (!args || !args[i]) {
			node_free(n);
			return cudaErrorInvalidValue;
		}
		memcpy(n->params + f->params[i].offset, args[i], f->params[i].size);
	}
	*out = n;
	return 0;
}

static void memcpy_1d(struct rt_3d *c, void *dst, const void *src, size_t n, int kind)
{
	memset(c, 0, sizeof *c);
	c->srcPtr.ptr = (void *)src;
	c->srcPtr.pitch = n;
	c->srcPtr.xsize = n;
	c->srcPtr.ysize = 1;
	c->dstPtr.ptr = dst;
	c->dstPtr.pitch = n;
	c->dstPtr.xsize = n;
	c->dstPtr.ysize = 1;
	c->extent.width = n;
	c->extent.height = 1;
	c->extent.depth = 1;
	c->kind = kind;
}

/* ---------------- capture ---------------- */

int rt_capturing(cudaStream_t s)
{
	return s && s != VGPU_STREAM_LEGACY && s != VGPU_STREAM_PER_THREAD && s->capture;
}

cudaError_t rt_capture_kernel(cudaStream_t s, const void *host_fun, struct vgpu_func *f, dim3 grid, dim3 block,
			      size_t smem, void **args)
{
	struct rt_node *n;
	cudaError_t e = kernel_node(host_fun, f, grid, block, smem, args, &n);
	if (!e && (e = add((struct rt_graph *)s->capture, n, NULL)) != 0)
		node_free(n);
	return e;
}

cudaError_t rt_capture_memcpy(cudaStream_t s, void *dst, const void *src, size_t n, int kind)
{
	struct rt_node *nd = node_new(NODE_MEMCPY);
	if (!nd)
		return cudaErrorMemoryAllocation;
	memcpy_1d(&nd->copy, dst, src, n, kind);
	cudaError_t e = add(s->capture, nd, NULL);
	if (e)
		node_free(nd);
	return e;
}

cudaError_t rt_capture_memset(cudaStream_t s, void *dst, int value, size_t n)
{
	struct rt_node *nd = node_new(NODE_MEMSET);
	if (!nd)
		return cudaErrorMemoryAllocation;
	nd->dst = dst;
	nd->value = (uint8_t)value;
	nd->elem = 1;
	nd->width = n;
	nd->height = 1;
	cudaError_t e = add(s->capture, nd, NULL);
	if (e)
		node_free(nd);
	return e;
}

cudaError_t rt_capture_host(cudaStream_t s, void (*fn)(void *), void *user)
{
	struct rt_node *nd = node_new(NODE_HOST);
	if (!nd)
		return cudaErrorMemoryAllocation;
	nd->fn = fn;
	nd->user = user;
	cudaError_t e = add(s->capture, nd, NULL);
	if (e)
		node_free(nd);
	return e;
}

RT_API cudaStreamBeginCapture(cudaStream_t s, int mode)
{
	VGPU_API();
	cudaError_t e = rt_init();
	if (e)
		RT_RETURN(e);
	if (!s || s == VGPU_STREAM_LEGACY)
		RT_RETURN(cudaErrorStreamCaptureUnsupported);
	if (s == VGPU_STREAM_PER_THREAD)
		RT_RETURN(cudaErrorNotSupported);
	if (s->capture)
		RT_RETURN(cudaErrorIllegalState);
	struct rt_graph *g = calloc(1, sizeof *g);
	if (!g)
		RT_RETURN(cudaErrorMemoryAllocation);
	s->capture = g;
	s->capture_mode = mode;
	s->capture_id = __atomic_add_fetch(&capture_ids, 1, __ATOMIC_RELAXED);
	return cudaSuccess;
}
VGPU_ALIAS(cudaStreamBeginCapture_ptsz, cudaStreamBeginCapture);

RT_API cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
	VGPU_API();
	if (!g)
		RT_RETURN(cudaErrorInvalidValue);
	if (!rt_capturing(s))
		RT_RETURN(cudaErrorIllegalState);
	*g = s->capture;
	s->capture = NULL;
	rt_capture_end(*g);
	return cudaSuccess;
}
VGPU_ALIAS(cudaStreamEndCapture_ptsz, cudaStreamEndCapture);

RT_API cudaStreamIsCapturing(cudaStream_t s, int *status)
{
	VGPU_API();
	if (!status)
		RT_RETURN(cudaErrorInvalidValue);
	*status = rt_capturing(s) ? 1 : 0; /* cudaStreamCaptureStatusActive : None */
	return cudaSuccess;
}
VGPU_ALIAS(cudaStreamIsCapturing_ptsz, cudaStreamIsCapturing);

static void capture_info(cudaStream_t s, int *status, unsigned long long *id, cudaGraph_t *graph,
			 const cudaGraphNode_t **deps, size_t *ndeps)
{
	int c = rt_capturing(s);
	struct rt_graph *g = c ? s->capture : NULL;
	if (status)
		*status = c ? 1 : 0;
	if (id)
		*id = c ? s->capture_id : 0;
	if (graph)
		*graph = c ? s->capture : NULL;
	if (deps)
		*deps = g && g->n ? (const cudaGraphNode_t *)&g->nodes[g->n - 1] : NULL;
	if (ndeps)
		*ndeps = g && g->n ? 1 : 0;
}

#if VGPU_CUDART_ABI == 11
RT_API cudaStreamGetCaptureInfo(cudaStream_t s, int *status, unsigned long long *id)
{
	VGPU_API();
	capture_info(s, status, id, NULL, NULL, NULL);
	return cudaSuccess;
}
#elif VGPU_CUDART_ABI == 12
RT_API cudaStreamGetCaptureInfo(cudaStream_t s, int *status, unsigned long long *id, cudaGraph_t *graph,
				const cudaGraphNode_t **deps, size_t *ndeps)
{
	VGPU_API();
	capture_info(s, status, id, graph, deps, ndeps);
	return cudaSuccess;
}
#else
RT_API cudaStreamGetCaptureInfo(cudaStream_t s, int *status, unsigned long long *id, cudaGraph_t *graph,
				const cudaGraphNode_t **deps, const void **edges, size_t *ndeps)
{
	VGPU_API();
	capture_info(s, status, id, graph, deps, ndeps);
	if (edges)
		*edges = NULL;
	return cudaSuccess;
}
#endif
VGPU_ALIAS(cudaStreamGetCaptureInfo_ptsz, cudaStreamGetCaptureInfo);

#if VGPU_CUDART_ABI == 12
/* 12.3+: with edge data (13's plain cudaStreamGetCaptureInfo) */
RT_API cudaStreamGetCaptureInfo_v3(cudaStream_t s, int *status, unsigned long long *id, cudaGraph_t *graph,
				   const cudaGraphNode_t **deps, const void **edges, size_t *ndeps)
{
	VGPU_API();
	capture_info(s, status, id, graph, deps, ndeps);
	if (edges)
		*edges = NULL;
	return cudaSuccess;
}
VGPU_ALIAS(cudaStreamGetCaptureInfo_v3_ptsz, cudaStreamGetCaptureInfo_v3);
#endif

#if VGPU_CUDART_ABI != 13
RT_API cudaStreamGetCaptureInfo_v2(cudaStream_t s, int *status, unsigned long long *id, cudaGraph_t *graph,
				   const cudaGraphNode_t **deps, size_t *ndeps)
{
	VGPU_API();
	capture_info(s, status, id, graph, deps, ndeps);
	return cudaSuccess;
}
VGPU_ALIAS(cudaStreamGetCaptureInfo_v2_ptsz, cudaStreamGetCaptureInfo_v2);
#endif

RT_API cudaThreadExchangeStreamCaptureMode(int *mode)
{
	VGPU_API();
	static __thread int cur;
	if (!mode)
		RT_RETURN(cudaErrorInvalidValue);
	int old = cur;
	cur = *mode;
	*mode = old;
	return cudaSuccess;
}

/* ---------------- explicit graphs ---------------- */

RT_API cudaGraphCreate(cudaGraph_t *g, unsigned flags)
{
	VGPU_API();
	(void)flags;
	if (!g)
		RT_RETURN(cudaErrorInvalidValue);
	*g = calloc(1, sizeof **g);
	RT_RETURN(*g ? cudaSuccess : cudaErrorMemoryAllocation);
}

RT_API cudaGraphDestroy(cudaGraph_t g)
{
	VGPU_API();
	if (!g)
		RT_RETURN(cudaErrorInvalidValue);
	graph_clear(g);
	free(g);
	return cudaSuccess;
}

RT_API cudaGraphClone(cudaGraph_t *out, cudaGraph_t g)
{
	VGPU_API();
	if (!out || !g)
		RT_RETURN(cudaErrorInvalidValue);
	struct rt_graph *c = calloc(1, sizeof *c);
	if (!c)
		RT_RETURN(cudaErrorMemoryAllocation);
	cudaError_t e = graph_copy(c, g);
	if (e) {
		free(c);
		RT_RETURN(e);
	}
	*out = c;
	return cudaSuccess;
}

RT_API cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t *nodes, size_t *n)
{
	VGPU_API();
	if (!g || !n)
		RT_RETURN(cudaErrorInvalidValue);
	if (nodes) {
		size_t k = *n < g->n ? *n : g->n;
		memcpy(nodes, g->nodes, k * sizeof *nodes);
		*n = k;
	} else {
		*n = g->n;
	}
	return cudaSuccess;
}

RT_API cudaGraphGetRootNodes(cudaGraph_t g, cudaGraphNode_t *nodes, size_t *n)
{
	VGPU_API();
	if (!g || !n)
		RT_RETURN(cudaErrorInvalidValue);
	if (nodes && *n && g->n)
		nodes[0] = g->nodes[0];
	*n = g->n ? 1 : 0;
	return cudaSuccess;
}

RT_API cudaGraphNodeGetType(cudaGraphNode_t n, int *type)
{
	VGPU_API();
	if (!n || !type)
		RT_RETURN(cudaErrorInvalidValue);
	*type = n->type;
	return cudaSuccess;
}

/* Nodes run in insertion order: each depends on the one before it. */
static size_t node_index(cudaGraphNode_t n)
{
	struct rt_graph *g = n->graph;
	for (size_t i = 0; i < g->n; i++)
		if (g->nodes[i] == n)
			return i;
	return g->n;
}

static cudaError_t neighbours(cudaGraphNode_t n, cudaGraphNode_t *out, size_t *num, int before)
{
	if (!n || !num)
		return cudaErrorInvalidValue;
	size_t i = node_index(n);
	int has = before ? (i > 0 && i < n->graph->n) : (i + 1 < n->graph->n);
	if (out && *num && has)
		out[0] = n->graph->nodes[before ? i - 1 : i + 1];
	*num = has ? 1 : 0;
	return 0;
}

#if VGPU_CUDART_ABI == 12
/* 12.3+: the edge-data forms (13 made them the plain names) */
RT_API cudaGraphNodeGetDependencies_v2(cudaGraphNode_t n, cudaGraphNode_t *deps, void *edges, size_t *num)
{
	VGPU_API();
	(void)edges;
	RT_RETURN(neighbours(n, deps, num, 1));
}

RT_API cudaGraphNodeGetDependentNodes_v2(cudaGraphNode_t n, cudaGraphNode_t *deps, void *edges, size_t *num)
{
	VGPU_API();
	(void)edges;
	RT_RETURN(neighbours(n, deps, num, 0));
}
#endif

#if VGPU_CUDART_ABI == 13
RT_API cudaGraphNodeGetDependencies(cudaGraphNode_t n, cudaGraphNode_t *deps, void *edges, size_t *num)
{
	VGPU_API();
	(void)edges;
	RT_RETURN(neighbours(n, deps, num, 1));
}

RT_API cudaGraphNodeGetDependentNodes(cudaGraphNode_t n, cudaGraphNode_t *deps, void *edges, size_t *num)
{
	VGPU_API();
	(void)edges;
	RT_RETURN(neighbours(n, deps, num, 0));
}
#else
RT_API cudaGraphNodeGetDependencies(cudaGraphNode_t n, cudaGraphNode_t *deps, size_t *num)
{
	VGPU_API();
	RT_RETURN(neighbours(n, deps, num, 1));
}

RT_API cudaGraphNodeGetDependentNodes(cudaGraphNode_t n, cudaGraphNode_t *deps, size_t *num)
{
	VGPU_API();
	RT_RETURN(neighbours(n, deps, num, 0));
}
#endif

RT_API cudaGraphDebugDotPrint(cudaGraph_t g, const char *path, unsigned flags)
{
	VGPU_API();
	static const char *names[] = {"kernel", "memcpy", "memset", "host", "graph", "empty"};
	(void)flags;
	if (!g || !path)
		RT_RETURN(cudaErrorInvalidValue);
	FILE *f = fopen(path, "we");
	if (!f)
		RT_RETURN(cudaErrorInvalidValue);
	fprintf(f, "digraph vgpu_graph {\n");
	for (size_t i = 0; i < g->n; i++) {
		struct rt_node *n = g->nodes[i];
		fprintf(f, "  n%zu [label=\"%zu: %s%s%s\"];\n", i, i, names[n->type < 6 ? n->type : 5],
			n->type == NODE_KERNEL && n->func ? " " : "", n->type == NODE_KERNEL && n->func ? n->func->name : "");
		if (i)
			fprintf(f, "  n%zu -> n%zu;\n", i - 1, i);
	}
	fprintf(f, "}\n");
	fclose(f);
	return cudaSuccess;
}


RT_API cudaGraphAddKernelNode(cudaGraphNode_t *out, cudaGraph_t g, const cudaGraphNode_t *deps, size_t ndeps,
			      const struct rt_kernel_params *p)
{
	VGPU_API();
	(void)deps;
	(void)ndeps;
	if (!g || !p || !out)
		RT_RETURN(cudaErrorInvalidValue);
	if (p->extra)
		RT_RETURN(cudaErrorNotSupported);
	struct vgpu_func *f;
	struct rt_node *n;
	cudaError_t e = rt_kernel_func(p->func, &f);
	if (!e)
		e = kernel_node(p->func, f, p->gridDim, p->blockDim, p->sharedMemBytes, p->kernelParams, &n);
	if (!e && (e = add(g, n, out)) != 0)
		node_free(n);
	RT_RETURN(e);
}

RT_API cudaGraphAddMemcpyNode(cudaGraphNode_t *out, cudaGraph_t g, const cudaGraphNode_t *deps, size_t ndeps,
			      const struct rt_3d *p)
{
	VGPU_API();
	(void)deps;
	(void)ndeps;
	if (!g || !p || !out)
		RT_RETURN(cudaErrorInvalidValue);
	if (p->srcArray || p->dstArray)
		RT_RETURN(cudaErrorNotSupported);
	struct rt_node *n = node_new(NODE_MEMCPY);
	if (!n)
		RT_RETURN(cudaErrorMemoryAllocation);
	n->copy = *p;
	cudaError_t e = add(g, n, out);
	if (e)
		node_free(n);
	RT_RETURN(e);
}

RT_API cudaGraphAddMemcpyNode1D(cudaGraphNode_t *out, cudaGraph_t g, const cudaGraphNode_t *deps, size_t ndeps,
				void *dst, const void *src, size_t count, int kind)
{
	VGPU_API();
	(void)deps;
	(void)ndeps;
	if (!g || !out)
		RT_RETURN(cudaErrorInvalidValue);
	struct rt_node *n = node_new(NODE_MEMCPY);
	if (!n)
		RT_RETURN(cudaErrorMemoryAllocation);
	memcpy_1d(&n->copy, dst, src, count, kind);
	cudaError_t e = add(g, n, out);
	if (e)
		node_free(n);
	RT_RETURN(e);
}


RT_API cudaGraphAddMemsetNode(cudaGraphNode_t *out, cudaGraph_t g, const cudaGraphNode_t *deps, size_t ndeps,
			      const struct rt_memset_params *p)
{
	VGPU_API();
	(void)deps;
	(void)ndeps;
	if (!g || !p || !out || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4))
		RT_RETURN(cudaErrorInvalidValue);
	struct rt_node *n = node_new(NODE_MEMSET);
	if (!n)
		RT_RETURN(cudaErrorMemoryAllocation);
	n->dst = p->dst;
	n->pitch = p->pitch;
	n->value = p->value;
	n->elem = p->elementSize;
	n->width = p->width;
	n->height = p->height ? p->height : 1;
	cudaError_t e = add(g, n, out);
	if (e)
		node_free(n);
	RT_RETURN(e);
}


RT_API cudaGraphAddHostNode(cudaGraphNode_t *out, cudaGraph_t g, const cudaGraphNode_t *deps, size_t ndeps,
			    const struct rt_host_params *p)
{
	VGPU_API();
	(void)deps;
	(void)ndeps;
	if (!g || !p || !out || !p->fn)
		RT_RETURN(cudaErrorInvalidValue);
	struct rt_node *n = node_new(NODE_HOST);
	if (!n)
		RT_RETURN(cudaErrorMemoryAllocation);
	n->fn = p->fn;
	n->user = p->userData;
	cudaError_t e = add(g, n, out);
	if (e)
		node_free(n);
	RT_RETURN(e);
}

RT_API cudaGraphAddEmptyNode(cudaGraphNode_t *out, cudaGraph_t g, const cudaGraphNode_t *deps, size_t ndeps)
{
	VGPU_API();
	(void)deps;
	(void)ndeps;
	if (!g || !out)
		RT_RETURN(cudaErrorInvalidValue);
	struct rt_node *n = node_new(NODE_EMPTY);
	if (!n)
		RT_RETURN(cudaErrorMemoryAllocation);
	cudaError_t e = add(g, n, out);
	if (e)
		node_free(n);
	RT_RETURN(e);
}

RT_API cudaGraphAddDependencies(cudaGraph_t g, const cudaGraphNode_t *from, const cudaGraphNode_t *to, size_t n)
{
	VGPU_API();
	(void)from;
	(void)to;
	(void)n;
	/* Nodes run in the order they were added, which already satisfies
	 * every dependency that can be expressed on existing nodes. */
	RT_RETURN(g ? cudaSuccess : cudaErrorInvalidValue);
}

/* ---------------- node parameters and exec updates ---------------- */

RT_API cudaGraphKernelNodeGetParams(cudaGraphNode_t n, struct rt_kernel_params *p)
{
	VGPU_API();
	if (!n || !p || n->type != NODE_KERNEL)
		RT_RETURN(cudaErrorInvalidValue);
	if (!n->argv) { /* pointers into the packed block: writes through them update the node */
		n->argv = calloc(n->func->nparams ? n->func->nparams : 1, sizeof *n->argv);
		if (!n->argv)
			RT_RETURN(cudaErrorMemoryAllocation);
		for (uint32_t i = 0; i < n->func->nparams; i++)
			n->argv[i] = n->params + n->func->params[i].offset;
	}
	p->func = (void *)n->host_fun;
	p->gridDim = n->grid;
	p->blockDim = n->block;
	p->sharedMemBytes = n->smem;
	p->kernelParams = n->argv;
	p->extra = NULL;
	return cudaSuccess;
}

/* Repacks a kernel node from p (the args may point into its own block). */
static cudaError_t set_kernel(struct rt_node *n, const struct rt_kernel_params *p)
{
	if (!n || !p || n->type != NODE_KERNEL)
		return cudaErrorInvalidValue;
	if (p->extra)
		return cudaErrorNotSupported;
	struct vgpu_func *f;
	struct rt_node *fresh;
	cudaError_t e = rt_kernel_func(p->func, &f);
	if (!e)
		e = kernel_node(p->func, f, p->gridDim, p->blockDim, p->sharedMemBytes, p->kernelParams, &fresh);
	if (e)
		return e;
	free(n->params);
	free(n->argv);
	n->host_fun = fresh->host_fun;
	n->func = fresh->func;
	n->grid = fresh->grid;
	n->block = fresh->block;
	n->smem = fresh->smem;
	n->psize = fresh->psize;
	n->params = fresh->params;
	n->argv = NULL;
	free(fresh);
	return 0;
}

RT_API cudaGraphKernelNodeSetParams(cudaGraphNode_t n, const struct rt_kernel_params *p)
{
	VGPU_API();
	RT_RETURN(set_kernel(n, p));
}

RT_API cudaGraphHostNodeGetParams(cudaGraphNode_t n, struct rt_host_params *p)
{
	VGPU_API();
	if (!n || !p || n->type != NODE_HOST)
		RT_RETURN(cudaErrorInvalidValue);
	p->fn = n->fn;
	p->userData = n->user;
	return cudaSuccess;
}

static cudaError_t set_host(struct rt_node *n, const struct rt_host_params *p)
{
	if (!n || !p || !p->fn || n->type != NODE_HOST)
		return cudaErrorInvalidValue;
	n->fn = p->fn;
	n->user = p->userData;
	return 0;
}

RT_API cudaGraphHostNodeSetParams(cudaGraphNode_t n, const struct rt_host_params *p)
{
	VGPU_API();
	RT_RETURN(set_host(n, p));
}

RT_API cudaGraphMemsetNodeGetParams(cudaGraphNode_t n, struct rt_memset_params *p)
{
	VGPU_API();
	if (!n || !p || n->type != NODE_MEMSET)
		RT_RETURN(cudaErrorInvalidValue);
	p->dst = n->dst;
	p->pitch = n->pitch;
	p->value = n->value;
	p->elementSize = n->elem;
	p->width = n->width;
	p->height = n->height;
	return cudaSuccess;
}

static cudaError_t set_memset(struct rt_node *n, const struct rt_memset_params *p)
{
	if (!n || !p || n->type != NODE_MEMSET || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4))
		return cudaErrorInvalidValue;
	n->dst = p->dst;
	n->pitch = p->pitch;
	n->value = p->value;
	n->elem = p->elementSize;
	n->width = p->width;
	n->height = p->height ? p->height : 1;
	return 0;
}

RT_API cudaGraphMemsetNodeSetParams(cudaGraphNode_t n, const struct rt_memset_params *p)
{
	VGPU_API();
	RT_RETURN(set_memset(n, p));
}

RT_API cudaGraphMemcpyNodeGetParams(cudaGraphNode_t n, struct rt_3d *p)
{
	VGPU_API();
	if (!n || !p || n->type != NODE_MEMCPY)
		RT_RETURN(cudaErrorInvalidValue);
	*p = n->copy;
	return cudaSuccess;
}

RT_API cudaGraphMemcpyNodeSetParams(cudaGraphNode_t n, const struct rt_3d *p)
{
	VGPU_API();
	if (!n || !p || n->type != NODE_MEMCPY || p->srcArray || p->dstArray)
		RT_RETURN(cudaErrorInvalidValue);
	n->copy = *p;
	return cudaSuccess;
}

RT_API cudaGraphMemcpyNodeSetParams1D(cudaGraphNode_t n, void *dst, const void *src, size_t count, int kind)
{
	VGPU_API();
	if (!n || n->type != NODE_MEMCPY)
		RT_RETURN(cudaErrorInvalidValue);
	memcpy_1d(&n->copy, dst, src, count, kind);
	return cudaSuccess;
}

/* The executable copy of a graph node (same position: exec graphs are
 * copies in node order). */
static struct rt_node *exec_node(struct rt_exec *x, cudaGraphNode_t n)
{
	if (!x || !n || !n->graph)
		return NULL;
	size_t i = node_index(n);
	if (i >= x->g.n || x->g.nodes[i]->type != n->type)
		return NULL;
	return x->g.nodes[i];
}

RT_API cudaGraphExecKernelNodeSetParams(cudaGraphExec_t x, cudaGraphNode_t n, const struct rt_kernel_params *p)
{
	VGPU_API();
	RT_RETURN(set_kernel(exec_node(x, n), p));
}

RT_API cudaGraphExecHostNodeSetParams(cudaGraphExec_t x, cudaGraphNode_t n, const struct rt_host_params *p)
{
	VGPU_API();
	RT_RETURN(set_host(exec_node(x, n), p));
}

RT_API cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t x, cudaGraphNode_t n, const struct rt_memset_params *p)
{
	VGPU_API();
	RT_RETURN(set_memset(exec_node(x, n), p));
}

RT_API cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t x, cudaGraphNode_t n, void *dst, const void *src,
					  size_t count, int kind)
{
	VGPU_API();
	struct rt_node *e = exec_node(x, n);
	if (!e)
		RT_RETURN(cudaErrorInvalidValue);
	memcpy_1d(&e->copy, dst, src, count, kind);
	return cudaSuccess;
}

/* cudaGraphExecUpdate: the exec takes the graph's parameters if the
 * topology (node count and types) is the same. */
static cudaError_t exec_update(struct rt_exec *x, struct rt_graph *g, cudaGraphNode_t *err_node, int *result)
{
	enum { UPDATE_SUCCESS = 0, UPDATE_ERROR_TOPOLOGY = 2, UPDATE_ERROR_NODE_TYPE = 3 };
	if (err_node)
		*err_node = NULL;
	if (!x || !g)
		return cudaErrorInvalidValue;
	if (x->g.n != g->n) {
		*result = UPDATE_ERROR_TOPOLOGY;
		return 910; /* cudaErrorGraphExecUpdateFailure */
	}
	for (size_t i = 0; i < g->n; i++)
		if (x->g.nodes[i]->type != g->nodes[i]->type) {
			*result = UPDATE_ERROR_NODE_TYPE;
			if (err_node)
				*err_node = g->nodes[i];
			return 910;
		}
	struct rt_graph copy;
	cudaError_t e = graph_copy(&copy, g);
	if (e)
		return e;
	graph_clear(&x->g);
	x->g = copy;
	*result = UPDATE_SUCCESS;
	return 0;
}

#if VGPU_CUDART_ABI == 11
RT_API cudaGraphExecUpdate(cudaGraphExec_t x, cudaGraph_t g, cudaGraphNode_t *err_node, int *result)
{
	VGPU_API();
	int r = 0;
	cudaError_t e = exec_update(x, g, err_node, &r);
	if (result)
		*result = r;
	RT_RETURN(e);
}
#else
/* cudaGraphExecUpdateResultInfo: result, errorNode, errorFromNode */
struct rt_update_info {
	int result;
	cudaGraphNode_t errorNode, errorFromNode;
};

RT_API cudaGraphExecUpdate(cudaGraphExec_t x, cudaGraph_t g, struct rt_update_info *info)
{
	VGPU_API();
	int r = 0;
	cudaGraphNode_t bad = NULL;
	cudaError_t e = exec_update(x, g, &bad, &r);
	if (info) {
		info->result = r;
		info->errorNode = bad;
		info->errorFromNode = NULL;
	}
	RT_RETURN(e);
}
#endif

/* ---------------- instantiate and launch ---------------- */

static cudaError_t instantiate(cudaGraphExec_t *out, cudaGraph_t g)
{
	if (!out || !g)
		return cudaErrorInvalidValue;
	struct rt_exec *x = calloc(1, sizeof *x);
	if (!x)
		return cudaErrorMemoryAllocation;
	cudaError_t e = graph_copy(&x->g, g);
	if (e) {
		free(x);
		return e;
	}
	*out = x;
	return 0;
}

#if VGPU_CUDART_ABI == 11
RT_API cudaGraphInstantiate(cudaGraphExec_t *out, cudaGraph_t g, cudaGraphNode_t *err_node, char *log, size_t logsz)
{
	VGPU_API();
	if (err_node)
		*err_node = NULL;
	if (log && logsz)
		log[0] = 0;
	RT_RETURN(instantiate(out, g));
}
#else
RT_API cudaGraphInstantiate(cudaGraphExec_t *out, cudaGraph_t g, unsigned long long flags)
{
	VGPU_API();
	(void)flags;
	RT_RETURN(instantiate(out, g));
}
#endif

RT_API cudaGraphInstantiateWithFlags(cudaGraphExec_t *out, cudaGraph_t g, unsigned long long flags)
{
	VGPU_API();
	(void)flags;
	RT_RETURN(instantiate(out, g));
}

RT_API cudaGraphExecDestroy(cudaGraphExec_t x)
{
	VGPU_API();
	if (!x)
		RT_RETURN(cudaErrorInvalidValue);
	graph_clear(&x->g);
	free(x);
	return cudaSuccess;
}

RT_API cudaGraphUpload(cudaGraphExec_t x, cudaStream_t s)
{
	VGPU_API();
	(void)s;
	RT_RETURN(x ? cudaSuccess : cudaErrorInvalidValue);
}
VGPU_ALIAS(cudaGraphUpload_ptsz, cudaGraphUpload);

/* Launch-parameter keys for a packed block (cuda.h CU_LAUNCH_PARAM_*). */
#define PARAM_END ((void *)0)
#define PARAM_BUFFER_POINTER ((void *)1)
#define PARAM_BUFFER_SIZE ((void *)2)

RT_API cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s)
{
	VGPU_API();
	if (!x)
		RT_RETURN(cudaErrorInvalidValue);
	cudaError_t e = rt_init();
	if (e)
		RT_RETURN(e);
	uint64_t h = vgpu_stream_handle(s);
	for (size_t i = 0; i < x->g.n && !e; i++) {
		struct rt_node *n = x->g.nodes[i];
		switch (n->type) {
		case NODE_KERNEL: {
			size_t sz = n->psize;
			void *extra[] = {PARAM_BUFFER_POINTER, n->params, PARAM_BUFFER_SIZE, &sz, PARAM_END};
			uint32_t g[3] = {n->grid.x, n->grid.y, n->grid.z}, b[3] = {n->block.x, n->block.y, n->block.z};
			e = vgpu_launch(n->func, h, g, b, n->smem, NULL, extra);
			break;
		}
		case NODE_MEMCPY:
			e = rt_copy3d(&n->copy, s, 1);
			break;
		case NODE_MEMSET:
			e = vgpu_memset((uint64_t)(uintptr_t)n->dst, n->value, n->elem, n->width,
					n->height > 1 ? n->pitch : 0, n->height > 1 ? n->height : 0, h, 1);
			break;
		case NODE_HOST:
			e = rt_host_func(s, n->fn, n->user);
			break;
		default:
			break;
		}
	}
	RT_RETURN(e);
}
VGPU_ALIAS(cudaGraphLaunch_ptsz, cudaGraphLaunch);
