/*
 * transport.c - the one connection of a process to the host backend.
 *
 * Primer. Every call is one protocol frame (protocol/vgpu_protocol.h): a
 * 32-byte header, a payload, and (guest mode only, appended by the kernel
 * driver) guest-physical segments. The first frame on a connection is
 * HELLO (role library); its reply gives the limits (payload size, segments,
 * batch size) this file obeys.
 *
 *  - guest mode (default; VGPU_DEVICE overrides /dev/vgpu): VGPU_IOC_CALL
 *    per synchronous call; user buffers are named as struct vgpu_buf and
 *    the driver appends their segments; the payload names them with
 *    BufRef{Kind=SEGMENTS, Index=i}. A buffer inside a range registered with
 *    VGPU_IOC_REGISTER is named BufRef{Kind=REGION} instead (no pinning per
 *    call, and such a call may be batched). Notifications come from
 *    VGPU_IOC_RECV on a library thread. When the backend and vgpu.ko offer
 *    them (VGPU_FEATURE_SHM_RING, VGPU_IOC_RING_SETUP; VGPU_RING=0 turns
 *    them off), calls without user buffers (most synchronous calls,
 *    batches, host-function completions) go on rings in guest RAM instead
 *    (ring.c, the same rings as host mode's, read by the same reader
 *    thread); calls with buffers stay on VGPU_IOC_CALL, each sent only once
 *    the backend took every frame written to the ring before it
 *    (stream_fence), so both paths keep the process's call order.
 *  - host mode (VGPU_TRANSPORT=unix:PATH): a unix stream socket to
 *    `vgpu serve --unix PATH`; data travels inline (BufRef{Kind=INLINE}:
 *    H2D bytes in the request tail, D2H bytes as the reply payload). A
 *    reader thread matches replies to waiting callers by request id and
 *    hands notifications to vgpu_notify. Pinned memory is shared instead
 *    when the backend offers VGPU_FEATURE_HOST_SHARE (state.c): a sealed
 *    memfd, sent beside a HOST_SHARE frame (SCM_RIGHTS), mapped by the
 *    backend at a pseudo guest-physical range the library chose; the
 *    library then registers it (GUEST_REGISTER with its one segment) and
 *    names it BufRef{Kind=REGION} as guest mode does. After HELLO, when
 *    the backend offers VGPU_FEATURE_SHM_RING, the connection moves onto
 *    shared-memory rings (ring.c; RING_SETUP): frames go on the request
 *    ring, replies and notifications come on the completion ring, fds go
 *    on the socket in carriers; the reader thread starts only then, and a
 *    caller spins briefly on its reply, reading the completion ring itself
 *    while it does, before it sleeps and leaves it to the reader thread.
 *
 * Asynchronous calls (launches, memsets, async copies from pinned memory,
 * event records, ...) are queued and sent as one BATCH frame before the
 * next synchronous call, or when the batch is full. The batch's first error
 * is kept and returned at the next synchronizing call (CUDA semantics).
 * A synchronous call made while calls are queued carries them (BATCH_SYNC,
 * when the backend offers VGPU_FEATURE_BATCH_SYNC; VGPU_BATCH_SYNC=0 turns
 * it off): one frame, the queued calls then the call, and one reply, the
 * BatchSyncReply (how far the queued calls got; their first error is kept
 * as a batch's is) followed by the call's own reply frame. A call with
 * buffers the guest kernel names (segments) cannot ride and goes after its
 * batch as before; so does a call the backend did not run (ran == 0: a host
 * function is outstanding, whose completion may be behind the frame).
 * After a synchronous call the backend is idle: the first batch is sent at
 * VGPU_BATCH_FIRST calls and each next one at twice as many, up to HELLO's
 * max_batch, so the backend starts on a burst while the library queues the
 * rest (with one batch per burst, the library's time per call and the
 * backend's added up: H200, 1000 launches a burst, 6.9 us a launch against
 * the backend's 5.3). VGPU_BATCH_FIRST is 1 in host mode, where replies
 * and notifications come back in one order: the first call goes at once,
 * and the GPU runs it while the program makes its next call (a launch and
 * a synchronize: the synchronize waits for less of the kernel; carried
 * together in one BATCH_SYNC, the driver's part grew from 9.6-10.3 us to
 * 13.1, H100 2026-11-28). In a guest it is 32: a batch's error comes on
 * the notification queue, beside the replies (rings' too), and the
 * synchronizing call carries what is queued (BATCH_SYNC) to report it in
 * order.
 *
 * Device output: where the backend runs this process's GPU work in a host
 * process of its own, what the device prints there (kernel printf, assert
 * messages) comes back as NOTIFY_OUTPUT frames before the reply of the call
 * that synchronised (VGPU_FEATURE_DEVICE_OUTPUT; VGPU_DEVICE_OUTPUT=0 turns
 * it off). They are written with stdio to this process's stdout or stderr,
 * as the driver of a native program writes them. Host mode reads them on
 * the reply stream, so they are written before the reply is handed over;
 * guest mode reads them on the driver's notification queue (another
 * thread), so a reply marked VGPU_FLAG_OUTPUT waits until the frame that
 * ends the flush before it (VGPU_OUTPUT_FINAL, the reply's request id) has
 * been written.
 *
 * Failure of the connection is never fatal to the process: calls return
 * CUDA_ERROR_DEVICE_UNAVAILABLE (46) or CUDA_ERROR_NOT_INITIALIZED (3).
 *
 * Trust: replies are checked (magic, version, request id, lengths) before
 * use; a malformed reply marks the connection broken.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
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

#include "vgpu_internal.h"
#include "core.h"
#include "uapi/vgpu.h"

#define E_UNAVAILABLE 46

static pthread_mutex_t init_mu = PTHREAD_MUTEX_INITIALIZER;
static int init_state; /* 0 untried, 1 ok, else the CUresult of the failure */
static int host_mode;
static int fd = -1;
static struct vgpu_hello_reply hello;
static uint32_t max_segments = 1024;
/* Guest mode: the largest buffer vgpu.ko pins for one call (its max_pin_mb). */
static uint64_t pin_max = 4096ull << 20;
static volatile int broken;
static uint64_t next_id = 1;

/* host mode: writer lock, reader thread, waiters */
struct waiter {
	uint64_t id;
	int done;
	int err; /* transport error (CUresult) */
	uint8_t *frame; /* malloc'd reply frame */
	uint32_t frame_len;
	uint64_t t_done; /* VGPU_STATS: when the reader handed the reply over */
	struct waiter *next;
};
static pthread_mutex_t write_mu = PTHREAD_MUTEX_INITIALIZER;
/* Shared-memory rings (ring.c), once RING_SETUP was accepted: frames go
 * there instead of the socket. The reader thread starts after HELLO and
 * RING_SETUP; until then a caller reads its own reply from the socket. */
static struct vgpu_ring *ring;
static int reader_running;
static uint64_t wait_spin_ns;
static pthread_mutex_t pend_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pend_cv = PTHREAD_COND_INITIALIZER;
static struct waiter *pending;
/* On rings, a caller spinning on its reply reads the completion ring
 * itself (VGPU_RING_OWN_READ=0 turns it off): no hand-over from the reader
 * thread, whose wake-up and the caller's then cost 1-2 us a call (H100,
 * 2026-11-28). rd_mu makes one reader of the ring at a time; while
 * callers_reading > 0 the reader thread leaves the ring to them (it parks
 * or spins aside: reader_park). */
static pthread_mutex_t rd_mu = PTHREAD_MUTEX_INITIALIZER;
static int callers_reading;
static int own_read = 1;
/* Where the reader thread waits while callers read (VGPU_RING_READER_PARK):
 * 1 parks it on aside_cv, so it does not spin beside the callers on a core
 * they may share; a caller that stops spinning without its reply (it
 * sleeps next and needs the reader) wakes it, and it looks again every
 * READER_PARK_NS (callers that got their replies leave without a system
 * call: a notification that comes after them waits that long at most).
 * 0 spins aside. */
static int reader_park = 1;
static pthread_mutex_t aside_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t aside_cv = PTHREAD_COND_INITIALIZER;
#define READER_PARK_NS 200000ull

/* Calls whose frame (or payload) fits this many bytes build it on the
 * stack: most synchronous calls, two mallocs and frees less (callgrind,
 * a 4-byte D2H in host mode: 2,080 -> 1,964 instructions in the caller). */
#define SMALL_FRAME 512

/* batch */
#define VGPU_BATCH_FIRST_GUEST 32u
static pthread_mutex_t batch_mu = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *batch_buf; /* BatchReq + sub-frames */
static size_t batch_len, batch_cap;
static uint32_t batch_count;
static uint32_t batch_limit; /* this batch is sent at this many calls (0: batch_first) */
static uint32_t batch_first; /* VGPU_BATCH_FIRST; 0: first_batch() decides */
static int deferred_err;
/* Guest mode with BATCH_SYNC: vgpu_sync_point() was called and the next
 * vgpu_call of this thread is the synchronizing call (see there). */
static __thread int sync_next;

int vgpu_host_mode(void) { return host_mode; }

int vgpu_host_share_ok(void)
{
	return host_mode && !broken && (hello.features & VGPU_FEATURE_HOST_SHARE);
}

/* vgpuSetOption(0x100): carry copy data inline even in guest mode. */
static int force_inline;
void vgpu_set_force_inline(int on) { __atomic_store_n(&force_inline, on, __ATOMIC_RELAXED); }
static int inline_copies(void) { return host_mode || __atomic_load_n(&force_inline, __ATOMIC_RELAXED); }
int vgpu_inline_copies(void) { return inline_copies(); }
int vgpu_regions_usable(void) { return !__atomic_load_n(&force_inline, __ATOMIC_RELAXED); }
const struct vgpu_hello_reply *vgpu_hello(void) { return &hello; }
int vgpu_dev_fd(void) { return host_mode ? -1 : fd; }

static uint64_t new_id(void) { return __atomic_fetch_add(&next_id, 1, __ATOMIC_RELAXED); }

/* The clock for VGPU_STATS's per-call times, read only while stats are on:
 * on some hosts a clock read costs ~0.1 us (a VM's clock source), and a
 * call made several. */
static uint64_t stat_t0(void) { return vgpu_stats_enabled() ? vgpu_now_ns() : 0; }
static uint64_t stat_since(uint64_t t0) { return vgpu_stats_enabled() && t0 ? vgpu_now_ns() - t0 : 0; }

static void put_header(struct vgpu_header *h, uint16_t op, uint64_t id, uint32_t plen, uint32_t flags)
{
	memset(h, 0, sizeof *h);
	h->magic = VGPU_MAGIC;
	h->major = VGPU_PROTO_MAJOR;
	h->minor = VGPU_PROTO_MINOR;
	h->opcode = op;
	h->flags = flags;
	h->request_id = id;
	h->payload_len = plen;
}

/* ---------------- device output ---------------- */

/* Guest mode: request ids whose device output has been written (their
 * FINAL frame seen), the latest ones. */
#define OUT_DONE_RING 64
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t out_cv = PTHREAD_COND_INITIALIZER;
static uint64_t out_done[OUT_DONE_RING];
static unsigned out_next;

void vgpu_output_notify(const struct vgpu_header *h, const void *payload)
{
	struct vgpu_output_notify n;
	if (h->payload_len < sizeof n)
		return;
	memcpy(&n, payload, sizeof n);
	if (n.len > h->payload_len - sizeof n || (n.stream != VGPU_OUTPUT_STDOUT && n.stream != VGPU_OUTPUT_STDERR)) {
		VWARN("malformed device output notification (stream %u, %u bytes) dropped", n.stream, n.len);
	} else if (n.len) {
		FILE *to = n.stream == VGPU_OUTPUT_STDERR ? stderr : stdout;
		fwrite((const uint8_t *)payload + sizeof n, 1, n.len, to);
	}
	if ((n.flags & VGPU_OUTPUT_FINAL) && h->request_id) {
		pthread_mutex_lock(&out_mu);
		out_done[out_next++ % OUT_DONE_RING] = h->request_id;
		pthread_cond_broadcast(&out_cv);
		pthread_mutex_unlock(&out_mu);
	}
}

static int output_done(uint64_t id)
{
	for (unsigned i = 0; i < OUT_DONE_RING; i++)
		if (out_done[i] == id)
			return 1;
	return 0;
}

/* Guest mode, after the reply to request id marked VGPU_FLAG_OUTPUT: wait
 * until the notification thread has written the output that preceded it
 * (its FINAL frame carries id). A lost notification (the driver's queue
 * overflowed) costs a timeout, not a hang. */
static void wait_output(uint64_t id)
{
	pthread_mutex_lock(&out_mu);
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 10;
	while (!output_done(id)) {
		if (pthread_cond_timedwait(&out_cv, &out_mu, &dl) == ETIMEDOUT) {
			VWARN("device output before the reply to request %llu did not arrive within 10 s; going on",
			      (unsigned long long)id);
			break;
		}
	}
	pthread_mutex_unlock(&out_mu);
}

static int check_reply(const uint8_t *f, uint32_t len, uint64_t id, uint16_t op)
{
	const struct vgpu_header *h = (const void *)f;
	if (len < VGPU_HEADER_SIZE || h->magic != VGPU_MAGIC || h->major != VGPU_PROTO_MAJOR ||
	    !(h->flags & VGPU_FLAG_REPLY) || h->request_id != id || h->opcode != op ||
	    (uint64_t)VGPU_HEADER_SIZE + h->payload_len > len) {
		VERR("malformed reply to %s (len %u)", vgpu_op_name(op), len);
		broken = 1;
		return E_UNAVAILABLE;
	}
	return 0;
}

/* ---------------- host mode ---------------- */

static int write_all(int s, const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n) {
		ssize_t w = send(s, b, n, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Writes p with nfds fds attached to its first byte (SCM_RIGHTS), then the
 * rest. */
static int write_with_fds(int s, const void *p, size_t n, const int *fds, int nfds)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int) * VGPU_RING_FDS)];
	} cm;
	memset(&cm, 0, sizeof cm);
	struct iovec iov = {.iov_base = (void *)p, .iov_len = n};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
			    .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
	memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	ssize_t w;
	do
		w = sendmsg(s, &mh, MSG_NOSIGNAL);
	while (w < 0 && errno == EINTR);
	if (w < 0)
		return -1;
	return write_all(s, (const uint8_t *)p + w, n - (size_t)w);
}

static int write_with_fd(int s, const void *p, size_t n, int sfd) { return write_with_fds(s, p, n, &sfd, 1); }

/* Host mode: writes one frame's pieces (under write_mu) on the ring or the
 * socket; sfd, if >= 0, goes beside it: on the socket with its first byte,
 * on rings in a carrier naming the frame's ring position, sent first. */
static int host_write_locked(const void *a, size_t alen, const void *b, size_t blen, size_t pad, int sfd)
{
	static const uint8_t zeros[8];
	if (ring) {
		if (sfd >= 0) {
			uint64_t pos = vgpu_ring_write_pos(ring);
			if (write_with_fd(fd, &pos, sizeof pos, sfd) != 0)
				return -1;
			vgpu_ring_note_carrier(ring);
		}
		/* one publication per frame: the backend never wakes to half of it */
		if (vgpu_ring_put(ring, a, alen, !blen && !pad) != 0 || (blen && vgpu_ring_put(ring, b, blen, !pad) != 0) ||
		    (pad && vgpu_ring_put(ring, zeros, pad, 1) != 0))
			return -1;
		return 0;
	}
	int rc = sfd >= 0 ? write_with_fd(fd, a, alen, sfd) : write_all(fd, a, alen);
	if (!rc && blen)
		rc = write_all(fd, b, blen);
	if (!rc && pad)
		rc = write_all(fd, zeros, pad);
	return rc;
}

static int read_all(int s, void *p, size_t n)
{
	uint8_t *b = p;
	while (n) {
		ssize_t r = recv(s, b, n, 0);
		if (r == 0)
			return -1;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/* Waiters: whoever completes one (a reply, a failure) removes it from the
 * list under pend_mu and stores done last, never touching it after: a
 * caller that sees done while spinning returns without taking pend_mu
 * (and w, on its stack, goes away). */
static void unlink_waiter_locked(struct waiter *w)
{
	for (struct waiter **pp = &pending; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			__atomic_store_n(pp, w->next, __ATOMIC_RELAXED); /* own_ring_read peeks at pending */
			break;
		}
}

static void fail_all_waiters(void)
{
	pthread_mutex_lock(&pend_mu);
	broken = 1;
	struct waiter *next;
	for (struct waiter *w = pending; w; w = next) {
		next = w->next;
		w->err = E_UNAVAILABLE;
		__atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&pending, NULL, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&pend_cv);
	pthread_mutex_unlock(&pend_mu);
}

/* Reads n bytes of the host's frames: from the rings or the socket. */
static int host_read(void *p, size_t n)
{
	return ring ? vgpu_ring_read(ring, p, n) : read_all(fd, p, n);
}

/* Reads one frame from the host; *f is malloc'd. */
static int read_frame(uint8_t **f, uint64_t *flen)
{
	struct vgpu_header h;
	if (host_read(&h, sizeof h) != 0)
		return -1;
	if (h.magic != VGPU_MAGIC || h.major != VGPU_PROTO_MAJOR || h.payload_len > (64u << 20) || h.num_segs != 0) {
		VERR("host sent a malformed frame; closing the connection");
		return -1;
	}
	uint64_t n = vgpu_frame_len(h.payload_len, 0);
	uint8_t *b = malloc(n);
	if (!b)
		return -1;
	memcpy(b, &h, sizeof h);
	if (host_read(b + sizeof h, n - sizeof h) != 0) {
		free(b);
		return -1;
	}
	*f = b;
	*flen = n;
	return 0;
}

/* Hands a frame to its waiter (or vgpu_notify); takes f. */
static void dispatch_frame(uint8_t *f, uint64_t flen)
{
	const struct vgpu_header *h = (const void *)f;
	if (h->flags & VGPU_FLAG_NOTIFY) {
		vgpu_notify(h, f + VGPU_HEADER_SIZE);
		free(f);
		return;
	}
	pthread_mutex_lock(&pend_mu);
	struct waiter *w;
	for (w = pending; w; w = w->next)
		if (w->id == h->request_id && !w->done)
			break;
	if (w) {
		unlink_waiter_locked(w);
		w->frame = f;
		w->frame_len = (uint32_t)flen;
		if (vgpu_stats_enabled())
			w->t_done = vgpu_now_ns();
		__atomic_store_n(&w->done, 1, __ATOMIC_RELEASE); /* the last touch of w */
		pthread_cond_broadcast(&pend_cv);
	} else {
		VDEBUG("reply to unknown request %llu (%s) dropped", (unsigned long long)h->request_id,
		       vgpu_op_name(h->opcode));
		free(f);
	}
	pthread_mutex_unlock(&pend_mu);
}

/* The reader thread's next frame from the rings: 1 with *f, 0 when the
 * ring was left to a caller reading it, -1 when the connection failed.
 * It waits (spins, then sleeps) without rd_mu, so a caller can always
 * take the ring over. */
static int reader_ring_frame(uint8_t **f, uint64_t *flen)
{
	if (reader_park && __atomic_load_n(&callers_reading, __ATOMIC_ACQUIRE)) {
		pthread_mutex_lock(&aside_mu);
		while (__atomic_load_n(&callers_reading, __ATOMIC_ACQUIRE) && !broken) {
			struct timespec dl;
			clock_gettime(CLOCK_REALTIME, &dl);
			dl.tv_nsec += (long)READER_PARK_NS;
			if (dl.tv_nsec >= 1000000000L) {
				dl.tv_sec++;
				dl.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&aside_cv, &aside_mu, &dl); /* and look again */
		}
		pthread_mutex_unlock(&aside_mu);
	}
	while (__atomic_load_n(&callers_reading, __ATOMIC_ACQUIRE))
		vgpu_cpu_relax();
	if (broken)
		return -1;
	int rc = vgpu_ring_wait_readable(ring, &callers_reading);
	if (rc <= 0)
		return rc;
	if (pthread_mutex_trylock(&rd_mu) != 0)
		return 0; /* a caller is reading */
	int p = broken ? -1 : vgpu_ring_pending(ring); /* the check, as the one reader */
	rc = p <= 0 ? p : read_frame(f, flen) == 0 ? 1 : -1;
	pthread_mutex_unlock(&rd_mu);
	if (p < 0 && !broken)
		VERR("the backend corrupted the completion ring (tail out of range)");
	return rc;
}

static void *reader_main(void *arg)
{
	(void)arg;
	for (;;) {
		uint8_t *f;
		uint64_t flen;
		if (ring) {
			int rc = reader_ring_frame(&f, &flen);
			if (rc < 0)
				break;
			if (rc == 0)
				continue;
		} else if (read_frame(&f, &flen) != 0) {
			break;
		}
		dispatch_frame(f, flen);
	}
	if (!broken)
		VERR("connection to the vgpu backend lost");
	fail_all_waiters();
	return NULL;
}

/* Sends iov pieces as one frame (host mode) after adding w to the waiters;
 * sfd, if >= 0, travels beside the frame's first byte. A failed write
 * marks w done with a transport error. */
static void host_send(struct waiter *w, const void *a, size_t alen, const void *b, size_t blen, int sfd)
{
	pthread_mutex_lock(&pend_mu);
	w->next = pending;
	__atomic_store_n(&pending, w, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&pend_mu);

	size_t pad = (8 - ((alen + blen) & 7)) & 7;
	pthread_mutex_lock(&write_mu);
	int rc = host_write_locked(a, alen, b, blen, pad, sfd);
	pthread_mutex_unlock(&write_mu);
	if (rc) {
		pthread_mutex_lock(&pend_mu);
		if (!w->done) { /* else failed already (fail_all_waiters) */
			unlink_waiter_locked(w);
			w->err = E_UNAVAILABLE;
			__atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
		}
		pthread_mutex_unlock(&pend_mu);
	}
}

/* A caller on rings spins up to wait_spin_ns past t0 reading the
 * completion ring itself, dispatching what it reads (others' replies and
 * notifications too), until its own reply came (see rd_mu). */
static void own_ring_read(struct waiter *w, uint64_t t0)
{
	__atomic_add_fetch(&callers_reading, 1, __ATOMIC_ACQ_REL);
	/* The clock is read every 32 turns: a read can cost ~0.1 us. */
	for (unsigned i = 1; !__atomic_load_n(&w->done, __ATOMIC_ACQUIRE) && (i % 32 || vgpu_now_ns() - t0 < wait_spin_ns); i++) {
		if (!vgpu_ring_changed(ring) || pthread_mutex_trylock(&rd_mu) != 0) {
			vgpu_cpu_relax();
			continue;
		}
		int failed = 0, p;
		while (!broken && !__atomic_load_n(&w->done, __ATOMIC_ACQUIRE) && (p = vgpu_ring_pending(ring)) != 0) {
			uint8_t *f;
			uint64_t flen;
			if (p < 0 || read_frame(&f, &flen) != 0) {
				failed = 1;
				break;
			}
			if (vgpu_stats_enabled() && ((const struct vgpu_header *)f)->request_id == w->id)
				VGPU_WAITSTAT_ADD(own, 1);
			dispatch_frame(f, flen);
		}
		pthread_mutex_unlock(&rd_mu);
		if (failed) {
			VERR("connection to the vgpu backend lost");
			fail_all_waiters();
		}
	}
	int left = __atomic_sub_fetch(&callers_reading, 1, __ATOMIC_ACQ_REL);
	if (reader_park && (!__atomic_load_n(&w->done, __ATOMIC_ACQUIRE) ||
			    (!left && __atomic_load_n(&pending, __ATOMIC_RELAXED)))) {
		/* The reply is late (this caller sleeps next), or the last
		 * caller reading leaves others waiting (one that gave up
		 * while it read): they need the reader thread, which may be
		 * parked. */
		pthread_mutex_lock(&aside_mu);
		pthread_cond_broadcast(&aside_cv);
		pthread_mutex_unlock(&aside_mu);
	}
}

/* Waits for w's reply (whoever completes w removes it from the waiters).
 * On rings it spins a little first, reading the ring itself
 * (own_ring_read), so the reply of a short call reaches it without a
 * hand-over or a sleep; then it sleeps on pend_cv and the reader thread
 * hands the reply over. Before the reader thread runs (HELLO), the caller
 * reads the socket itself. */
static int host_wait(struct waiter *w, uint8_t **reply, uint32_t *reply_len)
{
	uint64_t t0 = 0; /* on rings: when the wait began (VGPU_STATS) */
	if (!__atomic_load_n(&reader_running, __ATOMIC_ACQUIRE)) {
		while (!w->done) {
			uint8_t *f;
			uint64_t flen;
			if (read_frame(&f, &flen) != 0) {
				fail_all_waiters();
				break;
			}
			dispatch_frame(f, flen);
		}
	} else if (ring) {
		t0 = vgpu_now_ns();
		if (own_read && wait_spin_ns)
			own_ring_read(w, t0);
		while (!__atomic_load_n(&w->done, __ATOMIC_ACQUIRE) && vgpu_now_ns() - t0 < wait_spin_ns)
			vgpu_cpu_relax();
	}
	int slept = 0;
	if (!__atomic_load_n(&w->done, __ATOMIC_ACQUIRE)) {
		pthread_mutex_lock(&pend_mu);
		slept = !w->done;
		while (!w->done)
			pthread_cond_wait(&pend_cv, &pend_mu);
		pthread_mutex_unlock(&pend_mu);
	}
	if (t0 && w->t_done && vgpu_stats_enabled()) {
		VGPU_WAITSTAT_ADD(waits, 1);
		VGPU_WAITSTAT_ADD(slept, (uint64_t)slept);
		VGPU_WAITSTAT_ADD(ns_reply, w->t_done > t0 ? w->t_done - t0 : 0);
		VGPU_WAITSTAT_ADD(ns_handoff, vgpu_now_ns() - w->t_done);
	}
	if (w->err) {
		free(w->frame);
		return w->err;
	}
	*reply = w->frame;
	*reply_len = w->frame_len;
	return 0;
}

/* Sends iov pieces as one frame and waits for the reply (host mode); sfd,
 * if >= 0, travels beside the frame's first byte. */
static int host_roundtrip(uint64_t id, const void *a, size_t alen, const void *b, size_t blen, int sfd,
			  uint8_t **reply, uint32_t *reply_len)
{
	struct waiter w = {.id = id};
	if (broken)
		return E_UNAVAILABLE;
	host_send(&w, a, alen, b, blen, sfd);
	return host_wait(&w, reply, reply_len);
}

static int host_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof sa.sun_path) {
		VERR("VGPU_TRANSPORT socket path too long");
		return VGPU_E_NOT_INITIALIZED;
	}
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		VERR("cannot connect to the vgpu backend at %s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		fd = -1;
		return E_UNAVAILABLE;
	}
	return 0;
}

/* Starts the reader thread (after HELLO and RING_SETUP). */
static int start_reader(void)
{
	pthread_t t;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	int rc = pthread_create(&t, &at, reader_main, NULL);
	pthread_attr_destroy(&at);
	if (rc != 0) {
		VERR("cannot start the reader thread: %s", strerror(rc));
		broken = 1;
		return VGPU_E_OUT_OF_MEMORY;
	}
	__atomic_store_n(&reader_running, 1, __ATOMIC_RELEASE);
	return 0;
}

/* How a caller waits for its reply on rings: VGPU_RING_SPIN_US,
 * VGPU_RING_OWN_READ. */
static void ring_wait_config(void)
{
	const char *sp = getenv("VGPU_RING_SPIN_US");
	wait_spin_ns = sp && *sp ? strtoull(sp, NULL, 10) * 1000 : vgpu_ring_default_spin_ns();
	const char *o = getenv("VGPU_RING_OWN_READ");
	own_read = !(o && !strcmp(o, "0"));
	const char *pk = getenv("VGPU_RING_READER_PARK");
	reader_park = !(pk && !strcmp(pk, "0"));
}

/* Host mode, after HELLO offered VGPU_FEATURE_SHM_RING: moves the
 * connection onto shared-memory rings (RING_SETUP with the memfd and
 * eventfds). The reply comes on the ring when the backend accepts, on the
 * socket when it refuses; then the socket stays. VGPU_RING=0 keeps the
 * socket; VGPU_RING_BYTES sizes each ring. */
static void ring_start(void)
{
	const char *e = getenv("VGPU_RING");
	if ((e && !strcmp(e, "0")) || !(hello.features & VGPU_FEATURE_SHM_RING))
		return;
	uint64_t bytes = VGPU_RING_DEFAULT_BYTES;
	const char *b = getenv("VGPU_RING_BYTES");
	if (b && *b)
		bytes = strtoull(b, NULL, 0);
	ring_wait_config();
	struct vgpu_ring *r;
	int fds[VGPU_RING_FDS];
	if (vgpu_ring_create(fd, bytes, &r, fds) != 0) {
		VINFO("no shared-memory rings (%s): calls go through the socket", strerror(errno));
		return;
	}
	struct {
		struct vgpu_header h;
		struct vgpu_ring_setup_req req;
	} f;
	uint64_t id = new_id();
	put_header(&f.h, VGPU_OP_RING_SETUP, id, sizeof f.req, 0);
	memset(&f.req, 0, sizeof f.req);
	f.req.ring_bytes = bytes;
	int rc = write_with_fds(fd, &f, sizeof f, fds, VGPU_RING_FDS);
	close(fds[0]);
	if (rc) {
		vgpu_ring_destroy(r);
		broken = 1;
		return;
	}
	for (;;) {
		int pend = vgpu_ring_pending(r);
		uint8_t *rep = NULL;
		uint64_t rl = 0;
		if (pend > 0) { /* accepted: the reply is the ring's first frame */
			ring = r;
			if (read_frame(&rep, &rl) != 0 || check_reply(rep, (uint32_t)rl, id, VGPU_OP_RING_SETUP) != 0 ||
			    ((struct vgpu_header *)rep)->status != 0) {
				VERR("malformed RING_SETUP reply on the ring");
				broken = 1;
			} else {
				VINFO("on shared-memory rings of %llu bytes", (unsigned long long)bytes);
			}
			free(rep);
			return;
		}
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int pr = pend < 0 ? -1 : poll(&p, 1, 1);
		if (pr < 0 && pend >= 0 && errno == EINTR)
			continue;
		if (pr < 0) {
			VERR("shared-memory rings: %s", pend < 0 ? "the backend corrupted the completion ring" : strerror(errno));
			broken = 1;
			vgpu_ring_destroy(r);
			return;
		}
		if (!p.revents)
			continue;
		if (read_frame(&rep, &rl) != 0) {
			broken = 1;
			vgpu_ring_destroy(r);
			return;
		}
		const struct vgpu_header *h = (const void *)rep;
		if (!(h->flags & VGPU_FLAG_NOTIFY) && h->request_id == id) {
			VINFO("the backend refused shared-memory rings (error %d): calls go through the socket", h->status);
			free(rep);
			vgpu_ring_destroy(r);
			return;
		}
		dispatch_frame(rep, rl);
	}
}

/* ---------------- guest mode ---------------- */

/* Guest rings: before a frame goes on the stream (an ioctl), waits until
 * the backend took every frame written to the ring so far (the two paths
 * join one order). Without rings, nothing to wait for. */
int vgpu_stream_fence(void)
{
	if (host_mode || !ring)
		return broken ? E_UNAVAILABLE : 0;
	pthread_mutex_lock(&write_mu);
	uint64_t pos = vgpu_ring_write_pos(ring);
	pthread_mutex_unlock(&write_mu);
	return vgpu_ring_wait_taken(ring, pos, &broken) ? E_UNAVAILABLE : 0;
}

static int dev_roundtrip(const void *frame, uint32_t frame_len, struct vgpu_buf *bufs, uint32_t nbufs,
			 uint8_t **reply, uint32_t *reply_len, uint32_t reply_cap)
{
	if (broken || vgpu_stream_fence())
		return E_UNAVAILABLE;
	uint8_t *r = malloc(reply_cap);
	if (!r)
		return VGPU_E_OUT_OF_MEMORY;
	struct vgpu_call c = {
		.frame = (uintptr_t)frame,
		.frame_len = frame_len,
		.nbufs = nbufs,
		.bufs = (uintptr_t)bufs,
		.reply = (uintptr_t)r,
		.reply_cap = reply_cap,
	};
	while (ioctl(fd, VGPU_IOC_CALL, &c) != 0) {
		if (errno == EINTR)
			continue;
		int e = errno;
		free(r);
		VERR("VGPU_IOC_CALL failed: %s", strerror(e));
		if (e == E2BIG && nbufs)
			VERR("a buffer of the call is over vgpu.ko's max_pin_mb (%llu MiB, "
			     "/sys/module/vgpu/parameters/max_pin_mb) or needs more segments than the host takes",
			     (unsigned long long)(pin_max >> 20));
		/* The call's own arguments: the session goes on. */
		if (e == EMSGSIZE || e == EINVAL || e == EFAULT || e == E2BIG || e == EOVERFLOW || e == EBADMSG ||
		    e == EPERM)
			return VGPU_E_INVALID_VALUE;
		if (e == ENOMEM)
			return VGPU_E_OUT_OF_MEMORY;
		if (e == ETIMEDOUT)
			return VGPU_E_LAUNCH_FAILED;
		broken = 1;
		return E_UNAVAILABLE;
	}
	*reply = r;
	*reply_len = c.reply_len;
	return 0;
}

static int dev_open(const char *path)
{
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		VERR("cannot open %s: %s (is the vgpu guest driver loaded? for host mode set "
		     "VGPU_TRANSPORT=unix:PATH)", path, strerror(errno));
		return errno == ENOENT ? VGPU_E_NO_DEVICE : E_UNAVAILABLE;
	}
	FILE *pf = fopen("/sys/module/vgpu/parameters/max_pin_mb", "re");
	unsigned long long mb = 0;
	if (pf) {
		if (fscanf(pf, "%llu", &mb) == 1 && mb)
			pin_max = mb << 20;
		fclose(pf);
	}
	struct vgpu_info info;
	memset(&info, 0, sizeof info);
	if (ioctl(fd, VGPU_IOC_INFO, &info) == 0) {
		if (info.max_segments)
			max_segments = info.max_segments;
		VINFO("%s: session %llu, max %u segments, local port %u", path,
		      (unsigned long long)info.session_id, info.max_segments, info.local_port);
	}
	return 0;
}

/* A forked child shares the parent's session but not its rings (vgpu.ko
 * maps them VM_DONTCOPY): its calls fail instead of touching them. */
static void ring_child(void)
{
	ring = NULL;
	reader_running = 0;
	broken = 1;
}

/* Guest mode, after HELLO offered VGPU_FEATURE_SHM_RING: asks vgpu.ko for
 * rings in guest RAM (VGPU_IOC_RING_SETUP registers them with the
 * backend), maps them and moves calls without buffers onto them.
 * VGPU_RING=0 keeps the stream; VGPU_RING_BYTES sizes each ring. An older
 * vgpu.ko (ENOTTY) or a backend that refuses keeps the stream too. */
static void guest_ring_start(void)
{
	const char *e = getenv("VGPU_RING");
	if ((e && !strcmp(e, "0")) || !(hello.features & VGPU_FEATURE_SHM_RING))
		return;
	struct vgpu_ring_setup a;
	memset(&a, 0, sizeof a);
	const char *b = getenv("VGPU_RING_BYTES");
	if (b && *b)
		a.ring_bytes = strtoull(b, NULL, 0);
	int rc;
	while ((rc = ioctl(fd, VGPU_IOC_RING_SETUP, &a)) != 0 && errno == EINTR)
		;
	if (rc != 0) {
		if (errno == ENOTTY)
			VINFO("vgpu.ko has no rings (an older driver): calls go through the stream");
		else if (errno == EREMOTEIO)
			VINFO("the backend refused rings in guest RAM (error %d): calls go through the stream", a.status);
		else
			VINFO("no rings in guest RAM (%s): calls go through the stream", strerror(errno));
		return;
	}
	void *m = mmap(NULL, a.map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)a.mmap_offset);
	if (m == MAP_FAILED) {
		/* The backend's side ends when the file is closed. */
		VINFO("mapping the rings failed (%s): calls go through the stream", strerror(errno));
		return;
	}
	struct vgpu_ring *r;
	if (vgpu_ring_attach(fd, m, a.map_len, a.ring_bytes, &r) != 0) {
		munmap(m, a.map_len);
		return;
	}
	ring_wait_config();
	pthread_atfork(NULL, NULL, ring_child);
	ring = r;
	VINFO("on rings in guest RAM of %llu bytes", (unsigned long long)a.ring_bytes);
}

/* ---------------- common ---------------- */

/* Sends a request that gets no reply (FlagNoReply): host mode writes it,
 * guest mode submits it (VGPU_IOC_SUBMIT). Its errors come back as
 * NOTIFY_ERROR notifications (vgpu_notify -> vgpu_defer_error). */
static int send_frame(uint16_t op, uint64_t id, const void *payload, uint32_t len);

static int send_only(uint16_t op, uint64_t id, const void *payload, uint32_t len)
{
	uint64_t t0 = stat_t0();
	int rc = send_frame(op, id, payload, len);
	vgpu_opstat_add(op, vgpu_frame_len(len, 0), 0, stat_since(t0), 0);
	return rc;
}

/* send_only without the statistics (a call counted when it was queued). */
static int send_frame(uint16_t op, uint64_t id, const void *payload, uint32_t len)
{
	if (broken)
		return E_UNAVAILABLE;
	size_t n = vgpu_frame_len(len, 0);
	int rc = 0;
	/* Guest rings: a host function's completion goes on the stream, whose
	 * reader the backend answers it on at once, never behind the ring's
	 * frames (the call the ring's reader runs may wait for it). */
	if (host_mode || (ring && op != VGPU_OP_HOST_FUNC_DONE)) {
		/* header, payload and padding written in place: no copy */
		struct vgpu_header h;
		put_header(&h, op, id, len, VGPU_FLAG_NO_REPLY);
		pthread_mutex_lock(&write_mu);
		if (host_write_locked(&h, sizeof h, payload, len, n - sizeof h - len, -1) != 0)
			rc = E_UNAVAILABLE;
		pthread_mutex_unlock(&write_mu);
		return rc;
	}
	uint8_t *f = calloc(1, n);
	if (!f)
		return VGPU_E_OUT_OF_MEMORY;
	put_header((struct vgpu_header *)f, op, id, len, VGPU_FLAG_NO_REPLY);
	if (len)
		memcpy(f + VGPU_HEADER_SIZE, payload, len);
	struct vgpu_call c;
	memset(&c, 0, sizeof c);
	c.frame = (uintptr_t)f;
	c.frame_len = (uint32_t)n;
	while (ioctl(fd, VGPU_IOC_SUBMIT, &c) != 0) {
		if (errno == EINTR)
			continue;
		VERR("VGPU_IOC_SUBMIT failed: %s", strerror(errno));
		rc = errno == ENOMEM ? VGPU_E_OUT_OF_MEMORY : errno == EINVAL ? VGPU_E_INVALID_VALUE : E_UNAVAILABLE;
		break;
	}
	free(f);
	return rc;
}

/* One raw round trip: frame = header + payload (no segments). */
static int roundtrip(uint16_t op, uint64_t id, const void *payload_a, uint32_t alen, const void *payload_b,
		     uint32_t blen, struct vgpu_buf *bufs, uint32_t nbufs, uint32_t reply_cap,
		     uint8_t **reply, uint32_t *reply_len)
{
	uint64_t t0 = stat_t0();
	struct vgpu_header h;
	put_header(&h, op, id, alen + blen, 0);
	int rc;
	if (host_mode || (ring && !nbufs)) { /* the socket, or rings */
		size_t n = sizeof h + alen;
		uint8_t small[SMALL_FRAME]; /* a small call's frame: no malloc */
		uint8_t *a = n <= sizeof small ? small : malloc(n);
		if (!a)
			return VGPU_E_OUT_OF_MEMORY;
		memcpy(a, &h, sizeof h);
		memcpy(a + sizeof h, payload_a, alen);
		rc = host_roundtrip(id, a, n, payload_b, blen, -1, reply, reply_len);
		if (a != small)
			free(a);
	} else {
		size_t n = vgpu_frame_len(alen + blen, 0);
		uint8_t *a = calloc(1, n);
		if (!a)
			return VGPU_E_OUT_OF_MEMORY;
		memcpy(a, &h, sizeof h);
		memcpy(a + sizeof h, payload_a, alen);
		if (blen)
			memcpy(a + sizeof h + alen, payload_b, blen);
		rc = dev_roundtrip(a, (uint32_t)n, bufs, nbufs, reply, reply_len, reply_cap + 64);
		free(a);
	}
	if (!rc)
		rc = check_reply(*reply, *reply_len, id, op);
	if (rc && *reply) {
		free(*reply);
		*reply = NULL;
	}
	if (!rc && !host_mode && (((const struct vgpu_header *)*reply)->flags & VGPU_FLAG_OUTPUT))
		wait_output(id);
	uint64_t in = rc ? 0 : *reply_len;
	vgpu_opstat_add(op, (uint64_t)alen + blen + sizeof h, in, stat_since(t0), 1);
	return rc;
}

static int say_hello(void)
{
	struct vgpu_hello_req req;
	memset(&req, 0, sizeof req);
	req.major = VGPU_PROTO_MAJOR;
	req.minor = VGPU_PROTO_MINOR;
	req.role = VGPU_ROLE_LIBRARY;
	req.features = VGPU_FEATURE_BATCH | VGPU_FEATURE_HOST_FUNC | VGPU_FEATURE_MODULE_HASH |
		       VGPU_FEATURE_SHM_RING |
		       (host_mode ? VGPU_FEATURE_INLINE : VGPU_FEATURE_SEGMENTS);
	const char *bs = getenv("VGPU_BATCH_SYNC");
	if (!(bs && !strcmp(bs, "0")))
		req.features |= VGPU_FEATURE_BATCH_SYNC;
	const char *share = getenv("VGPU_HOST_SHARE");
	if (host_mode && !(share && !strcmp(share, "0")))
		req.features |= VGPU_FEATURE_HOST_SHARE;
	const char *out = getenv("VGPU_DEVICE_OUTPUT");
	if (!(out && !strcmp(out, "0")))
		req.features |= VGPU_FEATURE_DEVICE_OUTPUT;
	snprintf((char *)req.client_version, sizeof req.client_version, "vgpu-guest-lib/1");
	req.pid = (uint32_t)getpid();
	uint8_t *r = NULL;
	uint32_t rl = 0;
	uint64_t id = new_id();
	int rc = roundtrip(VGPU_OP_HELLO, id, &req, sizeof req, NULL, 0, NULL, 0, 4096, &r, &rl);
	if (rc)
		return rc;
	const struct vgpu_header *h = (const void *)r;
	if (h->status != 0) {
		VERR("backend refused HELLO: error %d", h->status);
		rc = h->status;
	} else {
		memset(&hello, 0, sizeof hello);
		memcpy(&hello, r + VGPU_HEADER_SIZE, h->payload_len < sizeof hello ? h->payload_len : sizeof hello);
		if (!hello.max_payload)
			hello.max_payload = VGPU_DEFAULT_MAX_PAYLOAD;
		if (!hello.max_batch)
			hello.max_batch = 256;
		const char *bf = getenv("VGPU_BATCH_FIRST");
		if (bf && *bf && strtoul(bf, NULL, 10) > 0)
			batch_first = (uint32_t)strtoul(bf, NULL, 10);
		if (hello.max_segments && hello.max_segments < max_segments)
			max_segments = hello.max_segments;
		VINFO("connected: backend %.32s, device kind %.16s, %u device(s), features %#llx, session %llu",
		      (const char *)hello.backend_version, (const char *)hello.device_kind, hello.device_count,
		      (unsigned long long)hello.features, (unsigned long long)hello.session_id);
	}
	free(r);
	return rc;
}

int vgpu_init(void)
{
	int st = __atomic_load_n(&init_state, __ATOMIC_ACQUIRE);
	if (st == 1)
		return broken ? E_UNAVAILABLE : 0;
	if (st != 0)
		return st;
	pthread_mutex_lock(&init_mu);
	if (init_state == 0) {
		const char *t = getenv("VGPU_TRANSPORT");
		int rc;
		if (t && !strncmp(t, "unix:", 5)) {
			host_mode = 1;
			rc = host_connect(t + 5);
		} else {
			const char *dev = getenv("VGPU_DEVICE");
			if (t && !strncmp(t, "dev:", 4))
				dev = t + 4;
			rc = dev_open(dev && *dev ? dev : "/dev/vgpu");
		}
		if (!rc)
			rc = say_hello();
		if (!rc && host_mode) {
			ring_start();
			rc = broken ? E_UNAVAILABLE : start_reader();
		} else if (!rc) {
			guest_ring_start();
			if (ring)
				rc = start_reader();
		}
		__atomic_store_n(&init_state, rc ? rc : 1, __ATOMIC_RELEASE);
		if (!rc && !host_mode)
			vgpu_start_notify_thread(); /* deferred errors and host functions */
	}
	st = init_state;
	pthread_mutex_unlock(&init_mu);
	return st == 1 ? 0 : st;
}

uint64_t vgpu_max_chunk(void)
{
	if (!host_mode && inline_copies()) {
		/* Guest mode, data inline through the vsock stream (a benchmark
		 * path): replies above 64 KiB failed with ENOMEM in the guest's
		 * reader (2026-11-22, under investigation), so stay below. */
		return 64u << 10;
	}
	if (inline_copies()) {
		uint64_t m = hello.max_payload ? hello.max_payload : VGPU_DEFAULT_MAX_PAYLOAD;
		return m > 8192 ? m - 4096 : m / 2;
	}
	/* Conservatively len/4096 + 2 segments per buffer, and what vgpu.ko
	 * pins per buffer (max_pin_mb): a copy of any size goes in chunks. */
	uint64_t segs = max_segments > 8 ? max_segments - 2 : 6;
	uint64_t m = segs * 4096;
	if (m > pin_max - 4096)
		m = pin_max - 4096;
	return m > (64u << 20) ? (64u << 20) : m;
}

/* Size of the fixed part of a request payload that carries BufRefs. */
static uint32_t req_fixed(uint16_t op)
{
	switch (op) {
	case VGPU_OP_MEMCPY_HTOD: return sizeof(struct vgpu_memcpy_htod_req);
	case VGPU_OP_MEMCPY_DTOH: return sizeof(struct vgpu_memcpy_dtoh_req);
	case VGPU_OP_MODULE_LOAD: return sizeof(struct vgpu_module_load_req);
	default: return 0;
	}
}

static int flush_locked(void)
{
	if (!batch_count)
		return 0;
	struct vgpu_batch_req *br = (void *)batch_buf;
	br->count = batch_count;
	br->pad0 = 0;
	uint32_t n = batch_count;
	batch_count = 0;
	size_t len = batch_len;
	batch_len = sizeof(struct vgpu_batch_req);
	/* No reply: the next synchronous call's reply comes after the
	 * batch's work, and a failure arrives as NOTIFY_ERROR first. A batch
	 * of one call (host mode's first after a synchronous call) travels as
	 * that call: the backend starts it without a batch's unpacking. */
	int rc;
	if (n == 1) {
		struct vgpu_header sh;
		memcpy(&sh, batch_buf + sizeof *br, sizeof sh);
		rc = send_frame(sh.opcode, sh.request_id, batch_buf + sizeof *br + sizeof sh, sh.payload_len);
	} else {
		rc = send_only(VGPU_OP_BATCH, new_id(), batch_buf, (uint32_t)len);
	}
	if (rc) {
		VWARN("sending a batch of %u calls failed: %d", n, rc);
		vgpu_defer_error(rc);
	}
	return rc;
}

/* Lock-free: the reader thread calls it and must never wait for a thread
 * that may be blocked writing to the host. */
void vgpu_defer_error(int err)
{
	int zero = 0;
	__atomic_compare_exchange_n(&deferred_err, &zero, err, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

/* Guest mode: a batch's NOTIFY_ERROR travels on the RECV queue and may be
 * read after the reply of the synchronizing call that follows it, so at a
 * sync point a pending batch is sent as a call and its error read from the
 * BatchReply (one extra round trip, only when work is pending). Host mode
 * reads both on one ordered stream: nothing to do. */
static int sync_point_roundtrip(void);

int vgpu_sync_point(void)
{
	if (host_mode)
		return 0;
	if (hello.features & VGPU_FEATURE_BATCH_SYNC) {
		/* The synchronizing call carries the batch and its error
		 * (BATCH_SYNC), or, when it cannot, vgpu_call sends the batch
		 * as a call first. */
		sync_next = 1;
		return 0;
	}
	return sync_point_roundtrip();
}

/* Guest mode: sends the pending batch as a call and defers its error. */
static int sync_point_roundtrip(void)
{
	pthread_mutex_lock(&batch_mu);
	if (!batch_count) {
		pthread_mutex_unlock(&batch_mu);
		return 0;
	}
	struct vgpu_batch_req *br = (void *)batch_buf;
	br->count = batch_count;
	br->pad0 = 0;
	size_t len = batch_len;
	batch_count = 0;
	batch_len = sizeof(struct vgpu_batch_req);
	uint8_t *r = NULL;
	uint32_t rl = 0;
	int rc = roundtrip(VGPU_OP_BATCH, new_id(), batch_buf, (uint32_t)len, NULL, 0, NULL, 0, 256, &r, &rl);
	pthread_mutex_unlock(&batch_mu);
	if (rc) {
		vgpu_defer_error(rc);
		return rc;
	}
	const struct vgpu_header *h = (const void *)r;
	struct vgpu_batch_reply rep;
	memset(&rep, 0, sizeof rep);
	memcpy(&rep, r + VGPU_HEADER_SIZE, h->payload_len < sizeof rep ? h->payload_len : sizeof rep);
	int err = rep.first_error ? rep.first_error : h->status;
	free(r);
	if (err) {
		VINFO("batch call %u failed: error %d", rep.failed_index, err);
		vgpu_defer_error(err);
	}
	return err;
}

int vgpu_flush(void)
{
	pthread_mutex_lock(&batch_mu);
	int rc = flush_locked();
	batch_limit = 0; /* a synchronizing call follows: the next burst starts small */
	pthread_mutex_unlock(&batch_mu);
	return rc;
}

int vgpu_take_deferred_error(void)
{
	return __atomic_exchange_n(&deferred_err, 0, __ATOMIC_ACQ_REL);
}

/* Guest rings: a small buffer travels inline on the ring (its bytes in the
 * request, or in the reply), so its call needs no pinning and no stream:
 * one to the host and one from it per call, as host mode's. */
#define RING_INLINE_MAX (32u << 10)
static int ring_inline(const struct vgpu_xbuf *b, const void *inl, const void *from_host)
{
	if (host_mode || !ring || b->len > RING_INLINE_MAX || !vgpu_regions_usable())
		return 0;
	return (b->dir & VGPU_DIR_TO_HOST) ? !inl : !from_host;
}

/* Outcomes of batch_sync_call. */
enum { BS_NOT_SENT, BS_DONE, BS_ALONE };

/* Sends the pending batch with call (op, id: payload, then inl bytes) as
 * its last sub-frame in one BATCH_SYNC, and waits for the reply. BS_DONE:
 * *rc is the outcome; on success *reply (malloc'd) is the call's own reply
 * frame, checked. BS_ALONE: the batch went but the backend did not run the
 * call: send it alone. BS_NOT_SENT: nothing pending, or it does not fit
 * one frame (the caller sends batch and call as before). The queued calls'
 * first error is deferred, as a batch's. */
static int batch_sync_call(uint16_t op, uint64_t id, const void *payload, uint32_t plen, const void *inl,
			   uint32_t inl_len, uint32_t reply_cap, uint8_t **reply, uint32_t *reply_len, int *rc)
{
	*reply = NULL;
	*reply_len = 0;
	if (!(hello.features & VGPU_FEATURE_BATCH_SYNC) || broken)
		return BS_NOT_SENT;
	uint64_t t0 = stat_t0();
	uint64_t sub = vgpu_frame_len((uint64_t)plen + inl_len, 0);
	pthread_mutex_lock(&batch_mu);
	if (!batch_count || batch_len + sub > (uint64_t)hello.max_payload - 64 || batch_count + 1 > hello.max_batch) {
		pthread_mutex_unlock(&batch_mu);
		return BS_NOT_SENT;
	}
	if (batch_len + sub > batch_cap) {
		size_t nc = batch_cap;
		while (nc < batch_len + sub)
			nc *= 2;
		uint8_t *nb = realloc(batch_buf, nc);
		if (!nb) {
			pthread_mutex_unlock(&batch_mu);
			return BS_NOT_SENT;
		}
		batch_buf = nb;
		batch_cap = nc;
	}
	uint8_t *at = batch_buf + batch_len;
	struct vgpu_header ch;
	put_header(&ch, op, id, plen + inl_len, 0);
	memcpy(at, &ch, sizeof ch);
	memcpy(at + sizeof ch, payload, plen);
	if (inl_len)
		memcpy(at + sizeof ch + plen, inl, inl_len);
	memset(at + sizeof ch + plen + inl_len, 0, sub - sizeof ch - plen - inl_len);
	struct vgpu_batch_req *br = (void *)batch_buf;
	br->count = batch_count + 1;
	br->pad0 = 0;
	size_t len = batch_len + sub;
	uint32_t queued = batch_count;
	batch_count = 0;
	batch_len = sizeof(struct vgpu_batch_req);
	batch_limit = 0; /* a synchronizing call: the next burst starts small */
	uint64_t bid = new_id();
	struct vgpu_header h;
	put_header(&h, VGPU_OP_BATCH_SYNC, bid, (uint32_t)len, 0);
	uint8_t *r = NULL;
	uint32_t rl = 0;
	int e;
	if (host_mode || ring) {
		/* Written in order under batch_mu; waited for without it. */
		struct waiter w = {.id = bid};
		host_send(&w, &h, sizeof h, batch_buf, len, -1);
		pthread_mutex_unlock(&batch_mu);
		e = host_wait(&w, &r, &rl);
	} else {
		size_t n = sizeof h + len; /* len is a multiple of 8 */
		uint8_t *f = malloc(n);
		if (!f) {
			pthread_mutex_unlock(&batch_mu);
			vgpu_defer_error(VGPU_E_OUT_OF_MEMORY);
			*rc = VGPU_E_OUT_OF_MEMORY;
			return BS_DONE;
		}
		memcpy(f, &h, sizeof h);
		memcpy(f + sizeof h, batch_buf, len);
		e = dev_roundtrip(f, (uint32_t)n, NULL, 0, &r, &rl, reply_cap + 256);
		pthread_mutex_unlock(&batch_mu);
		free(f);
	}
	if (!e)
		e = check_reply(r, rl, bid, VGPU_OP_BATCH_SYNC);
	const struct vgpu_header *rh = (const void *)r;
	if (!e && rh->status) {
		/* Refused whole: neither the queued calls nor the call ran. */
		VINFO("BATCH_SYNC of %u queued calls and %s refused: error %d", queued, vgpu_op_name(op), rh->status);
		e = rh->status;
	}
	struct vgpu_batch_sync_reply rep;
	if (!e && rh->payload_len < sizeof rep) {
		VERR("malformed BATCH_SYNC reply (%u bytes)", rh->payload_len);
		broken = 1;
		e = E_UNAVAILABLE;
	}
	if (e) {
		free(r);
		vgpu_defer_error(e);
		*rc = e;
		return BS_DONE;
	}
	if (!host_mode && (rh->flags & VGPU_FLAG_OUTPUT))
		wait_output(bid);
	memcpy(&rep, r + VGPU_HEADER_SIZE, sizeof rep);
	if (rep.first_error) {
		VINFO("batch call %u failed: error %d", rep.failed_index, rep.first_error);
		vgpu_defer_error(rep.first_error);
	}
	uint32_t tl = rh->payload_len - (uint32_t)sizeof rep;
	vgpu_opstat_add(VGPU_OP_BATCH_SYNC, sizeof h + len, rl, stat_since(t0), 1);
	if (!rep.ran) {
		free(r);
		return BS_ALONE;
	}
	/* The call's own reply frame: checked, then moved to the buffer's start. */
	memmove(r, r + VGPU_HEADER_SIZE + sizeof rep, tl);
	e = check_reply(r, tl, id, op);
	if (e) {
		free(r);
		*rc = e;
		return BS_DONE;
	}
	if (!host_mode && (((const struct vgpu_header *)r)->flags & VGPU_FLAG_OUTPUT))
		wait_output(id);
	*reply = r;
	*reply_len = tl;
	*rc = 0;
	return BS_DONE;
}

int vgpu_call(uint16_t op, const void *req, uint32_t req_len, const struct vgpu_xbuf *bufs, int nbufs,
	      void *reply, uint32_t reply_len, void *tail, uint32_t tail_cap, uint32_t *tail_len)
{
	int rc = vgpu_init();
	if (rc)
		return rc;
	if (nbufs > VGPU_MAX_BUFS)
		return VGPU_E_INVALID_VALUE;
	uint8_t small[SMALL_FRAME]; /* a small call's payload: no malloc */
	uint8_t *payload = req_len <= sizeof small ? small : malloc(req_len);
	if (!payload)
		return VGPU_E_OUT_OF_MEMORY;
	if (req_len)
		memcpy(payload, req, req_len);

	/* Name the buffers. */
	struct vgpu_buf dbufs[VGPU_MAX_BUFS];
	uint32_t ndbufs = 0;
	const uint8_t *inl = NULL; /* host mode: one TO_HOST buffer inline */
	uint32_t inl_len = 0;
	void *from_host = NULL;
	uint64_t from_host_len = 0;
	uint32_t fixed = req_fixed(op);
	for (int i = 0; i < nbufs; i++) {
		struct vgpu_buf_ref ref;
		memset(&ref, 0, sizeof ref);
		ref.len = bufs[i].len;
		struct vgpu_hostrange hr;
		if (!__atomic_load_n(&force_inline, __ATOMIC_RELAXED) && vgpu_hostmap_find(bufs[i].addr, bufs[i].len, &hr) &&
		    hr.region) {
			/* Registered memory (guest mode, or host mode's shared
			 * memory): named by region and offset, no bytes inline. */
			ref.kind = VGPU_BUF_REGION;
			ref.region = hr.region;
			ref.offset = (uint64_t)((uint8_t *)bufs[i].addr - (uint8_t *)hr.addr);
		} else if (inline_copies() || ring_inline(&bufs[i], inl, from_host)) {
			ref.kind = VGPU_BUF_INLINE;
			if (bufs[i].dir & VGPU_DIR_TO_HOST) {
				if (inl) { /* one inline buffer per call is all we need */
					if (payload != small)
						free(payload);
					return VGPU_E_INVALID_VALUE;
				}
				inl = bufs[i].addr;
				inl_len = (uint32_t)bufs[i].len;
				ref.offset = req_len - fixed;
			} else {
				from_host = bufs[i].addr;
				from_host_len = bufs[i].len;
				ref.offset = 0;
			}
		} else {
			ref.kind = VGPU_BUF_SEGMENTS;
			ref.index = ndbufs;
			dbufs[ndbufs].addr = (uintptr_t)bufs[i].addr;
			dbufs[ndbufs].len = bufs[i].len;
			dbufs[ndbufs].dir = bufs[i].dir == VGPU_DIR_TO_HOST ? VGPU_BUF_TO_HOST : VGPU_BUF_FROM_HOST;
			dbufs[ndbufs].flags = 0;
			ndbufs++;
		}
		if (bufs[i].ref_off + sizeof ref <= req_len)
			memcpy(payload + bufs[i].ref_off, &ref, sizeof ref);
	}

	uint8_t *r = NULL;
	uint32_t rl = 0;
	uint64_t id = new_id();
	uint32_t cap = reply_len + tail_cap + (uint32_t)from_host_len + 64;
	int sync = sync_next;
	sync_next = 0;
	int bs = ndbufs ? BS_NOT_SENT : batch_sync_call(op, id, payload, req_len, inl, inl_len, cap, &r, &rl, &rc);
	if (bs != BS_DONE) {
		if (bs == BS_NOT_SENT && sync && !host_mode)
			sync_point_roundtrip(); /* the batch's error in its reply, before the call's */
		vgpu_flush();
		rc = roundtrip(op, id, payload, req_len, inl, inl_len, dbufs, ndbufs, cap, &r, &rl);
	}
	if (payload != small)
		free(payload);
	if (rc)
		return rc;
	const struct vgpu_header *h = (const void *)r;
	rc = h->status;
	const uint8_t *p = r + VGPU_HEADER_SIZE;
	uint32_t plen = h->payload_len;
	if (!rc && from_host) {
		/* host mode D2H: the bytes are the reply payload (fixed part empty) */
		uint64_t n = plen < from_host_len ? plen : from_host_len;
		memcpy(from_host, p, n);
		if (n != from_host_len) {
			VERR("%s: host returned %u of %llu bytes", vgpu_op_name(op), plen,
			     (unsigned long long)from_host_len);
			rc = VGPU_E_UNKNOWN;
		}
	} else if (!rc) {
		uint32_t fl = plen < reply_len ? plen : reply_len;
		if (reply) {
			memset(reply, 0, reply_len);
			memcpy(reply, p, fl);
		}
		uint32_t tl = plen > reply_len ? plen - reply_len : 0;
		if (tail_len)
			*tail_len = tl;
		if (tail && tl)
			memcpy(tail, p + reply_len, tl < tail_cap ? tl : tail_cap);
	}
	free(r);
	if (rc)
		VDEBUG("%s failed: error %d", vgpu_op_name(op), rc);
	return rc;
}

/* How many calls the first batch after a synchronous call holds (see the
 * top of this file). */
static uint32_t first_batch(void)
{
	if (batch_first)
		return batch_first;
	return host_mode ? 1 : VGPU_BATCH_FIRST_GUEST;
}

int vgpu_queue(uint16_t op, const void *req, uint32_t req_len)
{
	int rc = vgpu_init();
	if (rc)
		return rc;
	if (!(hello.features & VGPU_FEATURE_BATCH))
		return vgpu_call(op, req, req_len, NULL, 0, NULL, 0, NULL, 0, NULL);
	uint64_t sub = vgpu_frame_len(req_len, 0);
	uint64_t limit = hello.max_payload - 64;
	if (sub + sizeof(struct vgpu_batch_req) > limit)
		return vgpu_call(op, req, req_len, NULL, 0, NULL, 0, NULL, 0, NULL);
	pthread_mutex_lock(&batch_mu);
	if (!batch_limit) {
		uint32_t first = first_batch();
		batch_limit = first < hello.max_batch ? first : hello.max_batch;
	}
	if (batch_count && (batch_len + sub > limit || batch_count >= batch_limit))
		flush_locked();
	if (!batch_buf || batch_len + sub > batch_cap) {
		size_t nc = batch_cap ? batch_cap : 65536;
		while (nc < batch_len + sub + sizeof(struct vgpu_batch_req))
			nc *= 2;
		uint8_t *nb = realloc(batch_buf, nc);
		if (!nb) {
			pthread_mutex_unlock(&batch_mu);
			return VGPU_E_OUT_OF_MEMORY;
		}
		batch_buf = nb;
		batch_cap = nc;
		if (!batch_len)
			batch_len = sizeof(struct vgpu_batch_req);
	}
	struct vgpu_header h;
	put_header(&h, op, new_id(), req_len, 0);
	memcpy(batch_buf + batch_len, &h, sizeof h);
	memcpy(batch_buf + batch_len + sizeof h, req, req_len);
	memset(batch_buf + batch_len + sizeof h + req_len, 0, sub - sizeof h - req_len);
	batch_len += sub;
	batch_count++;
	vgpu_opstat_add(op, sub, 0, 0, 0);
	if (batch_count >= batch_limit) {
		flush_locked();
		batch_limit = batch_limit < hello.max_batch / 2 ? 2 * batch_limit : hello.max_batch;
	}
	pthread_mutex_unlock(&batch_mu);
	return 0;
}

/* Sends a frame without waiting for its reply (host-function completions
 * sent from the notification path). */
int vgpu_session_stats(struct vgpu_session_stats *out)
{
	if (__atomic_load_n(&init_state, __ATOMIC_ACQUIRE) != 1 || broken)
		return VGPU_E_NOT_INITIALIZED;
	memset(out, 0, sizeof *out);
	return vgpu_call(VGPU_OP_GET_STATS, NULL, 0, NULL, 0, out, sizeof *out, NULL, 0, NULL);
}

/* Work queued but never synchronized still reaches the device at exit. */
__attribute__((destructor)) static void flush_at_exit(void)
{
	if (__atomic_load_n(&init_state, __ATOMIC_ACQUIRE) == 1 && !broken)
		vgpu_flush();
}

int vgpu_send_noreply(uint16_t op, const void *req, uint32_t req_len)
{
	int rc = vgpu_init();
	return rc ? rc : send_only(op, new_id(), req, req_len);
}

/* Host mode: one call whose frame carries segments the library built itself
 * (memory it shared with HOST_SHARE) and/or one fd beside it (sfd >= 0).
 * Returns a transport error, else the reply's status; the reply's fixed
 * part goes to reply. */
int vgpu_host_call(uint16_t op, const void *req, uint32_t req_len, const struct vgpu_segment *segs, uint32_t nsegs,
		   int sfd, void *reply, uint32_t reply_len)
{
	int rc = vgpu_init();
	if (rc)
		return rc;
	if (!host_mode)
		return VGPU_E_NOT_SUPPORTED;
	vgpu_flush();
	uint64_t t0 = stat_t0();
	uint64_t id = new_id();
	size_t n = vgpu_frame_len(req_len, nsegs);
	uint8_t *f = calloc(1, n);
	if (!f)
		return VGPU_E_OUT_OF_MEMORY;
	struct vgpu_header *h = (struct vgpu_header *)f;
	put_header(h, op, id, req_len, nsegs ? VGPU_FLAG_SEGMENTS : 0);
	h->num_segs = nsegs;
	memcpy(f + VGPU_HEADER_SIZE, req, req_len);
	if (nsegs)
		memcpy(f + n - nsegs * sizeof *segs, segs, nsegs * sizeof *segs);
	uint8_t *r = NULL;
	uint32_t rl = 0;
	rc = host_roundtrip(id, f, n, NULL, 0, sfd, &r, &rl);
	free(f);
	if (!rc)
		rc = check_reply(r, rl, id, op);
	if (!rc) {
		const struct vgpu_header *rh = (const void *)r;
		rc = rh->status;
		if (!rc && reply) {
			memset(reply, 0, reply_len);
			memcpy(reply, r + VGPU_HEADER_SIZE, rh->payload_len < reply_len ? rh->payload_len : reply_len);
		}
	}
	free(r);
	vgpu_opstat_add(op, n, rl, stat_since(t0), 1);
	return rc;
}

/* ---------------- split calls (host mode) ---------------- */

struct vgpu_pending_call {
	struct waiter w;
	uint16_t op;
	uint64_t t0;
	uint32_t sent;
};

int vgpu_host_begin(uint16_t op, const void *req, uint32_t req_len, struct vgpu_pending_call **out)
{
	*out = NULL;
	int rc = vgpu_init();
	if (rc)
		return rc;
	if (!host_mode)
		return VGPU_E_NOT_SUPPORTED;
	if (broken)
		return E_UNAVAILABLE;
	struct vgpu_pending_call *pc = calloc(1, sizeof *pc);
	size_t n = VGPU_HEADER_SIZE + req_len;
	uint8_t *f = malloc(n);
	if (!pc || !f) {
		free(pc);
		free(f);
		return VGPU_E_OUT_OF_MEMORY;
	}
	pc->op = op;
	pc->t0 = stat_t0();
	pc->w.id = new_id();
	pc->sent = (uint32_t)vgpu_frame_len(req_len, 0);
	put_header((struct vgpu_header *)f, op, pc->w.id, req_len, 0);
	memcpy(f + VGPU_HEADER_SIZE, req, req_len);
	host_send(&pc->w, f, n, NULL, 0, -1);
	free(f);
	*out = pc;
	return 0;
}

int vgpu_host_end(struct vgpu_pending_call *pc, void *reply, uint32_t reply_len)
{
	if (!pc)
		return VGPU_E_INVALID_VALUE;
	uint8_t *r = NULL;
	uint32_t rl = 0;
	int rc = host_wait(&pc->w, &r, &rl);
	if (!rc)
		rc = check_reply(r, rl, pc->w.id, pc->op);
	if (!rc) {
		const struct vgpu_header *h = (const void *)r;
		rc = h->status;
		if (!rc && reply) {
			memset(reply, 0, reply_len);
			memcpy(reply, r + VGPU_HEADER_SIZE, h->payload_len < reply_len ? h->payload_len : reply_len);
		}
	}
	free(r);
	vgpu_opstat_add(pc->op, pc->sent, rl, stat_since(pc->t0), 1);
	free(pc);
	return rc;
}
