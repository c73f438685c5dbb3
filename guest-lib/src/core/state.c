/*
 * state.c - what the library knows locally: device info (fetched once per
 * device, answers every property/attribute query without a round trip),
 * the map of device allocations (cudaMemcpyDefault, pointer queries), the
 * map of pinned host ranges (guest mode: /dev/vgpu mmap or
 * VGPU_IOC_REGISTER; host mode: memfds shared with the backend, or plain
 * memory), and the calls built on them:
 * memory, streams, events, host functions.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <linux/types.h>

#include "vgpu_internal.h"
#include "core.h"
#include "uapi/vgpu.h"

/* ---------------- devices ---------------- */

#define MAX_DEVICES 64
static pthread_mutex_t dev_mu = PTHREAD_MUTEX_INITIALIZER;
static int dev_count = -1;
static struct vgpu_device_info *dev_info[MAX_DEVICES];

int vgpu_device_count(int *count)
{
	int rc = vgpu_init();
	if (rc)
		return rc;
	pthread_mutex_lock(&dev_mu);
	if (dev_count < 0) {
		struct vgpu_device_count_reply r;
		rc = vgpu_call(VGPU_OP_DEVICE_GET_COUNT, NULL, 0, NULL, 0, &r, sizeof r, NULL, 0, NULL);
		if (!rc)
			dev_count = r.count > MAX_DEVICES ? MAX_DEVICES : (int)r.count;
	}
	if (!rc)
		*count = dev_count;
	pthread_mutex_unlock(&dev_mu);
	return rc;
}

int vgpu_device_info(int dev, const struct vgpu_device_info **out)
{
	int n, rc = vgpu_device_count(&n);
	if (rc)
		return rc;
	if (dev < 0 || dev >= n)
		return VGPU_E_INVALID_DEVICE;
	pthread_mutex_lock(&dev_mu);
	if (!dev_info[dev]) {
		struct vgpu_device_info *di = calloc(1, sizeof *di);
		struct vgpu_device_req req = {.device = (uint32_t)dev};
		rc = di ? vgpu_call(VGPU_OP_DEVICE_GET_INFO, &req, sizeof req, NULL, 0, di, sizeof *di, NULL, 0, NULL)
			: VGPU_E_OUT_OF_MEMORY;
		if (!rc)
			dev_info[dev] = di;
		else
			free(di);
	}
	if (!rc)
		*out = dev_info[dev];
	pthread_mutex_unlock(&dev_mu);
	return rc;
}

int vgpu_device_attr(int dev, int attr, int *value)
{
	const struct vgpu_device_info *di;
	int rc = vgpu_device_info(dev, &di);
	if (rc)
		return rc;
	if (attr <= 0 || attr >= (int)VGPU_MAX_DEVICE_ATTRS)
		return VGPU_E_INVALID_VALUE;
	*value = di->attrs[attr];
	return 0;
}

int vgpu_device_sync(int dev)
{
	struct vgpu_device_req req = {.device = (uint32_t)dev};
	vgpu_sync_point();
	int rc = vgpu_call(VGPU_OP_DEVICE_SYNCHRONIZE, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
	int d = vgpu_take_deferred_error();
	return d ? d : rc;
}

/* ---------------- device allocations ---------------- */

struct range {
	uint64_t base, size;
	int dev;
	uint64_t id;      /* unique in the process (buffer and memory block id) */
	const void *pool; /* the CUmemoryPool it came from, or NULL */
};
static pthread_mutex_t devmap_mu = PTHREAD_MUTEX_INITIALIZER;
static struct range *devmap;
static size_t devmap_n, devmap_cap;
static uint64_t devmap_ids;

void vgpu_devmap_add(uint64_t ptr, uint64_t size, int dev)
{
	vgpu_devmap_add_pool(ptr, size, dev, NULL);
}

void vgpu_devmap_add_pool(uint64_t ptr, uint64_t size, int dev, const void *pool)
{
	pthread_mutex_lock(&devmap_mu);
	if (devmap_n == devmap_cap) {
		size_t nc = devmap_cap ? devmap_cap * 2 : 64;
		struct range *n = realloc(devmap, nc * sizeof *n);
		if (!n) {
			pthread_mutex_unlock(&devmap_mu);
			return;
		}
		devmap = n;
		devmap_cap = nc;
	}
	size_t i = devmap_n;
	while (i > 0 && devmap[i - 1].base > ptr) {
		devmap[i] = devmap[i - 1];
		i--;
	}
	devmap[i] = (struct range){ptr, size, dev, ++devmap_ids, pool};
	devmap_n++;
	pthread_mutex_unlock(&devmap_mu);
}

/* Index of the last range with base <= ptr, or -1. Caller holds the lock. */
static long devmap_floor(uint64_t ptr)
{
	long lo = 0, hi = (long)devmap_n - 1, ans = -1;
	while (lo <= hi) {
		long mid = (lo + hi) / 2;
		if (devmap[mid].base <= ptr) {
			ans = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	return ans;
}

void vgpu_devmap_remove(uint64_t ptr)
{
	pthread_mutex_lock(&devmap_mu);
	long i = devmap_floor(ptr);
	if (i >= 0 && devmap[i].base == ptr) {
		memmove(&devmap[i], &devmap[i + 1], (devmap_n - (size_t)i - 1) * sizeof *devmap);
		devmap_n--;
	}
	pthread_mutex_unlock(&devmap_mu);
}

void vgpu_devmap_forget(int dev)
{
	pthread_mutex_lock(&devmap_mu);
	size_t j = 0;
	for (size_t i = 0; i < devmap_n; i++)
		if (devmap[i].dev != dev)
			devmap[j++] = devmap[i];
	devmap_n = j;
	pthread_mutex_unlock(&devmap_mu);
}

int vgpu_devmap_info(uint64_t ptr, uint64_t *id, const void **pool)
{
	pthread_mutex_lock(&devmap_mu);
	long i = devmap_floor(ptr);
	int found = i >= 0 && ptr - devmap[i].base < (devmap[i].size ? devmap[i].size : 1);
	if (found) {
		*id = devmap[i].id;
		*pool = devmap[i].pool;
	}
	pthread_mutex_unlock(&devmap_mu);
	return found;
}

int vgpu_devmap_find(uint64_t ptr, uint64_t *base, uint64_t *size, int *dev)
{
	pthread_mutex_lock(&devmap_mu);
	long i = devmap_floor(ptr);
	int found = i >= 0 && ptr - devmap[i].base < (devmap[i].size ? devmap[i].size : 1);
	if (found) {
		if (base)
			*base = devmap[i].base;
		if (size)
			*size = devmap[i].size;
		if (dev)
			*dev = devmap[i].dev;
	}
	pthread_mutex_unlock(&devmap_mu);
	return found;
}

/* ---------------- pinned host ranges ---------------- */

struct hnode {
	struct vgpu_hostrange r;
	struct hnode *next;
};
static pthread_mutex_t host_mu = PTHREAD_MUTEX_INITIALIZER;
static struct hnode *hosts;

int vgpu_hostmap_region(uint64_t region, struct vgpu_hostrange *out)
{
	int found = 0;
	if (!region)
		return 0;
	pthread_mutex_lock(&host_mu);
	for (struct hnode *n = hosts; n; n = n->next)
		if (n->r.region == region) {
			*out = n->r;
			found = 1;
			break;
		}
	pthread_mutex_unlock(&host_mu);
	return found;
}

int vgpu_hostmap_find(const void *p, uint64_t len, struct vgpu_hostrange *out)
{
	uintptr_t a = (uintptr_t)p;
	int found = 0;
	pthread_mutex_lock(&host_mu);
	for (struct hnode *n = hosts; n; n = n->next) {
		uintptr_t b = (uintptr_t)n->r.addr;
		if (a >= b && a - b < n->r.len && len <= n->r.len - (a - b)) {
			if (out)
				*out = n->r;
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&host_mu);
	return found;
}

static int host_add(const struct vgpu_hostrange *r)
{
	struct hnode *n = malloc(sizeof *n);
	if (!n)
		return VGPU_E_OUT_OF_MEMORY;
	n->r = *r;
	pthread_mutex_lock(&host_mu);
	n->next = hosts;
	hosts = n;
	pthread_mutex_unlock(&host_mu);
	return 0;
}

static int host_take(void *p, struct vgpu_hostrange *out)
{
	int found = 0;
	pthread_mutex_lock(&host_mu);
	for (struct hnode **pp = &hosts; *pp; pp = &(*pp)->next) {
		if ((*pp)->r.addr == p) {
			struct hnode *n = *pp;
			*pp = n->next;
			*out = n->r;
			free(n);
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&host_mu);
	return found;
}

/* Guest mode: pin [p, p+len) with the driver and learn its host region. */
static int dev_register(void *p, uint64_t len, unsigned flags, uint64_t *region, uint64_t *dev_ptr)
{
	struct vgpu_register r;
	memset(&r, 0, sizeof r);
	r.addr = (uintptr_t)p;
	r.len = len;
	/* cudaHostAllocMapped / cudaHostRegisterMapped (0x2), cudaHostRegisterReadOnly (0x8) */
	r.flags = ((flags & VGPU_HOSTALLOC_MAPPED) ? VGPU_REG_MAPPED : 0) | ((flags & 0x8) ? VGPU_REG_READONLY : 0);
	int frc = vgpu_stream_fence();
	if (frc)
		return frc;
	if (ioctl(vgpu_dev_fd(), VGPU_IOC_REGISTER, &r) != 0) {
		VWARN("VGPU_IOC_REGISTER(%p, %llu) failed: %s%s", p, (unsigned long long)len, strerror(errno),
		      errno == E2BIG ? " (over vgpu.ko's max_pin_mb, /sys/module/vgpu/parameters/max_pin_mb, "
				       "or more segments than the host takes)" : "");
		return errno == ENOMEM ? VGPU_E_OUT_OF_MEMORY : VGPU_E_INVALID_VALUE;
	}
	*region = r.region;
	*dev_ptr = r.dev_ptr;
	return 0;
}

/*
 * Host mode: pinned memory shared with the backend. A sealed memfd
 * (shrink, grow and the seals themselves), mapped here and sent beside a
 * HOST_SHARE frame; the backend maps it at [base, base+len), a pseudo
 * guest-physical range from a bump allocator (never reused, so a stale
 * reference cannot name a later share). Then it is registered like guest
 * mode's pinned memory (GUEST_REGISTER with its one segment): copies name
 * it by region and may be batched, and a mapped one gets a device address.
 * On any failure the caller falls back to plain memory (data inline).
 */
#define SHARE_BASE (1ull << 40)
static uint64_t share_next = SHARE_BASE;

/* A sealed memfd of len bytes (-1 on failure). */
static int share_memfd(uint64_t len)
{
	int mfd = memfd_create("vgpu-pinned", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (mfd < 0) {
		VDEBUG("memfd_create: %s", strerror(errno));
		return -1;
	}
	if (ftruncate(mfd, (off_t)len) != 0 || fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
		VDEBUG("memfd of %llu bytes: %s", (unsigned long long)len, strerror(errno));
		close(mfd);
		return -1;
	}
	return mfd;
}

/* Shares mfd (len bytes, mapped at r->addr) with the backend and registers
 * it; fills r's share, region and dev_ptr. Closes mfd. */
static int share_fd(int mfd, struct vgpu_hostrange *r, unsigned flags)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	uint64_t base = __atomic_fetch_add(&share_next, r->len + pg, __ATOMIC_RELAXED); /* + a guard page */
	struct vgpu_host_share_req sreq = {.base = base, .size = r->len};
	int rc = vgpu_host_call(VGPU_OP_HOST_SHARE, &sreq, sizeof sreq, NULL, 0, mfd, NULL, 0);
	close(mfd); /* the backend has its own copy; the mapping keeps ours */
	if (rc) {
		VINFO("HOST_SHARE of %llu bytes refused (error %d): this pinned memory travels inline",
		      (unsigned long long)r->len, rc);
		return rc;
	}
	/* cudaHostAllocMapped, cudaHostRegisterMapped, CU_MEMHOSTALLOC_DEVICEMAP: 0x2 */
	struct vgpu_guest_register_req greq = {.flags = (flags & VGPU_HOSTALLOC_MAPPED) ? VGPU_REGISTER_MAPPED : 0,
					       .size = r->len};
	struct vgpu_segment seg = {.gpa = base, .len = r->len};
	struct vgpu_guest_register_reply grep;
	rc = vgpu_host_call(VGPU_OP_GUEST_REGISTER, &greq, sizeof greq, &seg, 1, -1, &grep, sizeof grep);
	if (rc) {
		VINFO("GUEST_REGISTER of shared memory failed (error %d): this pinned memory travels inline", rc);
		struct vgpu_host_unshare_req ureq = {.base = base};
		vgpu_host_call(VGPU_OP_HOST_UNSHARE, &ureq, sizeof ureq, NULL, 0, -1, NULL, 0);
		return rc;
	}
	r->share = base;
	r->region = grep.region;
	r->dev_ptr = grep.dev_ptr;
	return 0;
}

static int share_alloc(struct vgpu_hostrange *r, unsigned flags)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	r->len = (r->len + pg - 1) & ~(uint64_t)(pg - 1);
	int mfd = share_memfd(r->len);
	if (mfd < 0)
		return VGPU_E_OUT_OF_MEMORY;
	void *p = mmap(NULL, r->len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (p == MAP_FAILED) {
		close(mfd);
		return VGPU_E_OUT_OF_MEMORY;
	}
	r->addr = p;
	int rc = share_fd(mfd, r, flags);
	if (rc) {
		munmap(p, r->len);
		r->addr = NULL;
		return rc;
	}
	r->mmapped = 1;
	return 0;
}

int vgpu_share_alloc(struct vgpu_hostrange *r) { return share_alloc(r, 0); }

/* Is [a, a+len) covered by private anonymous read-write mappings (heap,
 * malloc'd or mmap'd memory; no file, no stack)? */
static int anon_private(uintptr_t a, uint64_t len)
{
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return 0;
	char line[512];
	uintptr_t at = a, end = a + len;
	while (at < end && fgets(line, sizeof line, f)) {
		unsigned long lo, hi, off;
		char perms[8], path[256] = "";
		unsigned dmaj, dmin;
		unsigned long ino;
		if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu %255s", &lo, &hi, perms, &off, &dmaj, &dmin, &ino, path) < 7)
			break;
		if (hi <= at)
			continue;
		if (lo > at || strcmp(perms, "rw-p") != 0 || ino != 0 || (path[0] && strcmp(path, "[heap]") != 0))
			break;
		at = hi;
	}
	fclose(f);
	return at >= end;
}

/* Moves [p, p+len) into a new mapping of the same bytes, in place: the
 * memfd mfd (shared) or, with mfd < 0, private anonymous memory. The bytes
 * are copied first, then the new mapping replaces the old one atomically
 * (mremap); a write by another thread in between would be lost, so the
 * range must not be in use meanwhile (it is being registered). */
static int move_in_place(void *p, uint64_t len, int mfd)
{
	void *tmp = mfd >= 0 ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0)
			     : mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (tmp == MAP_FAILED)
		return -1;
	memcpy(tmp, p, len);
	if (mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, p) == MAP_FAILED) {
		munmap(tmp, len);
		return -1;
	}
	return 0;
}

/*
 * Host mode, cudaHostRegister(cudaHostRegisterMapped): the program's own
 * memory cannot be sent as an fd, so its pages are moved into a sealed memfd
 * in place (same address, same bytes) and shared like an allocation; the
 * device then reaches them through a device pointer. Only whole pages of
 * private anonymous memory qualify (no file mapping, no partial page that
 * other data shares); cudaHostUnregister moves them back into anonymous
 * memory. Anything else is registered as before: data inline, no device
 * pointer.
 */
static int share_register(struct vgpu_hostrange *r, unsigned flags)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	if ((uintptr_t)r->addr % pg || r->len % pg || !anon_private((uintptr_t)r->addr, r->len))
		return VGPU_E_NOT_SUPPORTED;
	int mfd = share_memfd(r->len);
	if (mfd < 0)
		return VGPU_E_OUT_OF_MEMORY;
	if (move_in_place(r->addr, r->len, mfd) != 0) {
		VDEBUG("moving %p (%llu bytes) into shared memory: %s", r->addr, (unsigned long long)r->len, strerror(errno));
		close(mfd);
		return VGPU_E_OUT_OF_MEMORY;
	}
	int rc = share_fd(mfd, r, flags);
	if (rc && move_in_place(r->addr, r->len, -1) != 0)
		VERR("moving %p back into private memory failed: %s", r->addr, strerror(errno));
	return rc;
}

int vgpu_host_alloc(size_t size, unsigned flags, void **out)
{
	int rc = vgpu_init();
	if (rc)
		return rc;
	struct vgpu_hostrange r;
	memset(&r, 0, sizeof r);
	r.len = size ? size : 1;
	r.flags = flags;
	r.owned = 1;
	if (vgpu_host_mode()) {
		if (!vgpu_host_share_ok() || share_alloc(&r, flags) != 0) {
			long pg = sysconf(_SC_PAGESIZE);
			r.len = size ? size : 1;
			if (posix_memalign(&r.addr, (size_t)pg, r.len) != 0)
				return VGPU_E_OUT_OF_MEMORY;
		}
	} else {
		size_t pg = (size_t)sysconf(_SC_PAGESIZE);
		r.len = (r.len + pg - 1) & ~(pg - 1);
		r.addr = mmap(NULL, r.len, PROT_READ | PROT_WRITE, MAP_SHARED, vgpu_dev_fd(), 0);
		if (r.addr == MAP_FAILED) {
			VWARN("mmap of /dev/vgpu (%zu bytes) failed: %s%s", r.len, strerror(errno),
			      errno == E2BIG ? " (over vgpu.ko's max_pin_mb, /sys/module/vgpu/parameters/max_pin_mb)" : "");
			return VGPU_E_OUT_OF_MEMORY;
		}
		r.mmapped = 1;
		rc = dev_register(r.addr, r.len, flags, &r.region, &r.dev_ptr);
		if (rc) {
			munmap(r.addr, r.len);
			return rc;
		}
	}
	rc = host_add(&r);
	if (rc) {
		vgpu_host_free(r.addr);
		return rc;
	}
	*out = r.addr;
	return 0;
}

static void release_range(struct vgpu_hostrange *r)
{
	if (!vgpu_host_mode() && r->region) {
		__u64 region = r->region;
		if (vgpu_stream_fence() || ioctl(vgpu_dev_fd(), VGPU_IOC_UNREGISTER, &region) != 0)
			VDEBUG("VGPU_IOC_UNREGISTER: %s", strerror(errno));
	} else if (r->share) {
		/* Host mode's shared memory: unregister, then unshare (the
		 * backend unmaps it once nothing uses it). */
		struct vgpu_handle_req ur = {.handle = r->region};
		int rc = vgpu_host_call(VGPU_OP_GUEST_UNREGISTER, &ur, sizeof ur, NULL, 0, -1, NULL, 0);
		struct vgpu_host_unshare_req us = {.base = r->share};
		int rc2 = vgpu_host_call(VGPU_OP_HOST_UNSHARE, &us, sizeof us, NULL, 0, -1, NULL, 0);
		if (rc || rc2)
			VDEBUG("releasing shared memory at %#llx: errors %d %d", (unsigned long long)r->share, rc, rc2);
	}
	if (r->owned) {
		if (r->mmapped)
			munmap(r->addr, r->len);
		else
			free(r->addr);
	} else if (r->share && move_in_place(r->addr, r->len, -1) != 0) {
		VERR("cudaHostUnregister: moving %p back into private memory failed: %s (it stays shared)", r->addr,
		     strerror(errno));
	}
}

int vgpu_host_free(void *p)
{
	if (!p)
		return 0;
	struct vgpu_hostrange r;
	if (!host_take(p, &r))
		return VGPU_E_INVALID_VALUE;
	if (!r.owned) { /* registered memory is unregistered, not freed */
		host_add(&r);
		return VGPU_E_INVALID_VALUE;
	}
	vgpu_flush(); /* queued copies may still name it */
	release_range(&r);
	return 0;
}

int vgpu_host_register(void *p, size_t size, unsigned flags)
{
	int rc = vgpu_init();
	if (rc)
		return rc;
	if (!p || !size)
		return VGPU_E_INVALID_VALUE;
	if (vgpu_hostmap_find(p, 1, NULL))
		return VGPU_E_HOST_MEMORY_ALREADY_REGISTERED;
	struct vgpu_hostrange r;
	memset(&r, 0, sizeof r);
	r.addr = p;
	r.len = size;
	r.flags = flags;
	if (!vgpu_host_mode()) {
		rc = dev_register(p, size, flags, &r.region, &r.dev_ptr);
		if (rc)
			return rc;
	} else if ((flags & VGPU_HOSTALLOC_MAPPED) && vgpu_host_share_ok()) {
		share_register(&r, flags); /* on failure: registered as before, inline */
	}
	rc = host_add(&r);
	if (rc && r.share)
		release_range(&r);
	return rc;
}

int vgpu_host_unregister(void *p)
{
	struct vgpu_hostrange r;
	if (!host_take(p, &r))
		return VGPU_E_HOST_MEMORY_NOT_REGISTERED;
	if (r.owned) { /* cudaMallocHost memory is freed, not unregistered */
		host_add(&r);
		return VGPU_E_HOST_MEMORY_NOT_REGISTERED;
	}
	vgpu_flush();
	release_range(&r);
	return 0;
}

/* ---------------- memory ---------------- */

int vgpu_mem_alloc(int dev, uint64_t size, uint64_t *ptr)
{
	struct vgpu_mem_alloc_req req = {.device = (uint32_t)dev, .size = size};
	struct vgpu_ptr_reply r;
	int rc = vgpu_call(VGPU_OP_MEM_ALLOC, &req, sizeof req, NULL, 0, &r, sizeof r, NULL, 0, NULL);
	if (rc)
		return rc;
	*ptr = r.ptr;
	vgpu_devmap_add(r.ptr, size, dev);
	return 0;
}

int vgpu_mem_free(uint64_t ptr)
{
	struct vgpu_ptr_req req = {.ptr = ptr};
	int rc = vgpu_call(VGPU_OP_MEM_FREE, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
	if (!rc)
		vgpu_devmap_remove(ptr);
	return rc;
}

int vgpu_mem_get_info(int dev, uint64_t *free_b, uint64_t *total_b)
{
	struct vgpu_device_req req = {.device = (uint32_t)dev};
	struct vgpu_mem_info_reply r;
	int rc = vgpu_call(VGPU_OP_MEM_GET_INFO, &req, sizeof req, NULL, 0, &r, sizeof r, NULL, 0, NULL);
	if (!rc) {
		*free_b = r.free;
		*total_b = r.total;
	}
	return rc;
}

int vgpu_mem_granularity(const struct vgpu_granularity_req *req, uint64_t *granularity)
{
	struct vgpu_granularity_reply r;
	int rc = vgpu_call(VGPU_OP_MEM_GET_GRANULARITY, req, sizeof *req, NULL, 0, &r, sizeof r, NULL, 0, NULL);
	if (!rc)
		*granularity = r.granularity;
	return rc;
}

static void vgpu_wait_host_funcs(uint64_t stream);

/* Is [p, p+n) inside one registered region (guest mode, or host mode's
 * shared memory), so a copy names it by region and offset, with no segment
 * list or inline bytes to bound? */
static int vgpu_whole_region_copy(const void *p, uint64_t n)
{
	struct vgpu_hostrange hr;
	return vgpu_regions_usable() && vgpu_hostmap_find(p, n, &hr) && hr.region;
}

/* Can this host range go into a batch (no per-call pinning)? */
static int batchable_host(const void *p, uint64_t n, struct vgpu_hostrange *hr)
{
	return vgpu_hostmap_find(p, n, hr) && (vgpu_host_mode() || hr->region);
}

int vgpu_memcpy_htod(uint64_t dst, const void *src, uint64_t n, uint64_t stream, int async)
{
	if (!n)
		return 0;
	struct vgpu_hostrange hr;
	uint64_t chunk = vgpu_max_chunk();
	const uint8_t *s = src;
	if (async && batchable_host(src, n, &hr)) {
		int by_region = hr.region && vgpu_regions_usable();
		if (!by_region)
			vgpu_wait_host_funcs(stream);
		/* Queued: registered memory (guest mode, host mode's shared
		 * memory) is named by region and read when the stream gets
		 * there; other host-mode pinned memory carries the bytes inline
		 * in the batch (copied now, as a pinned-memory copy that was
		 * already staged). */
		for (uint64_t off = 0; off < n; off += chunk) {
			uint64_t len = n - off < chunk ? n - off : chunk;
			struct vgpu_memcpy_htod_req req;
			memset(&req, 0, sizeof req);
			req.dst = dst + off;
			req.stream = stream;
			req.flags = VGPU_COPY_ASYNC;
			req.src.len = len;
			int rc;
			if (!by_region) {
				uint8_t *b = malloc(sizeof req + len);
				if (!b)
					return VGPU_E_OUT_OF_MEMORY;
				req.src.kind = VGPU_BUF_INLINE;
				req.src.offset = 0;
				memcpy(b, &req, sizeof req);
				memcpy(b + sizeof req, s + off, len);
				rc = vgpu_queue(VGPU_OP_MEMCPY_HTOD, b, (uint32_t)(sizeof req + len));
				free(b);
			} else {
				req.src.kind = VGPU_BUF_REGION;
				req.src.region = hr.region;
				req.src.offset = (uint64_t)(s + off - (const uint8_t *)hr.addr);
				rc = vgpu_queue(VGPU_OP_MEMCPY_HTOD, &req, sizeof req);
			}
			if (rc)
				return rc;
		}
		return 0;
	}
	if (vgpu_whole_region_copy(src, n))
		chunk = n; /* registered memory names no segments: one call, one round trip */
	else if (vgpu_host_mode()) {
		int handled = 0;
		int rc = vgpu_staged_copy(1, dst, (void *)src, n, stream, &handled);
		if (handled)
			return rc;
	}
	for (uint64_t off = 0; off < n; off += chunk) {
		uint64_t len = n - off < chunk ? n - off : chunk;
		struct vgpu_memcpy_htod_req req;
		memset(&req, 0, sizeof req);
		req.dst = dst + off;
		req.stream = stream;
		struct vgpu_xbuf b = {(void *)(s + off), len, VGPU_DIR_TO_HOST,
				      offsetof(struct vgpu_memcpy_htod_req, src)};
		int rc = vgpu_call(VGPU_OP_MEMCPY_HTOD, &req, sizeof req, &b, 1, NULL, 0, NULL, 0, NULL);
		if (rc)
			return rc;
	}
	return 0;
}

int vgpu_memcpy_dtoh(void *dst, uint64_t src, uint64_t n, uint64_t stream, int async)
{
	if (!n)
		return 0;
	struct vgpu_hostrange hr;
	uint8_t *d = dst;
	uint64_t chunk = vgpu_max_chunk();
	if (async && batchable_host(dst, n, &hr) && hr.region && vgpu_regions_usable()) {
		struct vgpu_memcpy_dtoh_req req;
		memset(&req, 0, sizeof req);
		req.src = src;
		req.stream = stream;
		req.flags = VGPU_COPY_ASYNC;
		req.dst.kind = VGPU_BUF_REGION;
		req.dst.region = hr.region;
		req.dst.offset = (uint64_t)(d - (uint8_t *)hr.addr);
		req.dst.len = n;
		return vgpu_queue(VGPU_OP_MEMCPY_DTOH, &req, sizeof req);
	}
	if (!async)
		vgpu_sync_point();
	if (vgpu_whole_region_copy(dst, n))
		chunk = n; /* registered memory names no segments: one call, one round trip */
	else if (vgpu_host_mode()) {
		int handled = 0;
		int rc = vgpu_staged_copy(0, src, dst, n, stream, &handled);
		if (handled)
			return rc;
	}
	for (uint64_t off = 0; off < n; off += chunk) {
		uint64_t len = n - off < chunk ? n - off : chunk;
		struct vgpu_memcpy_dtoh_req req;
		memset(&req, 0, sizeof req);
		req.src = src + off;
		req.stream = stream;
		struct vgpu_xbuf b = {d + off, len, VGPU_DIR_FROM_HOST, offsetof(struct vgpu_memcpy_dtoh_req, dst)};
		int rc = vgpu_call(VGPU_OP_MEMCPY_DTOH, &req, sizeof req, &b, 1, NULL, 0, NULL, 0, NULL);
		if (rc)
			return rc;
	}
	return 0;
}

int vgpu_memcpy_dtod(uint64_t dst, uint64_t src, uint64_t n, uint64_t stream, int async)
{
	if (!n)
		return 0;
	struct vgpu_memcpy_dtod_req req = {.dst = dst, .src = src, .size = n, .stream = stream,
					   .flags = async ? VGPU_COPY_ASYNC : 0};
	if (async)
		return vgpu_queue(VGPU_OP_MEMCPY_DTOD, &req, sizeof req);
	return vgpu_call(VGPU_OP_MEMCPY_DTOD, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
}

int vgpu_memset(uint64_t dst, uint32_t value, uint32_t elem, uint64_t count, uint64_t pitch, uint64_t height,
		uint64_t stream, int async)
{
	struct vgpu_memset_req req = {.dst = dst, .count = count, .stream = stream, .pitch = pitch,
				      .height = height, .value = value, .elem_size = elem,
				      .flags = async ? VGPU_COPY_ASYNC : 0};
	if (!count)
		return 0;
	if (async)
		return vgpu_queue(VGPU_OP_MEMSET, &req, sizeof req);
	return vgpu_call(VGPU_OP_MEMSET, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
}

/* ---------------- streams and events ---------------- */

int vgpu_stream_create(int dev, unsigned flags, int prio, uint64_t *handle)
{
	struct vgpu_stream_create_req req = {.device = (uint32_t)dev, .flags = flags, .priority = prio};
	struct vgpu_handle_reply r;
	int rc = vgpu_call(VGPU_OP_STREAM_CREATE, &req, sizeof req, NULL, 0, &r, sizeof r, NULL, 0, NULL);
	if (!rc)
		*handle = r.handle;
	return rc;
}

int vgpu_simple(uint16_t op, uint64_t handle)
{
	struct vgpu_handle_req req = {.handle = handle};
	int sync = op == VGPU_OP_STREAM_SYNCHRONIZE || op == VGPU_OP_EVENT_SYNCHRONIZE;
	if (sync)
		vgpu_sync_point();
	int rc = vgpu_call(op, &req, sizeof req, NULL, 0, NULL, 0, NULL, 0, NULL);
	if (sync) {
		int d = vgpu_take_deferred_error();
		if (d)
			return d;
	}
	return rc;
}

int vgpu_event_create(int dev, unsigned flags, uint64_t *handle)
{
	struct vgpu_event_create_req req = {.device = (uint32_t)dev, .flags = flags};
	struct vgpu_handle_reply r;
	int rc = vgpu_call(VGPU_OP_EVENT_CREATE, &req, sizeof req, NULL, 0, &r, sizeof r, NULL, 0, NULL);
	if (!rc)
		*handle = r.handle;
	return rc;
}

int vgpu_event_record(uint64_t ev, uint64_t stream, unsigned flags)
{
	struct vgpu_event_record_req req = {.event = ev, .stream = stream, .flags = flags};
	return vgpu_queue(VGPU_OP_EVENT_RECORD, &req, sizeof req);
}

int vgpu_stream_wait_event(uint64_t stream, uint64_t ev, unsigned flags)
{
	struct vgpu_stream_wait_event_req req = {.stream = stream, .event = ev, .flags = flags};
	return vgpu_queue(VGPU_OP_STREAM_WAIT_EVENT, &req, sizeof req);
}

int vgpu_elapsed(uint64_t start, uint64_t end, float *ms)
{
	struct vgpu_elapsed_time_req req = {.start = start, .end = end};
	struct vgpu_elapsed_time_reply r;
	int rc = vgpu_call(VGPU_OP_EVENT_ELAPSED_TIME, &req, sizeof req, NULL, 0, &r, sizeof r, NULL, 0, NULL);
	if (!rc)
		*ms = r.milliseconds;
	return rc;
}

/* ---------------- host functions ---------------- */

/* A host function waits in this list from its launch until the host says
 * its stream reached it (OpNotifyHostFunc); a library thread then runs it
 * and answers OpHostFuncDone, which lets the stream go on. */
struct hostfn {
	uint64_t id;
	uint64_t stream;
	vgpu_hostfn fn;
	void *user;
	int ready; /* 1: the stream reached it; 2: running */
	struct hostfn *next;
};
static pthread_mutex_t hf_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hf_cv = PTHREAD_COND_INITIALIZER;
static struct hostfn *hf_list;
static uint64_t hf_next = 1;
static int hf_thread_started;

static int host_func_pending(uint64_t stream)
{
	for (struct hostfn *f = hf_list; f; f = f->next)
		if (f->stream == stream || stream == 0 || f->stream == 0)
			return 1;
	return 0;
}

/*
 * Host mode carries the bytes of an asynchronous H2D copy inline, so they are
 * read when the copy is queued, not when the stream reaches it. A host
 * function queued before it on the stream may still write them (CUDA orders
 * the two), so wait until the stream's earlier host functions have run.
 * Guest mode needs none of this: the backend reads registered guest memory
 * when the stream gets there.
 */
static void vgpu_wait_host_funcs(uint64_t stream)
{
	if (!vgpu_host_mode())
		return;
	pthread_mutex_lock(&hf_mu);
	int pending = host_func_pending(stream);
	pthread_mutex_unlock(&hf_mu);
	if (!pending)
		return;
	vgpu_flush();
	pthread_mutex_lock(&hf_mu);
	while (host_func_pending(stream))
		pthread_cond_wait(&hf_cv, &hf_mu);
	pthread_mutex_unlock(&hf_mu);
}


static void *hf_main(void *arg)
{
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&hf_mu);
		struct hostfn *h = NULL;
		while (!h) {
			for (struct hostfn *f = hf_list; f; f = f->next)
				if (f->ready == 1) {
					h = f;
					h->ready = 2;
					break;
				}
			if (!h)
				pthread_cond_wait(&hf_cv, &hf_mu);
		}
		pthread_mutex_unlock(&hf_mu);
		h->fn(h->user, 0);
		struct vgpu_host_func_done_req done = {.callback_id = h->id, .status = 0};
		int rc = vgpu_send_noreply(VGPU_OP_HOST_FUNC_DONE, &done, sizeof done);
		if (rc)
			VERR("HOST_FUNC_DONE for callback %llu failed: %d", (unsigned long long)h->id, rc);
		/* Stays listed until done, so vgpu_wait_host_funcs sees it. */
		pthread_mutex_lock(&hf_mu);
		for (struct hostfn **pp = &hf_list; *pp; pp = &(*pp)->next)
			if (*pp == h) {
				*pp = h->next;
				break;
			}
		pthread_cond_broadcast(&hf_cv);
		pthread_mutex_unlock(&hf_mu);
		free(h);
	}
	return NULL;
}

void vgpu_notify(const struct vgpu_header *h, const void *payload)
{
	if (h->opcode == VGPU_OP_NOTIFY_HOST_FUNC && h->payload_len >= sizeof(struct vgpu_host_func_notify)) {
		struct vgpu_host_func_notify n;
		memcpy(&n, payload, sizeof n);
		pthread_mutex_lock(&hf_mu);
		struct hostfn *f;
		for (f = hf_list; f; f = f->next)
			if (f->id == n.callback_id)
				break;
		if (f)
			f->ready = 1;
		else
			VWARN("host asked for unknown host function %llu", (unsigned long long)n.callback_id);
		pthread_cond_broadcast(&hf_cv);
		pthread_mutex_unlock(&hf_mu);
	} else if (h->opcode == VGPU_OP_NOTIFY_OUTPUT) {
		vgpu_output_notify(h, payload);
	} else if (h->opcode == VGPU_OP_NOTIFY_ERROR && h->payload_len >= sizeof(struct vgpu_error_notify)) {
		struct vgpu_error_notify n;
		memcpy(&n, payload, sizeof n);
		VINFO("deferred error %d from %s (request %llu)", n.error, vgpu_op_name(n.opcode),
		      (unsigned long long)n.request_id);
		vgpu_defer_error(n.error);
	} else {
		VDEBUG("notification %s ignored", vgpu_op_name(h->opcode));
	}
}

static void *recv_main(void *arg)
{
	(void)arg;
	uint8_t buf[4096];
	for (;;) {
		struct vgpu_recv r;
		memset(&r, 0, sizeof r);
		r.buf = (uintptr_t)buf;
		r.cap = sizeof buf;
		if (ioctl(vgpu_dev_fd(), VGPU_IOC_RECV, &r) != 0) {
			if (errno == EINTR || errno == ETIMEDOUT || errno == EAGAIN)
				continue;
			VERR("VGPU_IOC_RECV failed: %s; host functions stop", strerror(errno));
			return NULL;
		}
		if (r.len < VGPU_HEADER_SIZE)
			continue;
		const struct vgpu_header *h = (const void *)buf;
		if (h->magic != VGPU_MAGIC || VGPU_HEADER_SIZE + (uint64_t)h->payload_len > r.len)
			continue;
		vgpu_notify(h, buf + VGPU_HEADER_SIZE);
	}
	return NULL;
}

void vgpu_start_notify_thread(void)
{
	pthread_mutex_lock(&hf_mu);
	if (!hf_thread_started) {
		pthread_t t;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &at, hf_main, NULL) == 0)
			hf_thread_started = 1;
		if (!vgpu_host_mode() && pthread_create(&t, &at, recv_main, NULL) != 0)
			VERR("cannot start the notification thread");
		pthread_attr_destroy(&at);
	}
	pthread_mutex_unlock(&hf_mu);
}

int vgpu_host_func(uint64_t stream, vgpu_hostfn fn, void *user)
{
	int rc = vgpu_init();
	if (rc)
		return rc;
	if (!fn)
		return VGPU_E_INVALID_VALUE;
	vgpu_start_notify_thread();
	if (!hf_thread_started)
		return VGPU_E_OUT_OF_MEMORY;
	struct hostfn *h = calloc(1, sizeof *h);
	if (!h)
		return VGPU_E_OUT_OF_MEMORY;
	h->fn = fn;
	h->user = user;
	h->stream = stream;
	pthread_mutex_lock(&hf_mu);
	h->id = hf_next++;
	h->next = hf_list;
	hf_list = h;
	pthread_mutex_unlock(&hf_mu);
	struct vgpu_host_func_req req = {.stream = stream, .callback_id = h->id};
	rc = vgpu_queue(VGPU_OP_HOST_FUNC_LAUNCH, &req, sizeof req);
	if (rc) {
		pthread_mutex_lock(&hf_mu);
		for (struct hostfn **pp = &hf_list; *pp; pp = &(*pp)->next)
			if (*pp == h) {
				*pp = h->next;
				break;
			}
		pthread_mutex_unlock(&hf_mu);
		free(h);
	}
	return rc;
}
