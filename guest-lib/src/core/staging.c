/*
 * staging.c - host mode's large copies of pageable memory, through shared
 * staging memory instead of inline socket bytes.
 *
 * Host mode has no guest RAM the backend can read, so a cudaMemcpy of
 * pageable (malloc'd) memory used to travel inline: the bytes were written
 * into the socket and copied again on the other side, at 1.3-1.5 GB/s.
 * Instead, the first large copy allocates a staging area of STAGE_SLOTS
 * slots of STAGE_SLOT bytes in memory shared with the backend (a sealed
 * memfd, HOST_SHARE, GUEST_REGISTER: the backend registers it with the
 * driver once, so its copies are DMA from pinned memory) and copies go
 * through it chunk by chunk, pipelined:
 *
 *  - host to device: the library fills slot k and sends MEMCPY_HTOD naming
 *    it by region, without waiting; before refilling a slot it waits for
 *    the reply of the copy that last used it (a copy from pinned memory has
 *    read its source when it returns). The library's memcpy of one chunk
 *    overlaps the device's DMA of the previous ones.
 *  - device to host: up to STAGE_SLOTS MEMCPY_DTOH are in flight; as each
 *    reply arrives, its slot is copied out and the slot's next chunk asked
 *    for.
 *
 * The library's copies into and out of the slots are split across a few
 * threads (parcopy.c, VGPU_STAGING_THREADS): one thread's memcpy, not the
 * DMA, bounded the staged copies on the H200.
 *
 * Every chunk is an ordinary synchronous copy on the caller's stream, so
 * ordering and errors are those of the chunked inline path it replaces;
 * the first failed chunk's error is returned after the chunks in flight
 * have been answered. One copy uses the staging area at a time; a copy
 * that finds it busy (another thread) goes inline rather than wait.
 * VGPU_STAGING=0 turns staging off.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "vgpu_internal.h"

#define STAGE_SLOTS 4
#define STAGE_SLOT (4u << 20)
#define STAGE_MIN (256u << 10) /* smaller copies stay inline: one round trip */

static pthread_mutex_t stage_mu = PTHREAD_MUTEX_INITIALIZER;
static int stage_state; /* 0 untried, 1 ready, -1 unavailable (under stage_mu) */
static struct vgpu_hostrange stage;
static uint64_t staged_bytes;

uint64_t vgpu_staged_bytes(void) { return __atomic_load_n(&staged_bytes, __ATOMIC_RELAXED); }

/* Under stage_mu: is the staging area there (allocating it the first time)? */
static int stage_ready(void)
{
	if (stage_state)
		return stage_state > 0;
	stage_state = -1;
	const char *e = getenv("VGPU_STAGING");
	if ((e && !strcmp(e, "0")) || !vgpu_host_share_ok())
		return 0;
	memset(&stage, 0, sizeof stage);
	stage.len = (uint64_t)STAGE_SLOTS * STAGE_SLOT;
	int rc = vgpu_share_alloc(&stage);
	if (rc) {
		VINFO("no staging memory for pageable copies (error %d): they travel inline", rc);
		return 0;
	}
	stage_state = 1;
	return 1;
}

static uint8_t *slot(unsigned k) { return (uint8_t *)stage.addr + (size_t)k * STAGE_SLOT; }

static int begin_chunk(int to_dev, uint64_t dptr, uint64_t len, unsigned k, uint64_t stream,
		       struct vgpu_pending_call **pc)
{
	struct vgpu_buf_ref ref;
	memset(&ref, 0, sizeof ref);
	ref.kind = VGPU_BUF_REGION;
	ref.region = stage.region;
	ref.offset = (uint64_t)k * STAGE_SLOT;
	ref.len = len;
	if (to_dev) {
		struct vgpu_memcpy_htod_req req;
		memset(&req, 0, sizeof req);
		req.dst = dptr;
		req.stream = stream;
		req.src = ref;
		return vgpu_host_begin(VGPU_OP_MEMCPY_HTOD, &req, sizeof req, pc);
	}
	struct vgpu_memcpy_dtoh_req req;
	memset(&req, 0, sizeof req);
	req.src = dptr;
	req.stream = stream;
	req.dst = ref;
	return vgpu_host_begin(VGPU_OP_MEMCPY_DTOH, &req, sizeof req, pc);
}

/* Ends the chunk in flight in slot k, if any; keeps the first error. */
static void end_chunk(struct vgpu_pending_call **pc, int *first)
{
	if (!*pc)
		return;
	int rc = vgpu_host_end(*pc, NULL, 0);
	*pc = NULL;
	if (rc && !*first)
		*first = rc;
}

int vgpu_staged_copy(int to_dev, uint64_t dptr, void *host, uint64_t n, uint64_t stream, int *handled)
{
	*handled = 0;
	if (n < STAGE_MIN || !vgpu_regions_usable() || pthread_mutex_trylock(&stage_mu) != 0)
		return 0;
	if (!stage_ready()) {
		pthread_mutex_unlock(&stage_mu);
		return 0;
	}
	*handled = 1;
	vgpu_flush(); /* queued work comes first, as for any synchronous call */
	struct vgpu_pending_call *pc[STAGE_SLOTS] = {0};
	uint64_t chunks = (n + STAGE_SLOT - 1) / STAGE_SLOT;
	int first = 0;
	uint8_t *h = host;
#define CHUNK_LEN(i) ((i) == chunks - 1 ? n - (i) * (uint64_t)STAGE_SLOT : (uint64_t)STAGE_SLOT)
	if (to_dev) {
		for (uint64_t i = 0; i < chunks && !first; i++) {
			unsigned k = (unsigned)(i % STAGE_SLOTS);
			end_chunk(&pc[k], &first); /* the slot's previous copy has read it */
			if (first)
				break;
			uint64_t off = i * STAGE_SLOT, len = CHUNK_LEN(i);
			vgpu_par_copy(slot(k), h + off, len);
			int rc = begin_chunk(1, dptr + off, len, k, stream, &pc[k]);
			if (rc)
				first = rc;
		}
	} else {
		for (uint64_t i = 0; i < chunks && i < STAGE_SLOTS && !first; i++) {
			int rc = begin_chunk(0, dptr + i * STAGE_SLOT, CHUNK_LEN(i), (unsigned)i, stream, &pc[i]);
			if (rc)
				first = rc;
		}
		for (uint64_t i = 0; i < chunks && !first; i++) {
			unsigned k = (unsigned)(i % STAGE_SLOTS);
			end_chunk(&pc[k], &first);
			if (first)
				break;
			uint64_t off = i * STAGE_SLOT;
			vgpu_par_copy(h + off, slot(k), CHUNK_LEN(i));
			uint64_t next = i + STAGE_SLOTS;
			if (next < chunks) {
				int rc = begin_chunk(0, dptr + next * STAGE_SLOT, CHUNK_LEN(next), k, stream, &pc[k]);
				if (rc)
					first = rc;
			}
		}
	}
#undef CHUNK_LEN
	for (unsigned k = 0; k < STAGE_SLOTS; k++)
		end_chunk(&pc[k], &first);
	if (!first)
		__atomic_fetch_add(&staged_bytes, n, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&stage_mu);
	return first;
}
