/*
 * rt_stream.c - streams, events and host functions of the runtime.
 * Stream and event objects are shared with the driver API (cudaStream_t
 * and CUstream point at the same struct); records, waits and destroys are
 * queued, synchronize and query are round trips.
 */
#include <stdlib.h>
#include <string.h>

#include "rt.h"

/* ---------------- streams ---------------- */

/* Every live stream, so the end of a capture can release the streams
 * that joined it. */
static pthread_mutex_t streams_mu = PTHREAD_MUTEX_INITIALIZER;
static struct vgpu_stream **streams;
static size_t nstreams, streams_cap;

static void track(struct vgpu_stream *s, int on)
{
	pthread_mutex_lock(&streams_mu);
	if (on) {
		if (nstreams == streams_cap) {
			size_t nc = streams_cap ? streams_cap * 2 : 64;
			struct vgpu_stream **a = realloc(streams, nc * sizeof *a);
			if (a) {
				streams = a;
				streams_cap = nc;
			}
		}
		if (nstreams < streams_cap)
			streams[nstreams++] = s;
	} else {
		for (size_t i = 0; i < nstreams; i++)
			if (streams[i] == s) {
				streams[i] = streams[--nstreams];
				break;
			}
	}
	pthread_mutex_unlock(&streams_mu);
}

void rt_capture_end(void *graph)
{
	pthread_mutex_lock(&streams_mu);
	for (size_t i = 0; i < nstreams; i++)
		if (streams[i]->capture == graph)
			streams[i]->capture = NULL;
	pthread_mutex_unlock(&streams_mu);
}

static cudaError_t stream_create(cudaStream_t *ps, unsigned flags, int prio)
{
	if (!ps)
		return cudaErrorInvalidValue;
	cudaError_t e = rt_init();
	if (e)
		return e;
	struct vgpu_stream *s = calloc(1, sizeof *s);
	if (!s)
		return cudaErrorMemoryAllocation;
	e = vgpu_stream_create(rt_device(), flags, prio, &s->handle);
	if (e) {
		free(s);
		return e;
	}
	s->dev = rt_device();
	s->flags = flags;
	s->priority = prio;
	track(s, 1);
	*ps = s;
	return 0;
}

RT_API cudaStreamCreate(cudaStream_t *ps)
{
	VGPU_API();
	RT_RETURN(stream_create(ps, 0, 0));
}

RT_API cudaStreamCreateWithFlags(cudaStream_t *ps, unsigned flags)
{
	VGPU_API();
	RT_RETURN(stream_create(ps, flags, 0));
}

RT_API cudaStreamCreateWithPriority(cudaStream_t *ps, unsigned flags, int prio)
{
	VGPU_API();
	RT_RETURN(stream_create(ps, flags, prio));
}

static int real_stream(cudaStream_t s)
{
	return s && s != VGPU_STREAM_LEGACY && s != VGPU_STREAM_PER_THREAD;
}

RT_API cudaStreamDestroy(cudaStream_t s)
{
	VGPU_API();
	if (!real_stream(s))
		RT_RETURN(cudaErrorInvalidResourceHandle);
	struct vgpu_handle_req req = {.handle = s->handle};
	cudaError_t e = vgpu_queue(VGPU_OP_STREAM_DESTROY, &req, sizeof req);
	track(s, 0);
	free(s);
	RT_RETURN(e);
}

RT_API cudaStreamSynchronize(cudaStream_t s)
{
	VGPU_API();
	cudaError_t e = rt_init();
	if (e)
		RT_RETURN(e);
	if (rt_capturing(s))
		RT_RETURN(cudaErrorStreamCaptureUnsupported);
	RT_RETURN(vgpu_simple(VGPU_OP_STREAM_SYNCHRONIZE, vgpu_stream_handle(s)));
}
VGPU_ALIAS(cudaStreamSynchronize_ptsz, cudaStreamSynchronize);

RT_API cudaStreamQuery(cudaStream_t s)
{
	VGPU_API();
	cudaError_t e = rt_init();
	if (e)
		RT_RETURN(e);
	e = vgpu_simple(VGPU_OP_STREAM_QUERY, vgpu_stream_handle(s));
	return e == cudaErrorNotReady ? e : rt_err(e); /* not-ready is not an error to remember */
}
VGPU_ALIAS(cudaStreamQuery_ptsz, cudaStreamQuery);

RT_API cudaStreamGetFlags(cudaStream_t s, unsigned *flags)
{
	VGPU_API();
	if (!flags)
		RT_RETURN(cudaErrorInvalidValue);
	*flags = real_stream(s) ? s->flags : 0;
	return cudaSuccess;
}
VGPU_ALIAS(cudaStreamGetFlags_ptsz, cudaStreamGetFlags);

RT_API cudaStreamGetPriority(cudaStream_t s, int *prio)
{
	VGPU_API();
	if (!prio)
		RT_RETURN(cudaErrorInvalidValue);
	*prio = real_stream(s) ? s->priority : 0;
	return cudaSuccess;
}
VGPU_ALIAS(cudaStreamGetPriority_ptsz, cudaStreamGetPriority);

#if VGPU_CUDART_ABI >= 12
RT_API cudaStreamGetDevice(cudaStream_t s, int *dev)
{
	VGPU_API();
	if (!dev)
		RT_RETURN(cudaErrorInvalidValue);
	*dev = real_stream(s) ? s->dev : rt_device();
	return cudaSuccess;
}
VGPU_ALIAS(cudaStreamGetDevice_ptsz, cudaStreamGetDevice);

RT_API cudaStreamGetId(cudaStream_t s, unsigned long long *id)
{
	VGPU_API();
	if (!id)
		RT_RETURN(cudaErrorInvalidValue);
	*id = real_stream(s) ? s->handle : (uintptr_t)s;
	return cudaSuccess;
}
VGPU_ALIAS(cudaStreamGetId_ptsz, cudaStreamGetId);
#endif

RT_API cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned flags)
{
	VGPU_API();
	if (!ev)
		RT_RETURN(cudaErrorInvalidResourceHandle);
	if (ev->capture) {
		/* joining a capture: s now records into the same graph */
		if (real_stream(s))
			s->capture = ev->capture;
		return cudaSuccess;
	}
	if (rt_capturing(s))
		return cudaSuccess; /* ordering within one captured graph is its node order */
	RT_RETURN(vgpu_stream_wait_event(vgpu_stream_handle(s), ev->handle, flags));
}
VGPU_ALIAS(cudaStreamWaitEvent_ptsz, cudaStreamWaitEvent);

/* ---------------- host functions ---------------- */

struct rt_cb {
	void (*fn)(void *);
	void (*scb)(cudaStream_t, cudaError_t, void *);
	cudaStream_t stream;
	void *user;
};

static void run_cb(void *p, int status)
{
	struct rt_cb *c = p;
	if (c->fn)
		c->fn(c->user);
	else
		c->scb(c->stream, status, c->user);
	free(c);
}

cudaError_t rt_host_func(cudaStream_t s, void (*fn)(void *), void *user)
{
	struct rt_cb *c = calloc(1, sizeof *c);
	if (!c)
		return cudaErrorMemoryAllocation;
	c->fn = fn;
	c->user = user;
	cudaError_t e = vgpu_host_func(vgpu_stream_handle(s), run_cb, c);
	if (e)
		free(c);
	return e;
}

RT_API cudaLaunchHostFunc(cudaStream_t s, void (*fn)(void *), void *user)
{
	VGPU_API();
	if (!fn)
		RT_RETURN(cudaErrorInvalidValue);
	cudaError_t e = rt_init();
	if (e)
		RT_RETURN(e);
	if (rt_capturing(s))
		RT_RETURN(rt_capture_host(s, fn, user));
	RT_RETURN(rt_host_func(s, fn, user));
}
VGPU_ALIAS(cudaLaunchHostFunc_ptsz, cudaLaunchHostFunc);

RT_API cudaStreamAddCallback(cudaStream_t s, void (*fn)(cudaStream_t, cudaError_t, void *), void *user,
			     unsigned flags)
{
	VGPU_API();
	if (!fn || flags)
		RT_RETURN(cudaErrorInvalidValue);
	cudaError_t e = rt_init();
	if (e)
		RT_RETURN(e);
	struct rt_cb *c = calloc(1, sizeof *c);
	if (!c)
		RT_RETURN(cudaErrorMemoryAllocation);
	c->scb = fn;
	c->stream = s;
	c->user = user;
	e = vgpu_host_func(vgpu_stream_handle(s), run_cb, c);
	if (e)
		free(c);
	RT_RETURN(e);
}
VGPU_ALIAS(cudaStreamAddCallback_ptsz, cudaStreamAddCallback);

/* ---------------- events ---------------- */

static cudaError_t event_create(cudaEvent_t *pe, unsigned flags)
{
	if (!pe)
		return cudaErrorInvalidValue;
	cudaError_t e = rt_init();
	if (e)
		return e;
	struct vgpu_event *ev = calloc(1, sizeof *ev);
	if (!ev)
		return cudaErrorMemoryAllocation;
	e = vgpu_event_create(rt_device(), flags, &ev->handle);
	if (e) {
		free(ev);
		return e;
	}
	ev->dev = rt_device();
	ev->flags = flags;
	*pe = ev;
	return 0;
}

RT_API cudaEventCreate(cudaEvent_t *pe)
{
	VGPU_API();
	RT_RETURN(event_create(pe, 0));
}

RT_API cudaEventCreateWithFlags(cudaEvent_t *pe, unsigned flags)
{
	VGPU_API();
	RT_RETURN(event_create(pe, flags));
}

RT_API cudaEventDestroy(cudaEvent_t ev)
{
	VGPU_API();
	if (!ev)
		RT_RETURN(cudaErrorInvalidResourceHandle);
	struct vgpu_handle_req req = {.handle = ev->handle};
	cudaError_t e = vgpu_queue(VGPU_OP_EVENT_DESTROY, &req, sizeof req);
	free(ev);
	RT_RETURN(e);
}

static cudaError_t record(cudaEvent_t ev, cudaStream_t s, unsigned flags)
{
	if (!ev)
		return cudaErrorInvalidResourceHandle;
	if (rt_capturing(s)) {
		ev->capture = s->capture; /* a fork/join point inside the capture */
		return 0;
	}
	ev->capture = NULL;
	return vgpu_event_record(ev->handle, vgpu_stream_handle(s), flags);
}

RT_API cudaEventRecord(cudaEvent_t ev, cudaStream_t s)
{
	VGPU_API();
	RT_RETURN(record(ev, s, 0));
}
VGPU_ALIAS(cudaEventRecord_ptsz, cudaEventRecord);

RT_API cudaEventRecordWithFlags(cudaEvent_t ev, cudaStream_t s, unsigned flags)
{
	VGPU_API();
	RT_RETURN(record(ev, s, flags));
}
VGPU_ALIAS(cudaEventRecordWithFlags_ptsz, cudaEventRecordWithFlags);

RT_API cudaEventSynchronize(cudaEvent_t ev)
{
	VGPU_API();
	if (!ev)
		RT_RETURN(cudaErrorInvalidResourceHandle);
	RT_RETURN(vgpu_simple(VGPU_OP_EVENT_SYNCHRONIZE, ev->handle));
}

RT_API cudaEventQuery(cudaEvent_t ev)
{
	VGPU_API();
	if (!ev)
		RT_RETURN(cudaErrorInvalidResourceHandle);
	cudaError_t e = vgpu_simple(VGPU_OP_EVENT_QUERY, ev->handle);
	return e == cudaErrorNotReady ? e : rt_err(e);
}

RT_API cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
	VGPU_API();
	if (!ms || !a || !b)
		RT_RETURN(cudaErrorInvalidValue);
	RT_RETURN(vgpu_elapsed(a->handle, b->handle, ms));
}
#if VGPU_CUDART_ABI >= 12
VGPU_ALIAS(cudaEventElapsedTime_v2, cudaEventElapsedTime);
#endif
