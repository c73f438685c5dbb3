/*
 * module.c - module images, functions and launches.
 *
 * An image is named to the host by its SHA-256 first (MODULE_LOAD with no
 * bytes); only if the host answers CUDA_ERROR_NOT_FOUND (500) are the bytes
 * sent. A function's parameter layout (offset and size of each parameter)
 * comes from the host's MODULE_GET_FUNCTION reply and is cached with the
 * function, so a launch packs its arguments locally and is queued.
 */
#include <stdlib.h>
#include <string.h>

#include "vgpu_internal.h"
#include "core.h"

#define FATBIN_MAGIC 0xBA55ED50u

uint64_t vgpu_fatbin_size(const void *image)
{
	const uint8_t *p = image;
	uint32_t magic;
	uint16_t hsize;
	uint64_t fsize;
	if (!p)
		return 0;
	memcpy(&magic, p, 4);
	if (magic != FATBIN_MAGIC)
		return 0;
	/* header: magic u32, version u16, header size u16, fat size u64 */
	memcpy(&hsize, p + 6, 2);
	memcpy(&fsize, p + 8, 8);
	return (uint64_t)hsize + fsize;
}

int vgpu_module_load(int dev, const void *image, uint64_t size, uint32_t kind, struct vgpu_module **out)
{
	int rc = vgpu_init();
	if (rc)
		return rc;
	if (!image || !size)
		return VGPU_E_INVALID_IMAGE;
	struct vgpu_module_load_req req;
	memset(&req, 0, sizeof req);
	req.device = (uint32_t)dev;
	req.kind = kind;
	vgpu_sha256(image, size, req.hash);
	struct vgpu_module_load_reply r;
	if (vgpu_hello()->features & VGPU_FEATURE_MODULE_HASH) {
		req.image.kind = VGPU_BUF_NONE;
		rc = vgpu_call(VGPU_OP_MODULE_LOAD, &req, sizeof req, NULL, 0, &r, sizeof r, NULL, 0, NULL);
	} else {
		rc = VGPU_E_NOT_FOUND;
	}
	if (rc == VGPU_E_NOT_FOUND) {
		/* Host mode sends bytes inline, one frame at most; a larger image
		 * (cuBLAS 11 has fatbins of 23 MB) goes through memory shared with
		 * the backend, named by region as guest mode names pinned memory. */
		void *staged = NULL;
		if (size > vgpu_max_chunk() && vgpu_host_mode()) {
			struct vgpu_hostrange hr;
			if (vgpu_host_alloc(size, 0, &staged) == 0 && vgpu_hostmap_find(staged, size, &hr) && hr.region) {
				memcpy(staged, image, size);
			} else {
				vgpu_host_free(staged);
				VERR("module image of %llu bytes exceeds the frame limit and the backend shares no memory "
				     "with this process (VGPU_FEATURE_HOST_SHARE); run a newer vgpu serve",
				     (unsigned long long)size);
				return VGPU_E_INVALID_IMAGE;
			}
		}
		struct vgpu_xbuf b = {staged ? staged : (void *)image, size, VGPU_DIR_TO_HOST,
				      offsetof(struct vgpu_module_load_req, image)};
		rc = vgpu_call(VGPU_OP_MODULE_LOAD, &req, sizeof req, &b, 1, &r, sizeof r, NULL, 0, NULL);
		vgpu_host_free(staged);
	}
	if (rc)
		return rc;
	struct vgpu_module *m = calloc(1, sizeof *m);
	if (!m)
		return VGPU_E_OUT_OF_MEMORY;
	m->handle = r.module;
	m->dev = dev;
	pthread_mutex_init(&m->mu, NULL);
	VDEBUG("module loaded: %llu bytes, handle %llu%s", (unsigned long long)size,
	       (unsigned long long)r.module, r.cached ? " (cached by the host)" : "");
	*out = m;
	return 0;
}

/* Every loaded function by host handle (vgpu_func_by_handle): chains of
 * hnext in buckets. */
#define FUNC_BUCKETS 1024
static struct vgpu_func *func_table[FUNC_BUCKETS];
static pthread_mutex_t func_table_mu = PTHREAD_MUTEX_INITIALIZER;

static unsigned func_bucket(uint64_t h)
{
	return (unsigned)((h * 0x9e3779b97f4a7c15ull) >> 54) % FUNC_BUCKETS;
}

static void func_table_add(struct vgpu_func *f)
{
	pthread_mutex_lock(&func_table_mu);
	unsigned b = func_bucket(f->handle);
	f->hnext = func_table[b];
	func_table[b] = f;
	pthread_mutex_unlock(&func_table_mu);
}

static void func_table_remove(struct vgpu_func *f)
{
	pthread_mutex_lock(&func_table_mu);
	for (struct vgpu_func **p = &func_table[func_bucket(f->handle)]; *p; p = &(*p)->hnext)
		if (*p == f) {
			*p = f->hnext;
			break;
		}
	pthread_mutex_unlock(&func_table_mu);
}

struct vgpu_func *vgpu_func_by_handle(uint64_t h)
{
	struct vgpu_func *f;
	pthread_mutex_lock(&func_table_mu);
	for (f = func_table[func_bucket(h)]; f && f->handle != h; f = f->hnext)
		;
	pthread_mutex_unlock(&func_table_mu);
	return f;
}

int vgpu_module_unload(struct vgpu_module *m)
{
	if (!m)
		return VGPU_E_INVALID_HANDLE;
	int rc = vgpu_simple(VGPU_OP_MODULE_UNLOAD, m->handle);
	for (struct vgpu_func *f = m->funcs, *n; f; f = n) {
		n = f->next;
		func_table_remove(f);
		free(f->params);
		free(f->name);
		free(f);
	}
	for (struct vgpu_global *g = m->globals, *n; g; g = n) {
		n = g->next;
		free(g);
	}
	pthread_mutex_destroy(&m->mu);
	free(m);
	return rc;
}

struct name_req {
	struct vgpu_name_req h;
	char name[4096]; /* the backend's MaxNameLen: cuBLAS has kernel names over 1 KiB */
};

static int name_req(struct name_req *q, uint64_t module, const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > sizeof q->name)
		return VGPU_E_INVALID_VALUE;
	memset(&q->h, 0, sizeof q->h);
	q->h.module = module;
	q->h.name_len = (uint32_t)n;
	memcpy(q->name, name, n);
	return 0;
}

int vgpu_module_get_function(struct vgpu_module *m, const char *name, struct vgpu_func **out)
{
	if (!m || !name)
		return VGPU_E_INVALID_VALUE;
	pthread_mutex_lock(&m->mu);
	for (struct vgpu_func *f = m->funcs; f; f = f->next)
		if (!strcmp(f->name, name)) {
			*out = f;
			pthread_mutex_unlock(&m->mu);
			return 0;
		}
	pthread_mutex_unlock(&m->mu);

	struct name_req q;
	int rc = name_req(&q, m->handle, name);
	if (rc)
		return rc;
	struct vgpu_function_reply r;
	struct vgpu_param_info params[VGPU_MAX_PARAM_BYTES / 4];
	uint32_t tl = 0;
	rc = vgpu_call(VGPU_OP_MODULE_GET_FUNCTION, &q, (uint32_t)(sizeof q.h + q.h.name_len), NULL, 0, &r, sizeof r,
		       params, sizeof params, &tl);
	if (rc)
		return rc;
	uint32_t np = r.num_params;
	if ((uint64_t)np * sizeof(struct vgpu_param_info) > tl || np > VGPU_MAX_PARAM_BYTES / 4 ||
	    r.param_bytes > VGPU_MAX_PARAM_BYTES) {
		VERR("%s: host sent %u parameters in %u bytes", name, np, tl);
		return VGPU_E_UNKNOWN;
	}
	for (uint32_t i = 0; i < np; i++)
		if ((uint64_t)params[i].offset + params[i].size > r.param_bytes) {
			VERR("%s: parameter %u outside the %u-byte block", name, i, r.param_bytes);
			return VGPU_E_UNKNOWN;
		}
	struct vgpu_func *f = calloc(1, sizeof *f);
	if (!f)
		return VGPU_E_OUT_OF_MEMORY;
	f->magic = VGPU_FUNC_MAGIC;
	f->handle = r.func;
	f->nparams = np;
	f->param_bytes = r.param_bytes;
	f->params = malloc((np ? np : 1) * sizeof *f->params);
	f->name = strdup(name);
	f->mod = m;
	if (!f->params || !f->name) {
		free(f->params);
		free(f->name);
		free(f);
		return VGPU_E_OUT_OF_MEMORY;
	}
	memcpy(f->params, params, np * sizeof *f->params);
	pthread_mutex_lock(&m->mu);
	f->next = m->funcs;
	m->funcs = f;
	pthread_mutex_unlock(&m->mu);
	func_table_add(f);
	VDEBUG("function %s: %u params, %u bytes", name, np, r.param_bytes);
	*out = f;
	return 0;
}

int vgpu_module_functions(struct vgpu_module *m, int (*fn)(void *user, struct vgpu_func *f), void *user,
			  uint32_t *total)
{
	if (!m)
		return VGPU_E_INVALID_VALUE;
	char *names = fn ? malloc(VGPU_MAX_FUNCTION_LIST_BYTES + 1) : NULL;
	if (fn && !names)
		return VGPU_E_OUT_OF_MEMORY;
	struct vgpu_module_functions_req req = {.module = m->handle};
	struct vgpu_module_functions_reply r;
	char one[1];
	int rc;
	for (;;) {
		uint32_t tl = 0;
		rc = vgpu_call(VGPU_OP_MODULE_LIST_FUNCTIONS, &req, sizeof req, NULL, 0, &r, sizeof r,
			       names ? names : one, names ? VGPU_MAX_FUNCTION_LIST_BYTES : 0, &tl);
		if (rc || !fn)
			break;
		names[tl < VGPU_MAX_FUNCTION_LIST_BYTES ? tl : VGPU_MAX_FUNCTION_LIST_BYTES] = 0;
		/* each name NUL-terminated inside the tail, r.count of them */
		uint32_t off = 0, got = 0;
		while (got < r.count && off < tl) {
			size_t len = strnlen(names + off, tl - off);
			if (off + len >= tl) /* no terminator inside the tail */
				break;
			struct vgpu_func *f;
			if ((rc = vgpu_module_get_function(m, names + off, &f)))
				goto out;
			if (fn(user, f))
				goto out;
			off += (uint32_t)len + 1;
			got++;
		}
		if (got != r.count || (r.count == 0 && req.first < r.total)) {
			VERR("module functions: the host sent %u of %u names in %u bytes", got, r.count, tl);
			rc = VGPU_E_UNKNOWN;
			break;
		}
		req.first += r.count;
		if (req.first >= r.total)
			break;
	}
out:
	if (!rc && total)
		*total = r.total;
	free(names);
	return rc;
}

/* Answered from the module's cache after the first round trip per name:
 * NVIDIA's runtime asks for the same symbol on every cudaMemcpyToSymbol
 * (memcpy_to_symbol on sim made 14 round trips before, 3 since). */
int vgpu_module_get_global(struct vgpu_module *m, const char *name, uint64_t *ptr, uint64_t *size)
{
	if (!m || !name)
		return VGPU_E_INVALID_VALUE;
	pthread_mutex_lock(&m->mu);
	for (struct vgpu_global *g = m->globals; g; g = g->next)
		if (!strcmp(g->name, name)) {
			if (ptr)
				*ptr = g->ptr;
			if (size)
				*size = g->size;
			pthread_mutex_unlock(&m->mu);
			return 0;
		}
	pthread_mutex_unlock(&m->mu);
	struct name_req q;
	int rc = name_req(&q, m->handle, name);
	if (rc)
		return rc;
	struct vgpu_global_reply r;
	rc = vgpu_call(VGPU_OP_MODULE_GET_GLOBAL, &q, (uint32_t)(sizeof q.h + q.h.name_len), NULL, 0, &r, sizeof r,
		       NULL, 0, NULL);
	if (rc)
		return rc;
	if (ptr)
		*ptr = r.ptr;
	if (size)
		*size = r.size;
	size_t n = strlen(name);
	struct vgpu_global *g = malloc(sizeof *g + n + 1);
	if (g) { /* no memory: answered all the same, just not cached */
		g->ptr = r.ptr;
		g->size = r.size;
		memcpy(g->name, name, n + 1);
		pthread_mutex_lock(&m->mu);
		g->next = m->globals;
		m->globals = g;
		pthread_mutex_unlock(&m->mu);
	}
	return 0;
}

int vgpu_func_resolve(struct vgpu_func **f)
{
	if (!*f)
		return VGPU_E_INVALID_HANDLE;
	if ((*f)->magic == VGPU_FUNC_MAGIC)
		return 0;
	if ((*f)->magic == VGPU_KERNEL_MAGIC)
		return vgpu_kernel_function(*f, -1, f);
	return VGPU_E_INVALID_HANDLE;
}

int vgpu_func_attrs(struct vgpu_func *f, const int32_t **attrs)
{
	int rc = vgpu_func_resolve(&f);
	if (rc)
		return rc;
	if (!f->attrs_valid) {
		struct vgpu_handle_req req = {.handle = f->handle};
		struct vgpu_func_attributes_reply r;
		rc = vgpu_call(VGPU_OP_FUNC_GET_ATTRIBUTES, &req, sizeof req, NULL, 0, &r, sizeof r, NULL, 0, NULL);
		if (rc)
			return rc;
		memcpy(f->attrs, r.attrs, sizeof f->attrs);
		f->attrs_valid = 1;
	}
	*attrs = f->attrs;
	return 0;
}

int vgpu_func_set_attr(struct vgpu_func *f, int attr, int value)
{
	int rc = vgpu_func_resolve(&f);
	if (rc)
		return rc;
	/* Queued, so its error would only show at the next synchronising
	 * call: refuse here what no driver accepts, the read-only attributes
	 * (settable: 8, 9 and the cluster attributes 11..15). */
	if (attr != 8 && attr != 9 && (attr < 11 || attr > 15))
		return VGPU_E_INVALID_VALUE;
	struct vgpu_func_set_attribute_req req = {.func = f->handle, .attr = (uint32_t)attr, .value = value};
	f->attrs_valid = 0;
	return vgpu_queue(VGPU_OP_FUNC_SET_ATTRIBUTE, &req, sizeof req);
}

int vgpu_occupancy(struct vgpu_func *f, int block, uint64_t dynsmem, unsigned flags, int *blocks)
{
	int rc = vgpu_func_resolve(&f);
	if (rc)
		return rc;
	struct vgpu_occupancy_req req = {.func = f->handle, .block_size = (uint32_t)block, .flags = flags,
					 .dyn_smem = dynsmem};
	struct vgpu_occupancy_reply r;
	rc = vgpu_call(VGPU_OP_OCCUPANCY_MAX_BLOCKS, &req, sizeof req, NULL, 0, &r, sizeof r, NULL, 0, NULL);
	if (!rc)
		*blocks = r.num_blocks;
	return rc;
}

/* cuLaunchKernel "extra" keys (ABI constants, cuda.h). */
#define LAUNCH_PARAM_END ((void *)0x00)
#define LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)

int vgpu_pack_params(const struct vgpu_func *f, void **args, void **extra, uint8_t *params, uint32_t *psize)
{
	*psize = f->param_bytes;
	if (args) {
		memset(params, 0, f->param_bytes);
		for (uint32_t i = 0; i < f->nparams; i++) {
			if (!args[i])
				return VGPU_E_INVALID_VALUE;
			memcpy(params + f->params[i].offset, args[i], f->params[i].size);
		}
	} else if (extra) {
		void *buf = NULL;
		size_t bsize = 0;
		for (int i = 0; extra[i] != LAUNCH_PARAM_END; i += 2) {
			if (extra[i] == LAUNCH_PARAM_BUFFER_POINTER)
				buf = extra[i + 1];
			else if (extra[i] == LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
				bsize = *(size_t *)extra[i + 1];
			else
				return VGPU_E_INVALID_VALUE;
		}
		if ((!buf && bsize) || bsize > VGPU_MAX_PARAM_BYTES)
			return VGPU_E_INVALID_VALUE;
		*psize = (uint32_t)bsize;
		if (bsize)
			memcpy(params, buf, bsize);
	} else if (f->nparams) {
		return VGPU_E_INVALID_VALUE;
	}
	return 0;
}

static void launch_header(struct vgpu_launch_req *h, const struct vgpu_func *f, uint64_t stream,
			  const uint32_t grid[3], const uint32_t block[3], uint32_t smem)
{
	memset(h, 0, sizeof *h);
	h->func = f->handle;
	h->stream = stream;
	h->grid_x = grid[0];
	h->grid_y = grid[1];
	h->grid_z = grid[2];
	h->block_x = block[0];
	h->block_y = block[1];
	h->block_z = block[2];
	h->shared_mem = smem;
}

int vgpu_launch(struct vgpu_func *f, uint64_t stream, const uint32_t grid[3], const uint32_t block[3],
		uint32_t smem, void **args, void **extra)
{
	int rc = vgpu_func_resolve(&f);
	if (rc)
		return rc;
	struct {
		struct vgpu_launch_req h;
		uint8_t params[VGPU_MAX_PARAM_BYTES + 4];
	} q;
	launch_header(&q.h, f, stream, grid, block, smem);
	rc = vgpu_pack_params(f, args, extra, q.params, &q.h.param_size);
	if (rc)
		return rc;
	return vgpu_queue(VGPU_OP_LAUNCH_KERNEL, &q, (uint32_t)(sizeof q.h + q.h.param_size));
}

int vgpu_launch_cluster(struct vgpu_func *f, uint64_t stream, const uint32_t grid[3], const uint32_t block[3],
			uint32_t smem, const struct vgpu_cluster *cl, void **args, void **extra)
{
	int rc = vgpu_func_resolve(&f);
	if (rc)
		return rc;
	struct {
		struct vgpu_launch_ex_req h;
		uint8_t params[VGPU_MAX_PARAM_BYTES + 4];
	} q;
	launch_header(&q.h.launch, f, stream, grid, block, smem);
	q.h.cluster = *cl;
	rc = vgpu_pack_params(f, args, extra, q.params, &q.h.launch.param_size);
	if (rc)
		return rc;
	return vgpu_queue(VGPU_OP_LAUNCH_KERNEL_EX, &q, (uint32_t)(sizeof q.h + q.h.launch.param_size));
}

int vgpu_launch_attrs(struct vgpu_func *f, uint64_t stream, const uint32_t grid[3], const uint32_t block[3],
		      uint32_t smem, const struct vgpu_cluster *cl, const struct vgpu_launch_attrs *la, void **args,
		      void **extra)
{
	int rc = vgpu_func_resolve(&f);
	if (rc)
		return rc;
	struct {
		struct vgpu_launch_attrs_req h;
		uint8_t params[VGPU_MAX_PARAM_BYTES + 4];
	} q;
	launch_header(&q.h.launch, f, stream, grid, block, smem);
	q.h.cluster = *cl;
	q.h.attrs = *la;
	rc = vgpu_pack_params(f, args, extra, q.params, &q.h.launch.param_size);
	if (rc)
		return rc;
	return vgpu_queue(VGPU_OP_LAUNCH_KERNEL_ATTRS, &q, (uint32_t)(sizeof q.h + q.h.launch.param_size));
}

int vgpu_occupancy_clusters(struct vgpu_func *f, const uint32_t grid[3], const uint32_t block[3], uint32_t smem,
			    const struct vgpu_cluster *cl, int *clusters)
{
	int rc = vgpu_func_resolve(&f);
	if (rc)
		return rc;
	struct vgpu_cluster_occupancy_req req = {
		.func = f->handle, .grid_x = grid[0], .grid_y = grid[1], .grid_z = grid[2],
		.block_x = block[0], .block_y = block[1], .block_z = block[2], .shared_mem = smem, .cluster = *cl,
	};
	struct vgpu_occupancy_reply r;
	rc = vgpu_call(VGPU_OP_OCCUPANCY_MAX_CLUSTERS, &req, sizeof req, NULL, 0, &r, sizeof r, NULL, 0, NULL);
	if (!rc)
		*clusters = r.num_blocks;
	return rc;
}
