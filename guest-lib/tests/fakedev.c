/*
 * fakedev.c - a stand-in for the guest driver, for testing the library's
 * guest mode (/dev/vgpu) on a machine without a VM. LD_PRELOAD it: it
 * claims open() of $FAKEDEV_PATH (default /dev/vgpu-fake) and answers the
 * uapi ioctls (CALL, SUBMIT, RECV, REGISTER, UNREGISTER, INFO) and mmap()
 * by talking host mode to a backend on $FAKEDEV_SOCK.
 *
 * Where the real driver would pin user buffers and append guest-physical
 * segments, this fake reads or writes the buffers itself and rewrites the
 * BufRefs of the three calls that carry them (MEMCPY_HTOD, MEMCPY_DTOH,
 * MODULE_LOAD) to inline data. Registered regions are remembered, and
 * REGION refs are rewritten the same way. A BATCH is replayed call by call
 * (a failure becomes a NOTIFY_ERROR on the RECV queue, as the host sends);
 * a BATCH_SYNC's queued calls the same way, then its last call, answered
 * as the backend answers it.
 * It checks what the driver would refuse: segments, driver request ids,
 * NO_REPLY on CALL, buffer indexes and lengths that do not match the bufs.
 *
 * With FAKEDEV_RING=1 it also answers RING_SETUP, RING_BELL and RING_WAIT
 * and the rings' mmap, and plays the backend's side of the rings itself: a
 * thread reads the request ring (sleeping on RING_BELL when its sleep word
 * is set), forwards each frame as above, writes the reply on the
 * completion ring and rings the library (RING_WAIT) when its word is set;
 * it publishes RingOffReqTaken and refuses frames with segments, as the
 * backend does. At exit it prints how many frames came on the ring, how
 * many calls on the stream, and the doorbells each way. Without it,
 * RING_SETUP answers ENOTTY, as an older vgpu.ko does. FAKEDEV_RING=broken
 * plays a backend that ended the rings after 20 frames (the process broke
 * them: VGPU_RING_BELL_BROKEN): the ring is no longer read, and RING_WAIT
 * and RING_BELL fail with EPIPE, as vgpu.ko's do then.
 *
 * Test code only; never installed.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <linux/types.h>

#include "vgpu_protocol.h"
#include "uapi/vgpu.h"

static int fake_fd = -1;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* owns reading: one waiting call at a time */
static pthread_mutex_t wmu = PTHREAD_MUTEX_INITIALIZER; /* one frame written at a time */
static pthread_mutex_t rmu = PTHREAD_MUTEX_INITIALIZER; /* regions */
static pthread_mutex_t q_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_cv = PTHREAD_COND_INITIALIZER;
static uint64_t ids = 1ull << 40;

struct note {
	uint8_t *frame;
	uint32_t len;
	struct note *next;
};
static struct note *q_head, **q_tail = &q_head;

struct region {
	uint64_t id;
	uint8_t *addr;
	uint64_t len;
	struct region *next;
};
static struct region *regions;
static uint64_t region_ids = 100;

/* FAKEDEV_RING=1: the rings and the thread that serves them. */
static int ring_mfd = -1;
static uint8_t *ring_mem;
static uint64_t ring_bytes;
static pthread_mutex_t bell_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t bell_cv = PTHREAD_COND_INITIALIZER;
static uint64_t srv_bells, cli_bells; /* doorbells to the fake backend, to the library */
static uint64_t ring_frames, stream_calls;
static int ring_broken_mode; /* FAKEDEV_RING=broken */
#define RING_BROKEN_AFTER 20

static int ring_broken(void)
{
	return ring_broken_mode && __atomic_load_n(&ring_frames, __ATOMIC_RELAXED) >= RING_BROKEN_AFTER;
}

static void push_note(uint8_t *f, uint32_t len)
{
	struct note *n = calloc(1, sizeof *n);
	n->frame = f;
	n->len = len;
	pthread_mutex_lock(&q_mu);
	*q_tail = n;
	q_tail = &n->next;
	pthread_cond_broadcast(&q_cv);
	pthread_mutex_unlock(&q_mu);
}

static int xfer(int write_, void *p, size_t n)
{
	uint8_t *b = p;
	while (n) {
		ssize_t r = write_ ? send(fake_fd, b, n, MSG_NOSIGNAL) : recv(fake_fd, b, n, 0);
		if (r <= 0) {
			if (r < 0 && errno == EINTR)
				continue;
			return -1;
		}
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/* Sends one frame (header fixed up) and, unless no_reply, returns the
 * reply frame (malloc'd). Notifications read meanwhile go to the queue.
 * A caller that waits for a reply holds mu. */
static int host_call(uint16_t op, const void *payload, uint32_t plen, int no_reply, uint8_t **reply, uint32_t *rlen)
{
	struct vgpu_header h;
	memset(&h, 0, sizeof h);
	h.magic = VGPU_MAGIC;
	h.major = VGPU_PROTO_MAJOR;
	h.minor = VGPU_PROTO_MINOR;
	h.opcode = op;
	h.flags = no_reply ? VGPU_FLAG_NO_REPLY : 0;
	h.request_id = ids++;
	h.payload_len = plen;
	uint64_t n = vgpu_frame_len(plen, 0);
	uint8_t *f = calloc(1, n);
	memcpy(f, &h, sizeof h);
	memcpy(f + sizeof h, payload, plen);
	pthread_mutex_lock(&wmu);
	int rc = xfer(1, f, n);
	pthread_mutex_unlock(&wmu);
	free(f);
	if (rc || no_reply)
		return rc;
	for (;;) {
		struct vgpu_header rh;
		if (xfer(0, &rh, sizeof rh))
			return -1;
		uint64_t fl = vgpu_frame_len(rh.payload_len, 0);
		uint8_t *r = malloc(fl);
		memcpy(r, &rh, sizeof rh);
		if (xfer(0, r + sizeof rh, fl - sizeof rh))
			return -1;
		if (rh.flags & VGPU_FLAG_NOTIFY) {
			push_note(r, (uint32_t)fl);
			continue;
		}
		if (rh.request_id != h.request_id) {
			free(r);
			continue;
		}
		*reply = r;
		*rlen = (uint32_t)fl;
		return 0;
	}
}

static int find_region(uint64_t id, struct region *out)
{
	int found = 0;
	pthread_mutex_lock(&rmu);
	for (struct region *r = regions; r; r = r->next)
		if (r->id == id) {
			*out = *r;
			found = 1;
			break;
		}
	pthread_mutex_unlock(&rmu);
	return found;
}

/* Rewrites the BufRef at ref_off of a request to inline data. Returns the
 * new payload (malloc'd) or NULL; *from_host gets a D2H destination. */
static uint8_t *inline_ref(const uint8_t *payload, uint32_t plen, uint32_t ref_off, uint32_t fixed,
			   const struct vgpu_buf *bufs, uint32_t nbufs, uint32_t *new_len, void **from_host,
			   uint64_t *from_len, int *bad)
{
	struct vgpu_buf_ref ref;
	memcpy(&ref, payload + ref_off, sizeof ref);
	void *addr = NULL;
	if (ref.kind == VGPU_BUF_SEGMENTS) {
		if (ref.index >= nbufs || bufs[ref.index].len != ref.len) {
			fprintf(stderr, "fakedev: BufRef index %u len %llu does not match the call's buffers\n",
				ref.index, (unsigned long long)ref.len);
			*bad = 1;
			return NULL;
		}
		addr = (void *)(uintptr_t)bufs[ref.index].addr;
	} else if (ref.kind == VGPU_BUF_REGION) {
		struct region r;
		if (!find_region(ref.region, &r) || ref.offset > r.len || ref.len > r.len - ref.offset) {
			fprintf(stderr, "fakedev: REGION ref outside region %llu\n", (unsigned long long)ref.region);
			*bad = 1;
			return NULL;
		}
		addr = r.addr + ref.offset;
	} else {
		return NULL; /* NONE or INLINE: leave it */
	}
	int to_host = !(from_host && fixed == sizeof(struct vgpu_memcpy_dtoh_req) &&
			ref_off == offsetof(struct vgpu_memcpy_dtoh_req, dst));
	uint32_t extra = to_host ? (uint32_t)ref.len : 0;
	uint8_t *np = malloc(plen + extra);
	memcpy(np, payload, plen);
	ref.kind = VGPU_BUF_INLINE;
	ref.index = 0;
	ref.region = 0;
	ref.offset = to_host ? plen - fixed : 0;
	memcpy(np + ref_off, &ref, sizeof ref);
	if (to_host)
		memcpy(np + plen, addr, ref.len);
	else {
		*from_host = addr;
		*from_len = ref.len;
	}
	*new_len = plen + extra;
	return np;
}

/* One request: translate, call, untranslate. Returns the reply frame. */
static int do_request(const uint8_t *frame, const struct vgpu_buf *bufs, uint32_t nbufs, int no_reply,
		      uint8_t **reply, uint32_t *rlen, int *bad)
{
	const struct vgpu_header *h = (const void *)frame;
	const uint8_t *payload = frame + VGPU_HEADER_SIZE;
	uint32_t plen = h->payload_len;
	uint8_t *np = NULL;
	uint32_t nlen = plen;
	void *from_host = NULL;
	uint64_t from_len = 0;
	switch (h->opcode) {
	case VGPU_OP_MEMCPY_HTOD:
		np = inline_ref(payload, plen, offsetof(struct vgpu_memcpy_htod_req, src),
				sizeof(struct vgpu_memcpy_htod_req), bufs, nbufs, &nlen, NULL, NULL, bad);
		break;
	case VGPU_OP_MEMCPY_DTOH:
		np = inline_ref(payload, plen, offsetof(struct vgpu_memcpy_dtoh_req, dst),
				sizeof(struct vgpu_memcpy_dtoh_req), bufs, nbufs, &nlen, &from_host, &from_len, bad);
		break;
	case VGPU_OP_MODULE_LOAD:
		np = inline_ref(payload, plen, offsetof(struct vgpu_module_load_req, image),
				sizeof(struct vgpu_module_load_req), bufs, nbufs, &nlen, NULL, NULL, bad);
		break;
	}
	if (*bad)
		return -1;
	if (from_host)
		no_reply = 0; /* the bytes come back in the reply */
	int rc = host_call(h->opcode, np ? np : payload, nlen, no_reply, reply, rlen);
	free(np);
	if (rc || no_reply)
		return rc;
	struct vgpu_header *rh = (void *)*reply;
	if (from_host && rh->status == 0) {
		if (rh->payload_len != from_len) {
			fprintf(stderr, "fakedev: D2H reply of %u bytes for %llu\n", rh->payload_len,
				(unsigned long long)from_len);
			*bad = 1;
			return -1;
		}
		memcpy(from_host, *reply + VGPU_HEADER_SIZE, from_len);
		rh->payload_len = 0; /* the driver delivers the data to the buffer */
		*rlen = VGPU_HEADER_SIZE;
	}
	return 0;
}

/* A batch: replayed one call at a time. The first failure goes into *rep;
 * without a reply (SUBMIT) it is notified, as the host does. */
static int do_batch(const uint8_t *frame, int notify, struct vgpu_batch_reply *rep, int *bad)
{
	const struct vgpu_header *h = (const void *)frame;
	const uint8_t *p = frame + VGPU_HEADER_SIZE;
	struct vgpu_batch_req br;
	memcpy(&br, p, sizeof br);
	memset(rep, 0, sizeof *rep);
	rep->failed_index = br.count;
	uint64_t off = sizeof br;
	for (uint32_t i = 0; i < br.count; i++) {
		const struct vgpu_header *sh = (const void *)(p + off);
		if (off + VGPU_HEADER_SIZE > h->payload_len || sh->magic != VGPU_MAGIC || sh->num_segs) {
			fprintf(stderr, "fakedev: malformed batch call %u\n", i);
			*bad = 1;
			return -1;
		}
		uint8_t *r = NULL;
		uint32_t rl = 0;
		/* sub-calls are waited for, to learn their errors */
		if (do_request(p + off, NULL, 0, 0, &r, &rl, bad))
			return -1;
		int32_t st = ((struct vgpu_header *)r)->status;
		free(r);
		if (st) {
			rep->failed_index = i;
			rep->first_error = st;
			rep->failed_request_id = sh->request_id;
			if (!notify)
				return 0;
			struct {
				struct vgpu_header h;
				struct vgpu_error_notify n;
			} note;
			memset(&note, 0, sizeof note);
			note.h.magic = VGPU_MAGIC;
			note.h.major = VGPU_PROTO_MAJOR;
			note.h.opcode = VGPU_OP_NOTIFY_ERROR;
			note.h.flags = VGPU_FLAG_NOTIFY;
			note.h.payload_len = sizeof note.n;
			note.n.request_id = sh->request_id;
			note.n.error = st;
			note.n.opcode = sh->opcode;
			uint8_t *c = malloc(sizeof note);
			memcpy(c, &note, sizeof note);
			push_note(c, sizeof note);
			return 0;
		}
		rep->executed++;
		off += vgpu_frame_len(sh->payload_len, 0);
	}
	return 0;
}

/* A BATCH_SYNC: the queued calls replayed as a batch sent as a call,
 * then the last call; the reply (malloc'd, the caller sets its header's
 * opcode and id) is a BatchSyncReply and the last call's own reply frame,
 * as the backend's. */
static int do_batch_sync(const uint8_t *frame, uint8_t **reply, uint32_t *rlen, int *bad)
{
	const struct vgpu_header *h = (const void *)frame;
	const uint8_t *p = frame + VGPU_HEADER_SIZE;
	struct vgpu_batch_req br;
	memcpy(&br, p, sizeof br);
	uint64_t off = sizeof br;
	for (uint32_t i = 0; br.count && i + 1 < br.count; i++) {
		const struct vgpu_header *sh = (const void *)(p + off);
		if (off + VGPU_HEADER_SIZE > h->payload_len || sh->magic != VGPU_MAGIC)
			break;
		off += vgpu_frame_len(sh->payload_len, 0);
	}
	const struct vgpu_header *last = (const void *)(p + off);
	if (!br.count || off + VGPU_HEADER_SIZE > h->payload_len || last->magic != VGPU_MAGIC || last->num_segs ||
	    off + vgpu_frame_len(last->payload_len, 0) != h->payload_len) {
		fprintf(stderr, "fakedev: malformed BATCH_SYNC\n");
		*bad = 1;
		return -1;
	}
	/* the queued calls: a BATCH of count-1 (none: nothing to replay) */
	struct vgpu_batch_reply brep = {.failed_index = 0};
	if (br.count > 1) {
		uint8_t *b = malloc(VGPU_HEADER_SIZE + off);
		memcpy(b, h, VGPU_HEADER_SIZE);
		((struct vgpu_header *)b)->payload_len = (uint32_t)off;
		struct vgpu_batch_req qr = {.count = br.count - 1};
		memcpy(b + VGPU_HEADER_SIZE, &qr, sizeof qr);
		memcpy(b + VGPU_HEADER_SIZE + sizeof qr, p + sizeof br, off - sizeof br);
		int rc = do_batch(b, 0, &brep, bad);
		free(b);
		if (rc)
			return rc;
	}
	uint8_t *r = NULL;
	uint32_t rl = 0;
	if (do_request((const uint8_t *)last, NULL, 0, 0, &r, &rl, bad))
		return -1;
	struct vgpu_header *ih = (void *)r;
	ih->request_id = last->request_id;
	ih->opcode = last->opcode;
	struct vgpu_batch_sync_reply rep = {.executed = brep.executed, .failed_index = brep.failed_index,
					    .first_error = brep.first_error, .ran = 1,
					    .failed_request_id = brep.failed_request_id};
	uint32_t inner = (uint32_t)vgpu_frame_len(ih->payload_len, 0);
	*rlen = VGPU_HEADER_SIZE + sizeof rep + inner;
	*reply = calloc(1, *rlen);
	struct vgpu_header *oh = (void *)*reply;
	*oh = *h;
	oh->flags = VGPU_FLAG_REPLY;
	oh->payload_len = sizeof rep + inner;
	memcpy(*reply + VGPU_HEADER_SIZE, &rep, sizeof rep);
	memcpy(*reply + VGPU_HEADER_SIZE + sizeof rep, r, rl < inner ? rl : inner);
	free(r);
	return 0;
}

static int fake_call(struct vgpu_call *c, int submit)
{
	const uint8_t *frame = (const void *)(uintptr_t)c->frame;
	const struct vgpu_header *h = (const void *)frame;
	struct vgpu_buf bufs[VGPU_MAX_BUFS];
	int bad = 0;
	if (c->frame_len < VGPU_HEADER_SIZE || h->magic != VGPU_MAGIC || h->num_segs ||
	    (h->flags & (VGPU_FLAG_SEGMENTS | VGPU_FLAG_MORE_SEGMENTS | VGPU_FLAG_REPLY | VGPU_FLAG_NOTIFY)) ||
	    (h->request_id >> 63) || c->nbufs > VGPU_MAX_BUFS ||
	    VGPU_HEADER_SIZE + (uint64_t)h->payload_len > c->frame_len) {
		fprintf(stderr, "fakedev: the driver would refuse this frame (op %#x)\n", h->opcode);
		return -EINVAL;
	}
	if (!submit && (h->flags & VGPU_FLAG_NO_REPLY))
		return -EINVAL;
	__atomic_fetch_add(&stream_calls, 1, __ATOMIC_RELAXED);
	memcpy(bufs, (void *)(uintptr_t)c->bufs, c->nbufs * sizeof *bufs);
	for (uint32_t i = 0; i < c->nbufs; i++)
		if (!bufs[i].len || bufs[i].flags || !bufs[i].dir || (bufs[i].dir & ~3u))
			return -EINVAL;
	uint8_t *r = NULL;
	uint32_t rl = 0;
	int rc;
	int fire_and_forget = submit && (h->flags & VGPU_FLAG_NO_REPLY) && h->opcode != VGPU_OP_BATCH &&
			      h->opcode != VGPU_OP_MEMCPY_DTOH;
	if (!fire_and_forget)
		pthread_mutex_lock(&mu);
	struct vgpu_batch_reply brep;
	if (h->opcode == VGPU_OP_BATCH) {
		rc = do_batch(frame, submit, &brep, &bad);
		if (!rc && !submit) { /* a batch sent as a call gets a BatchReply */
			rl = VGPU_HEADER_SIZE + sizeof brep;
			r = calloc(1, rl);
			struct vgpu_header *rh = (void *)r;
			*rh = *h;
			rh->flags = VGPU_FLAG_REPLY;
			rh->payload_len = sizeof brep;
			memcpy(r + VGPU_HEADER_SIZE, &brep, sizeof brep);
		}
	} else if (h->opcode == VGPU_OP_BATCH_SYNC && !submit && !c->nbufs)
		rc = do_batch_sync(frame, &r, &rl, &bad);
	else
		rc = do_request(frame, bufs, c->nbufs, submit && (h->flags & VGPU_FLAG_NO_REPLY), &r, &rl, &bad);
	if (!fire_and_forget)
		pthread_mutex_unlock(&mu);
	if (bad)
		return -EINVAL;
	if (rc)
		return -EIO;
	if (submit) {
		free(r);
		return 0;
	}
	/* the reply carries the request's id (the library checks it) */
	((struct vgpu_header *)r)->request_id = h->request_id;
	c->reply_len = rl;
	if (rl > c->reply_cap) {
		free(r);
		return -EMSGSIZE;
	}
	memcpy((void *)(uintptr_t)c->reply, r, rl);
	free(r);
	return 0;
}

static int fake_recv(struct vgpu_recv *rv)
{
	pthread_mutex_lock(&q_mu);
	while (!q_head) {
		/* nobody else reads the socket while no call runs: poll it */
		pthread_mutex_unlock(&q_mu);
		if (pthread_mutex_trylock(&mu) == 0) {
			struct timeval tv = {0, 20000};
			setsockopt(fake_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
			struct vgpu_header h;
			ssize_t n = recv(fake_fd, &h, sizeof h, MSG_PEEK);
			tv.tv_usec = 0;
			if (n == (ssize_t)sizeof h && (h.flags & VGPU_FLAG_NOTIFY)) {
				uint64_t fl = vgpu_frame_len(h.payload_len, 0);
				uint8_t *f = malloc(fl);
				setsockopt(fake_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
				if (xfer(0, f, fl) == 0)
					push_note(f, (uint32_t)fl);
				else
					free(f);
			}
			setsockopt(fake_fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
			pthread_mutex_unlock(&mu);
		}
		usleep(1000);
		pthread_mutex_lock(&q_mu);
	}
	struct note *n = q_head;
	q_head = n->next;
	if (!q_head)
		q_tail = &q_head;
	pthread_mutex_unlock(&q_mu);
	int rc = 0;
	rv->len = n->len;
	if (n->len > rv->cap)
		rc = -EMSGSIZE;
	else
		memcpy((void *)(uintptr_t)rv->buf, n->frame, n->len);
	free(n->frame);
	free(n);
	return rc;
}

/* ---- the rings (FAKEDEV_RING=1) ---- */

#define RU64(off) ((uint64_t *)(ring_mem + (off)))
#define RU32(off) ((uint32_t *)(ring_mem + (off)))

/* Waits until the request ring holds n unread bytes past head (sleeping on
 * the library's RING_BELL with the backend's sleep word set). */
static void ring_wait_req(uint64_t head, uint64_t n)
{
	for (int spins = 0;; spins++) {
		uint64_t tail = __atomic_load_n(RU64(VGPU_RING_OFF_REQ_TAIL), __ATOMIC_ACQUIRE);
		if (tail - head >= n && tail - head <= ring_bytes)
			return;
		if (tail - head > ring_bytes) {
			fprintf(stderr, "fakedev: the library corrupted the request ring\n");
			_exit(3);
		}
		if (spins < 100)
			continue;
		pthread_mutex_lock(&bell_mu);
		uint64_t seen = srv_bells;
		__atomic_store_n(RU32(VGPU_RING_OFF_SRV_SLEEP), 1, __ATOMIC_SEQ_CST);
		tail = __atomic_load_n(RU64(VGPU_RING_OFF_REQ_TAIL), __ATOMIC_SEQ_CST);
		if (tail - head < n) {
			struct timespec dl;
			clock_gettime(CLOCK_REALTIME, &dl);
			dl.tv_sec += 1;
			while (srv_bells == seen && pthread_cond_timedwait(&bell_cv, &bell_mu, &dl) == 0)
				;
		}
		__atomic_store_n(RU32(VGPU_RING_OFF_SRV_SLEEP), 0, __ATOMIC_SEQ_CST);
		pthread_mutex_unlock(&bell_mu);
		spins = 0;
	}
}

static void ring_copy_out(uint8_t *dst, uint64_t pos, uint64_t n)
{
	const uint8_t *req = ring_mem + VGPU_RING_HEADER_SIZE;
	for (uint64_t i = 0; i < n; i++)
		dst[i] = req[(pos + i) % ring_bytes];
}

/* Writes a reply on the completion ring and rings the library if it sleeps. */
static void ring_reply(const uint8_t *f, uint64_t n)
{
	uint8_t *comp = ring_mem + VGPU_RING_HEADER_SIZE + ring_bytes;
	uint64_t tail = __atomic_load_n(RU64(VGPU_RING_OFF_COMP_TAIL), __ATOMIC_RELAXED);
	while (tail + n - __atomic_load_n(RU64(VGPU_RING_OFF_COMP_HEAD), __ATOMIC_ACQUIRE) > ring_bytes)
		usleep(100); /* the library reads on; no space doorbell in the fake */
	for (uint64_t i = 0; i < n; i++)
		comp[(tail + i) % ring_bytes] = f[i];
	__atomic_store_n(RU64(VGPU_RING_OFF_COMP_TAIL), tail + n, __ATOMIC_SEQ_CST);
	uint32_t one = 1;
	if (__atomic_compare_exchange_n(RU32(VGPU_RING_OFF_CLI_SLEEP), &one, 2, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
		pthread_mutex_lock(&bell_mu);
		cli_bells++;
		pthread_cond_broadcast(&bell_cv);
		pthread_mutex_unlock(&bell_mu);
	}
}

static void *ring_server(void *arg)
{
	(void)arg;
	uint64_t head = 0;
	for (;;) {
		struct vgpu_header h;
		if (ring_broken()) {
			pthread_mutex_lock(&bell_mu);
			cli_bells++; /* wake the library's waits: they fail now */
			pthread_cond_broadcast(&bell_cv);
			pthread_mutex_unlock(&bell_mu);
			return NULL;
		}
		ring_wait_req(head, sizeof h);
		ring_copy_out((uint8_t *)&h, head, sizeof h);
		uint64_t n = vgpu_frame_len(h.payload_len, h.num_segs);
		if (h.magic != VGPU_MAGIC || n > ring_bytes) {
			fprintf(stderr, "fakedev: a malformed frame on the request ring\n");
			_exit(3);
		}
		uint8_t *f = malloc(n);
		ring_wait_req(head, n);
		ring_copy_out(f, head, n);
		head += n;
		__atomic_store_n(RU64(VGPU_RING_OFF_REQ_HEAD), head, __ATOMIC_SEQ_CST);
		__atomic_fetch_add(&ring_frames, 1, __ATOMIC_RELAXED);
		int no_reply = !!(h.flags & VGPU_FLAG_NO_REPLY);
		uint8_t *r = NULL;
		uint32_t rl = 0;
		int bad = 0, rc;
		struct vgpu_batch_reply brep;
		pthread_mutex_lock(&mu);
		if (h.flags & (VGPU_FLAG_SEGMENTS | VGPU_FLAG_MORE_SEGMENTS)) {
			rc = 0; /* the backend refuses segments on the ring */
			if (!no_reply) {
				rl = VGPU_HEADER_SIZE;
				r = calloc(1, rl);
				((struct vgpu_header *)r)->status = 1; /* CUDA_ERROR_INVALID_VALUE */
			}
		} else if (h.opcode == VGPU_OP_BATCH) {
			rc = do_batch(f, no_reply, &brep, &bad);
			if (!rc && !no_reply) {
				rl = VGPU_HEADER_SIZE + sizeof brep;
				r = calloc(1, rl);
				((struct vgpu_header *)r)->payload_len = sizeof brep;
				memcpy(r + VGPU_HEADER_SIZE, &brep, sizeof brep);
			}
		} else if (h.opcode == VGPU_OP_BATCH_SYNC && !no_reply) {
			rc = do_batch_sync(f, &r, &rl, &bad);
		} else {
			rc = do_request(f, NULL, 0, no_reply, &r, &rl, &bad);
		}
		pthread_mutex_unlock(&mu);
		__atomic_store_n(RU64(VGPU_RING_OFF_REQ_TAKEN), head, __ATOMIC_SEQ_CST);
		if (bad || rc) {
			fprintf(stderr, "fakedev: a ring frame (op %#x) failed\n", h.opcode);
			_exit(3);
		}
		if (r) {
			struct vgpu_header *rh = (void *)r;
			rh->magic = VGPU_MAGIC;
			rh->major = VGPU_PROTO_MAJOR;
			rh->minor = VGPU_PROTO_MINOR;
			rh->opcode = h.opcode;
			rh->flags = (rh->flags & VGPU_FLAG_OUTPUT) | VGPU_FLAG_REPLY;
			rh->request_id = h.request_id;
			ring_reply(r, rl);
			free(r);
		}
		free(f);
	}
	return NULL;
}

static void ring_stats(void)
{
	fprintf(stderr, "fakedev: %llu frames on the ring, %llu calls on the stream, %llu doorbells to the backend, %llu to the library\n",
		(unsigned long long)ring_frames, (unsigned long long)stream_calls, (unsigned long long)srv_bells,
		(unsigned long long)cli_bells);
}

static int fake_ring_setup(struct vgpu_ring_setup *a)
{
	const char *on = getenv("FAKEDEV_RING");
	if (!on || (strcmp(on, "1") && strcmp(on, "broken")))
		return -ENOTTY; /* an older vgpu.ko */
	ring_broken_mode = !strcmp(on, "broken");
	if (a->flags || a->pad)
		return -EINVAL;
	if (ring_mem)
		return -EBUSY;
	uint64_t n = a->ring_bytes ? a->ring_bytes : VGPU_RING_DEFAULT_BYTES;
	if (n < VGPU_RING_MIN_BYTES || n > VGPU_RING_MAX_BYTES || (n & (n - 1)))
		return -EINVAL;
	size_t len = VGPU_RING_HEADER_SIZE + 2 * n;
	ring_mfd = memfd_create("fakedev-ring", MFD_CLOEXEC);
	if (ring_mfd < 0 || ftruncate(ring_mfd, (off_t)len) != 0)
		return -ENOMEM;
	static void *(*real)(void *, size_t, int, int, int, off_t);
	if (!real)
		real = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
	void *m = real(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, ring_mfd, 0);
	if (m == MAP_FAILED)
		return -ENOMEM;
	ring_mem = m;
	ring_bytes = n;
	*RU32(VGPU_RING_OFF_MAGIC) = VGPU_RING_MAGIC;
	*RU32(VGPU_RING_OFF_MAGIC + 4) = VGPU_RING_VERSION;
	*RU64(VGPU_RING_OFF_MAGIC + 8) = n;
	pthread_t t;
	if (pthread_create(&t, NULL, ring_server, NULL) != 0)
		return -ENOMEM;
	pthread_detach(t);
	atexit(ring_stats);
	a->ring_bytes = n;
	a->mmap_offset = VGPU_RING_MMAP_OFFSET;
	a->map_len = len;
	a->status = 0;
	return 0;
}

static int fake_ring_wait(struct vgpu_ring_wait *w)
{
	if (!ring_mem)
		return -ENXIO;
	if (w->pad)
		return -EINVAL;
	if (ring_broken())
		return -EPIPE;
	pthread_mutex_lock(&bell_mu);
	if (w->timeout_ms && cli_bells == w->seen) {
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += w->timeout_ms / 1000;
		dl.tv_nsec += (long)(w->timeout_ms % 1000) * 1000000;
		if (dl.tv_nsec >= 1000000000) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000;
		}
		while (cli_bells == w->seen && pthread_cond_timedwait(&bell_cv, &bell_mu, &dl) == 0)
			;
	}
	w->seen = cli_bells;
	pthread_mutex_unlock(&bell_mu);
	return 0;
}

/* ---- interposed libc calls ---- */

static const char *fake_path(void)
{
	const char *p = getenv("FAKEDEV_PATH");
	return p && *p ? p : "/dev/vgpu-fake";
}

int open(const char *path, int flags, ...)
{
	static int (*real)(const char *, int, ...);
	if (!real)
		real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
	va_list ap;
	va_start(ap, flags);
	int mode = (flags & O_CREAT) ? va_arg(ap, int) : 0;
	va_end(ap);
	if (!strcmp(path, fake_path())) {
		const char *sock = getenv("FAKEDEV_SOCK");
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		if (!sock || strlen(sock) >= sizeof sa.sun_path) {
			errno = ENOENT;
			return -1;
		}
		strcpy(sa.sun_path, sock);
		int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof sa)) {
			if (s >= 0)
				close(s);
			errno = ENODEV;
			return -1;
		}
		fake_fd = s;
		return s;
	}
	return real(path, flags, mode);
}

int ioctl(int fd, unsigned long req, ...)
{
	static int (*real)(int, unsigned long, ...);
	if (!real)
		real = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
	va_list ap;
	va_start(ap, req);
	void *arg = va_arg(ap, void *);
	va_end(ap);
	if (fd != fake_fd || fd < 0)
		return real(fd, req, arg);
	int rc;
	switch (req) {
	case VGPU_IOC_CALL:
		rc = fake_call(arg, 0);
		break;
	case VGPU_IOC_SUBMIT:
		rc = fake_call(arg, 1);
		break;
	case VGPU_IOC_RECV:
		rc = fake_recv(arg);
		break;
	case VGPU_IOC_RING_SETUP:
		rc = fake_ring_setup(arg);
		break;
	case VGPU_IOC_RING_BELL: {
		__u32 b = *(__u32 *)arg;
		if (b > VGPU_RING_BELL_SPACE) {
			rc = -EINVAL;
			break;
		}
		if (!ring_mem) {
			rc = -ENXIO;
			break;
		}
		if (ring_broken()) {
			rc = -EPIPE;
			break;
		}
		pthread_mutex_lock(&bell_mu);
		srv_bells++;
		pthread_cond_broadcast(&bell_cv);
		pthread_mutex_unlock(&bell_mu);
		rc = 0;
		break;
	}
	case VGPU_IOC_RING_WAIT:
		rc = fake_ring_wait(arg);
		break;
	case VGPU_IOC_INFO: {
		struct vgpu_info *i = arg;
		memset(i, 0, sizeof *i);
		i->uapi_version = VGPU_UAPI_VERSION;
		i->max_segments = 1024; /* small: makes the library chunk copies */
		i->max_frame = 16 << 20;
		i->local_port = 1023;
		i->session_id = 1;
		rc = 0;
		break;
	}
	case VGPU_IOC_REGISTER: {
		struct vgpu_register *r = arg;
		if (!r->addr || !r->len || (r->flags & ~3u)) {
			rc = -EINVAL;
			break;
		}
		struct region *g = calloc(1, sizeof *g);
		pthread_mutex_lock(&rmu);
		g->id = region_ids++;
		g->addr = (uint8_t *)(uintptr_t)r->addr;
		g->len = r->len;
		g->next = regions;
		regions = g;
		pthread_mutex_unlock(&rmu);
		r->region = g->id;
		r->dev_ptr = 0; /* no zero-copy through the fake */
		rc = 0;
		break;
	}
	case VGPU_IOC_UNREGISTER: {
		__u64 id = *(__u64 *)arg;
		rc = -ENOENT;
		pthread_mutex_lock(&rmu);
		for (struct region **pp = &regions; *pp; pp = &(*pp)->next)
			if ((*pp)->id == id) {
				struct region *g = *pp;
				*pp = g->next;
				free(g);
				rc = 0;
				break;
			}
		pthread_mutex_unlock(&rmu);
		break;
	}
	default:
		rc = -ENOTTY;
	}
	if (rc) {
		errno = -rc;
		return -1;
	}
	return 0;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	static void *(*real)(void *, size_t, int, int, int, off_t);
	if (!real)
		real = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
	if (fd >= 0 && fd == fake_fd && off == (off_t)VGPU_RING_MMAP_OFFSET) {
		if (!ring_mem || len != VGPU_RING_HEADER_SIZE + 2 * ring_bytes || !(flags & MAP_SHARED)) {
			errno = ring_mem ? EINVAL : ENXIO;
			return MAP_FAILED;
		}
		return real(addr, len, prot, MAP_SHARED, ring_mfd, 0);
	}
	if (fd >= 0 && fd == fake_fd)
		return real(addr, len, prot, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	return real(addr, len, prot, flags, fd, off);
}
