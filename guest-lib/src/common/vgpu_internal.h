/*
 * vgpu_internal.h - the guest library's internal interface.
 *
 * libcuda.so.1 holds the core: the one transport of the process (host mode:
 * a unix socket to `vgpu serve`; guest mode: /dev/vgpu), the batch of queued
 * asynchronous calls, the device-info cache, the maps of device allocations
 * and pinned host ranges, modules and functions, logging and statistics.
 * The few functions marked VGPU_PRIVATE are exported (unversioned, private)
 * for libnvidia-ml.so.1, which links against it so that a process that uses
 * CUDA and NVML has one session with the host, and for the tests; the rest
 * are internal to libcuda.so.1.
 *
 * Every function returning int returns a CUresult (0 = success).
 */
#ifndef VGPU_INTERNAL_H
#define VGPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

#include "vgpu_protocol.h"

#define VGPU_EXPORT __attribute__((visibility("default")))
#define VGPU_PRIVATE VGPU_EXPORT

/* CUresult values used by the library (ABI constants, cuda.h). */
enum {
	VGPU_OK = 0,
	VGPU_E_INVALID_VALUE = 1,
	VGPU_E_OUT_OF_MEMORY = 2,
	VGPU_E_NOT_INITIALIZED = 3,
	VGPU_E_DEINITIALIZED = 4,
	VGPU_E_NO_DEVICE = 100,
	VGPU_E_INVALID_DEVICE = 101,
	VGPU_E_INVALID_IMAGE = 200,
	VGPU_E_INVALID_CONTEXT = 201,
	VGPU_E_NO_BINARY_FOR_GPU = 209,
	VGPU_E_INVALID_SOURCE = 300,
	VGPU_E_FILE_NOT_FOUND = 301,
	VGPU_E_INVALID_HANDLE = 400,
	VGPU_E_NOT_FOUND = 500,
	VGPU_E_NOT_READY = 600,
	VGPU_E_HOST_MEMORY_ALREADY_REGISTERED = 712,
	VGPU_E_HOST_MEMORY_NOT_REGISTERED = 713,
	VGPU_E_LAUNCH_FAILED = 719,
	VGPU_E_NOT_PERMITTED = 800,
	VGPU_E_NOT_SUPPORTED = 801,
	VGPU_E_STREAM_CAPTURE_UNSUPPORTED = 900,
	VGPU_E_STREAM_CAPTURE_INVALIDATED = 901,
	VGPU_E_UNKNOWN = 999,
};

/* ---- logging (VGPU_LOG=error|warn|info|debug, VGPU_LOG_FILE=path) ---- */
enum { VGPU_LOG_ERROR = 0, VGPU_LOG_WARN = 1, VGPU_LOG_INFO = 2, VGPU_LOG_DEBUG = 3 };
VGPU_PRIVATE extern int vgpu_log_level;
VGPU_PRIVATE void vgpu_logf(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define VLOG(lvl, ...) do { if ((lvl) <= vgpu_log_level) vgpu_logf((lvl), __VA_ARGS__); } while (0)
#define VERR(...) VLOG(VGPU_LOG_ERROR, __VA_ARGS__)
#define VWARN(...) VLOG(VGPU_LOG_WARN, __VA_ARGS__)
#define VINFO(...) VLOG(VGPU_LOG_INFO, __VA_ARGS__)
#define VDEBUG(...) VLOG(VGPU_LOG_DEBUG, __VA_ARGS__)

/* Logs "<name> is not supported" once per *once flag. */
void vgpu_unsupported(const char *name, int *once);
/* The same at info level: for NVML, where NOT_SUPPORTED is an ordinary
 * answer that tools such as nvidia-smi probe for by the dozen. */
VGPU_PRIVATE void vgpu_unsupported_info(const char *name, int *once);

/* ---- statistics (VGPU_STATS=1: a table at exit) ---- */
struct vgpu_apistat {
	const char *name;
	uint64_t calls;
	uint64_t ns;
	struct vgpu_apistat *next;
	int linked;
};
struct vgpu_apitimer {
	struct vgpu_apistat *st;
	uint64_t t0; /* 0 unless VGPU_STATS is on */
};
VGPU_PRIVATE struct vgpu_apitimer vgpu_api_enter(struct vgpu_apistat *st);
VGPU_PRIVATE void vgpu_api_leave(struct vgpu_apitimer *t);
/* The first line of every hand-written API function: counts the call and,
 * with VGPU_STATS, the time until it returns (a cleanup handler). */
#define VGPU_API() \
	static struct vgpu_apistat vgpu_st_ = { __func__, 0, 0, NULL, 0 }; \
	struct vgpu_apitimer vgpu_tm_ __attribute__((cleanup(vgpu_api_leave), unused)) = vgpu_api_enter(&vgpu_st_)

/* ---- SHA-256 ---- */
void vgpu_sha256(const void *data, size_t len, uint8_t out[32]);

/* ---- MD2 (RFC 1319) and HMAC-MD2 (RFC 2104), core/md2.c ---- */
struct vgpu_md2 {
	uint8_t x[48], c[16], buf[16];
	unsigned n; /* bytes in buf */
};
void vgpu_md2_init(struct vgpu_md2 *h);
void vgpu_md2_update(struct vgpu_md2 *h, const void *data, size_t len);
void vgpu_md2_final(struct vgpu_md2 *h, uint8_t out[16]);
void vgpu_md2(const void *data, size_t len, uint8_t out[16]);
struct vgpu_hmac_md2 {
	struct vgpu_md2 inner;
	uint8_t key[16];
};
/* A 16-byte key (MD2's block size). */
void vgpu_hmac_md2_init(struct vgpu_hmac_md2 *m, const uint8_t key[16]);
void vgpu_hmac_md2_update(struct vgpu_hmac_md2 *m, const void *data, size_t len);
void vgpu_hmac_md2_final(struct vgpu_hmac_md2 *m, uint8_t out[16]);

/* ---- transport ---- */

/* A user buffer of a call. TO_HOST buffers are read by the host (H2D
 * source, module image); a FROM_HOST buffer is written (D2H destination).
 * ref_off is the offset of its struct vgpu_buf_ref in the request payload;
 * the transport fills the ref in (segments in guest mode, inline in host
 * mode; a registered range becomes a region ref). */
struct vgpu_xbuf {
	void *addr;
	uint64_t len;
	uint32_t dir; /* VGPU_DIR_TO_HOST or VGPU_DIR_FROM_HOST */
	uint32_t ref_off;
};
#define VGPU_DIR_TO_HOST 1u
#define VGPU_DIR_FROM_HOST 2u

/* Connects (once per process) and says HELLO. Returns a CUresult. */
VGPU_PRIVATE int vgpu_init(void);
/* Host mode (unix socket, inline data) or guest mode (/dev/vgpu). */
int vgpu_host_mode(void);
void vgpu_set_force_inline(int on);
int vgpu_inline_copies(void);
/* Registered regions may name memory (not forced inline by vgpuSetOption). */
int vgpu_regions_usable(void);
/* Host mode with a backend that maps shared memfds (VGPU_FEATURE_HOST_SHARE). */
int vgpu_host_share_ok(void);
/* Host mode: a call with the library's own segments and/or one fd beside
 * the frame (HOST_SHARE, GUEST_REGISTER of shared memory). */
int vgpu_host_call(uint16_t op, const void *req, uint32_t req_len, const struct vgpu_segment *segs,
				uint32_t nsegs, int sfd, void *reply, uint32_t reply_len);
const struct vgpu_hello_reply *vgpu_hello(void);
/* Host mode, a call in two halves, so several can be in flight (staging
 * copies): begin flushes nothing and sends req; end waits for the reply
 * (its fixed part to reply), frees pc and returns a transport error or the
 * reply's status. Every begun call must be ended. */
struct vgpu_pending_call;
int vgpu_host_begin(uint16_t op, const void *req, uint32_t req_len, struct vgpu_pending_call **out);
int vgpu_host_end(struct vgpu_pending_call *pc, void *reply, uint32_t reply_len);

/* One synchronous call: flushes the batch first, then sends req (fixed
 * part + tail, req_len bytes) and waits. The reply's fixed part goes to
 * reply (reply_len bytes, or less if the host sent less); *tail_len (may be
 * NULL) receives the size of the reply tail, copied to tail/tail_cap.
 * A FROM_HOST buffer in host mode receives the reply tail instead. */
VGPU_PRIVATE int vgpu_call(uint16_t op, const void *req, uint32_t req_len,
			   const struct vgpu_xbuf *bufs, int nbufs,
			   void *reply, uint32_t reply_len,
			   void *tail, uint32_t tail_cap, uint32_t *tail_len);
/* Queues an asynchronous (batchable) call; it is sent with the next
 * synchronizing call or when the batch is full. Errors surface at the next
 * synchronizing call. */
int vgpu_queue(uint16_t op, const void *req, uint32_t req_len);
/* Sends the queued batch now. */
int vgpu_flush(void);
/* Before a synchronizing call: makes sure the errors of queued work are
 * known when that call returns (see transport.c). */
int vgpu_sync_point(void);
/* Returns and clears the deferred error of earlier asynchronous calls. */
int vgpu_take_deferred_error(void);
/* Largest payload one frame may carry (for chunking copies). */
uint64_t vgpu_max_chunk(void);

/* ---- devices ---- */
VGPU_PRIVATE int vgpu_device_count(int *count);
VGPU_PRIVATE int vgpu_device_info(int dev, const struct vgpu_device_info **out);
int vgpu_device_attr(int dev, int attr, int *value);

/* ---- device allocations (for cudaMemcpyDefault and pointer queries) ---- */
void vgpu_devmap_add(uint64_t ptr, uint64_t size, int dev);
/* The same for an allocation from memory pool pool (a CUmemoryPool). */
void vgpu_devmap_add_pool(uint64_t ptr, uint64_t size, int dev, const void *pool);
/* Returns 1, the allocation's id (unique in the process) and its pool (or
 * NULL) if ptr lies in one. */
int vgpu_devmap_info(uint64_t ptr, uint64_t *id, const void **pool);
void vgpu_devmap_remove(uint64_t ptr);
/* Drops every allocation of device dev (after a device reset). */
void vgpu_devmap_forget(int dev);
/* Returns 1 and the allocation if ptr lies in one. */
int vgpu_devmap_find(uint64_t ptr, uint64_t *base, uint64_t *size, int *dev);

/* ---- pinned / registered host ranges ---- */
struct vgpu_hostrange {
	void *addr;
	uint64_t len;
	uint64_t region; /* host region id (guest mode; host mode: shared memory), else 0 */
	uint64_t dev_ptr; /* device address if mapped, else 0 */
	unsigned flags;
	int owned; /* allocated by the library (cudaMallocHost) */
	int mmapped; /* guest mode: mapped from /dev/vgpu; host mode: a shared memfd */
	uint64_t share; /* host mode: the pseudo guest-physical base it is shared at, else 0 */
};
int vgpu_host_alloc(size_t size, unsigned flags, void **out);
int vgpu_host_free(void *p);
int vgpu_host_register(void *p, size_t size, unsigned flags);
int vgpu_host_unregister(void *p);
/* Finds the pinned range holding [p, p+len); copies it to *out. */
int vgpu_hostmap_find(const void *p, uint64_t len, struct vgpu_hostrange *out);
/* Finds the pinned range registered as host region id; copies it to *out. */
int vgpu_hostmap_region(uint64_t region, struct vgpu_hostrange *out);
#define VGPU_HOSTALLOC_MAPPED 0x2u
/* Host mode: shared memory of len bytes (a sealed memfd the backend maps),
 * registered as a region; fills r's addr, region, share. */
int vgpu_share_alloc(struct vgpu_hostrange *r);
/* Host mode: a synchronous copy of pageable memory through the staging
 * ring (staging.c). *handled is 0 when staging does not apply (too small,
 * no shared memory, VGPU_STAGING=0, busy): the caller copies inline. */
/* Bytes copied through staging so far (tests, statistics). */
VGPU_PRIVATE uint64_t vgpu_staged_bytes(void);
int vgpu_staged_copy(int to_dev, uint64_t dptr, void *host, uint64_t n, uint64_t stream, int *handled);
/* memcpy split across up to vgpu_copy_threads() threads when n is large
 * (parcopy.c; VGPU_STAGING_THREADS). */
void vgpu_par_copy(void *dst, const void *src, size_t n);
unsigned vgpu_copy_threads(void);

/* ---- memory operations (device pointers are host GPU addresses) ---- */
int vgpu_mem_alloc(int dev, uint64_t size, uint64_t *ptr);
int vgpu_mem_free(uint64_t ptr);
/* stream: host stream handle; async: may return before the copy ends (only
 * honoured where the host memory is pinned). */
int vgpu_memcpy_htod(uint64_t dst, const void *src, uint64_t n, uint64_t stream, int async);
int vgpu_memcpy_dtoh(void *dst, uint64_t src, uint64_t n, uint64_t stream, int async);
int vgpu_memcpy_dtod(uint64_t dst, uint64_t src, uint64_t n, uint64_t stream, int async);
int vgpu_memset(uint64_t dst, uint32_t value, uint32_t elem, uint64_t count,
			     uint64_t pitch, uint64_t height, uint64_t stream, int async);
VGPU_PRIVATE int vgpu_mem_get_info(int dev, uint64_t *free_b, uint64_t *total_b);
/* cuMemGetAllocationGranularity for device memory (MEM_GET_GRANULARITY). */
int vgpu_mem_granularity(const struct vgpu_granularity_req *req, uint64_t *granularity);

/* ---- modules and functions ---- */
/* A function's magic is VGPU_FUNC_MAGIC. A CUkernel (a library's kernel,
 * cuda/library.c), which the driver API takes wherever it takes a
 * CUfunction, begins with a struct vgpu_func of magic VGPU_KERNEL_MAGIC
 * and host handle 0 (no host gives out 0): vgpu_func_resolve turns it into
 * its function. */
#define VGPU_FUNC_MAGIC 0x636e7566u /* "func" */
#define VGPU_KERNEL_MAGIC 0x6c6e726bu /* "krnl" */
struct vgpu_func {
	uint32_t magic; /* VGPU_FUNC_MAGIC */
	uint64_t handle; /* host function handle */
	uint32_t nparams;
	uint32_t param_bytes;
	struct vgpu_param_info *params;
	char *name;
	struct vgpu_module *mod;
	int attrs_valid;
	int32_t attrs[VGPU_MAX_FUNC_ATTRS];
	struct vgpu_func *next;
	struct vgpu_func *hnext; /* vgpu_func_by_handle's chain */
};
/* A module global the backend named once (cuModuleGetGlobal): its address
 * and size stay fixed while the module is loaded. */
struct vgpu_global {
	struct vgpu_global *next;
	uint64_t ptr, size;
	char name[];
};
struct vgpu_module {
	uint64_t handle;
	int dev;
	struct vgpu_func *funcs;
	struct vgpu_global *globals; /* what vgpu_module_get_global answered */
	pthread_mutex_t mu;
};
/* kind: VGPU_IMAGE_*; image must stay valid during the call only. */
int vgpu_module_load(int dev, const void *image, uint64_t size, uint32_t kind, struct vgpu_module **out);
int vgpu_module_unload(struct vgpu_module *m);
int vgpu_module_get_function(struct vgpu_module *m, const char *name, struct vgpu_func **out);
/* Calls fn(user, f) for each kernel of m in the driver's order until fn
 * returns non-zero (fn NULL: none); *total (if not NULL) gets how many
 * kernels m has. */
int vgpu_module_functions(struct vgpu_module *m, int (*fn)(void *user, struct vgpu_func *f),
				       void *user, uint32_t *total);
int vgpu_module_get_global(struct vgpu_module *m, const char *name, uint64_t *ptr, uint64_t *size);
/* *f as a function: a CUkernel given where a CUfunction goes becomes its
 * function in the current context (loading its library there if need be);
 * anything else is CUDA_ERROR_INVALID_HANDLE. The calls below taking a
 * function do this themselves. */
int vgpu_func_resolve(struct vgpu_func **f);
/* The loaded function of host handle h (a graph node's, as the host names
 * it), or NULL. */
struct vgpu_func *vgpu_func_by_handle(uint64_t h);
/* A CUkernel's function on device dev (< 0: the current context's);
 * cuda/library.c. */
int vgpu_kernel_function(void *kernel, int dev, struct vgpu_func **out);
/* After a device reset released the device's modules on the host: the
 * libraries load again there when next needed (cuda/library.c). */
void vgpu_library_forget(int dev);
int vgpu_func_attrs(struct vgpu_func *f, const int32_t **attrs);
int vgpu_func_set_attr(struct vgpu_func *f, int attr, int value);
int vgpu_occupancy(struct vgpu_func *f, int block, uint64_t dynsmem, unsigned flags, int *blocks);
/* Fatbin size from its header (magic 0xBA55ED50), 0 if not a fatbin. */
uint64_t vgpu_fatbin_size(const void *image);
/* Packs a launch's parameters (args: one pointer per parameter, or extra's
 * buffer) into params (VGPU_MAX_PARAM_BYTES), as f's layout says; *psize
 * gets the block's size. */
int vgpu_pack_params(const struct vgpu_func *f, void **args, void **extra, uint8_t *params,
				  uint32_t *psize);
/* Packs args (an array of pointers, one per parameter) and queues a launch. */
int vgpu_launch(struct vgpu_func *f, uint64_t stream, const uint32_t grid[3],
			     const uint32_t block[3], uint32_t smem, void **args, void **extra);
/* The same in thread-block clusters (cl: shape, all 0 for the kernel's own,
 * and scheduling policy). */
int vgpu_launch_cluster(struct vgpu_func *f, uint64_t stream, const uint32_t grid[3],
				     const uint32_t block[3], uint32_t smem, const struct vgpu_cluster *cl,
				     void **args, void **extra);
/* The same with launch attributes (LAUNCH_KERNEL_ATTRS: cuLaunchKernelEx's
 * beside the cluster's, cuLaunchCooperativeKernel). */
int vgpu_launch_attrs(struct vgpu_func *f, uint64_t stream, const uint32_t grid[3],
				   const uint32_t block[3], uint32_t smem, const struct vgpu_cluster *cl,
				   const struct vgpu_launch_attrs *la, void **args, void **extra);
/* cuOccupancyMaxActiveClusters for f launched with this geometry. */
int vgpu_occupancy_clusters(struct vgpu_func *f, const uint32_t grid[3], const uint32_t block[3],
					 uint32_t smem, const struct vgpu_cluster *cl, int *clusters);

/* ---- streams, events, host functions ---- */
int vgpu_stream_create(int dev, unsigned flags, int prio, uint64_t *handle);
int vgpu_simple(uint16_t op, uint64_t handle); /* HandleReq, empty reply, sync */
int vgpu_event_create(int dev, unsigned flags, uint64_t *handle);
int vgpu_event_record(uint64_t ev, uint64_t stream, unsigned flags);
int vgpu_stream_wait_event(uint64_t stream, uint64_t ev, unsigned flags);
int vgpu_elapsed(uint64_t start, uint64_t end, float *ms);
int vgpu_device_sync(int dev);
typedef void (*vgpu_hostfn)(void *user, int status);
/* Enqueues fn(user, status) on stream; it runs on a library thread. */
int vgpu_host_func(uint64_t stream, vgpu_hostfn fn, void *user);

/* ---- small helpers ---- */
VGPU_PRIVATE uint64_t vgpu_now_ns(void);

/* One turn of a spin loop: PAUSE on x86, which leaves the core's other
 * hardware thread (often the backend, or the driver call it waits for) its
 * share of the pipeline, and leaves the loop without a memory-order machine
 * clear when the watched word changes. */
static inline void vgpu_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

#endif /* VGPU_INTERNAL_H */
