/*
 * ring.c - shared-memory rings (VGPU_FEATURE_SHM_RING), the library's side.
 * The layout and rules are protocol/ring.go's: a header page, the request
 * ring (we produce) and the completion ring (we consume), each a byte
 * stream of ordinary frames with free-running positions. Host mode keeps
 * them in a sealed memfd with four eventfds as doorbells
 * (vgpu_ring_create); a guest in pages vgpu.ko allocated and mapped for
 * /dev/vgpu (vgpu_ring_attach), where a doorbell to the backend is
 * VGPU_IOC_RING_BELL and waiting for the backend's is VGPU_IOC_RING_WAIT.
 * transport.c decides when to use them; this file moves bytes.
 *
 * Waiting: a side that finds nothing to do spins for spin_ns (restarted by
 * every request sent, so the reader polls while a reply is due), then sets
 * its sleep word, checks again and sleeps in poll(2) on its eventfd and the
 * socket (whose end, the backend gone, ends the wait with an error).
 *
 * Trust: the backend's positions are checked (0 <= tail-head <= size) on
 * every read; a violation breaks the connection, never reads outside the
 * mapping.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <linux/types.h>

#include "core.h"
#include "uapi/vgpu.h"

struct vgpu_ring {
	uint8_t *mem;
	size_t map_len;
	uint64_t size;
	uint8_t *req, *comp;
	uint64_t *req_tail, *req_head, *comp_tail, *comp_head;
	uint32_t *srv_sleep, *srv_wait, *cli_sleep, *cli_wait;
	int bell[4]; /* RING_SETUP's fds 1..4 (host mode) */
	int sock;
	int dev; /* a guest: the /dev/vgpu fd (doorbells are its ioctls); else -1 */
	uint64_t bells_seen; /* a guest: the driver's doorbell count last seen */
	uint64_t *taken; /* a guest: request bytes the session took (the backend's) */
	uint64_t tx; /* request bytes written (local, authoritative) */
	uint64_t pub; /* ... of which published (the tail we stored) */
	uint64_t head_seen; /* the backend's request head as last read (space_for) */
	uint64_t rx; /* completion bytes read (one reader at a time; others peek it: changed()) */
	uint64_t spin_ns;
	uint64_t sends; /* frames published (atomic store, under the writers' lock): restarts the reader's spin */
};

#define U64(r, off) ((uint64_t *)((r)->mem + (off)))
#define U32(r, off) ((uint32_t *)((r)->mem + (off)))

/* VGPU_RING_DEFAULT_SPIN_NS where the machine has CPUs to spare (4 or
 * more), else 0: with two CPUs, a side that spins takes the CPU the other
 * side needs to answer it. */
uint64_t vgpu_ring_default_spin_ns(void)
{
	return sysconf(_SC_NPROCESSORS_ONLN) >= 4 ? VGPU_RING_DEFAULT_SPIN_NS : 0;
}

void vgpu_ring_destroy(struct vgpu_ring *r)
{
	if (!r)
		return;
	if (r->mem)
		munmap(r->mem, r->map_len); /* a guest's pages: vgpu.ko frees them at close */
	for (int i = 0; i < 4; i++)
		if (r->bell[i] >= 0)
			close(r->bell[i]);
	free(r);
}

static uint64_t ring_spin_ns(void)
{
	const char *s = getenv("VGPU_RING_SPIN_US");
	return s && *s ? strtoull(s, NULL, 10) * 1000 : vgpu_ring_default_spin_ns();
}

/* Points the ring's fields into its mapping (header written). */
static void ring_locate(struct vgpu_ring *r)
{
	r->req = r->mem + VGPU_RING_HEADER_SIZE;
	r->comp = r->req + r->size;
	r->req_tail = U64(r, VGPU_RING_OFF_REQ_TAIL);
	r->req_head = U64(r, VGPU_RING_OFF_REQ_HEAD);
	r->comp_tail = U64(r, VGPU_RING_OFF_COMP_TAIL);
	r->comp_head = U64(r, VGPU_RING_OFF_COMP_HEAD);
	r->srv_sleep = U32(r, VGPU_RING_OFF_SRV_SLEEP);
	r->srv_wait = U32(r, VGPU_RING_OFF_SRV_WAIT);
	r->cli_sleep = U32(r, VGPU_RING_OFF_CLI_SLEEP);
	r->cli_wait = U32(r, VGPU_RING_OFF_CLI_WAIT);
	r->taken = U64(r, VGPU_RING_OFF_REQ_TAKEN);
	/* Positions start where the header says (zero when fresh). */
	r->tx = __atomic_load_n(r->req_tail, __ATOMIC_ACQUIRE);
	r->pub = r->tx;
	r->head_seen = r->tx - r->size; /* no room known: the first write reads the head */
	r->rx = __atomic_load_n(r->comp_head, __ATOMIC_ACQUIRE);
}

int vgpu_ring_attach(int dev, void *mem, size_t map_len, uint64_t bytes, struct vgpu_ring **out)
{
	*out = NULL;
	if (map_len != VGPU_RING_HEADER_SIZE + 2 * bytes) {
		errno = EINVAL;
		return -1;
	}
	struct vgpu_ring *r = calloc(1, sizeof *r);
	if (!r)
		return -1;
	for (int i = 0; i < 4; i++)
		r->bell[i] = -1;
	r->sock = -1;
	r->dev = dev;
	r->size = bytes;
	r->map_len = map_len;
	r->mem = mem;
	r->spin_ns = ring_spin_ns();
	ring_locate(r);
	*out = r;
	return 0;
}

int vgpu_ring_create(int sock, uint64_t bytes, struct vgpu_ring **out, int fds[VGPU_RING_FDS])
{
	*out = NULL;
	struct vgpu_ring *r = calloc(1, sizeof *r);
	if (!r)
		return -1;
	for (int i = 0; i < 4; i++)
		r->bell[i] = -1;
	r->sock = sock;
	r->dev = -1;
	r->size = bytes;
	r->map_len = VGPU_RING_HEADER_SIZE + 2 * bytes;
	r->spin_ns = ring_spin_ns();
	int mfd = memfd_create("vgpu-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (mfd < 0)
		goto fail;
	if (ftruncate(mfd, (off_t)r->map_len) != 0 ||
	    fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
		goto fail_fd;
	r->mem = mmap(NULL, r->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (r->mem == MAP_FAILED) {
		r->mem = NULL;
		goto fail_fd;
	}
	for (int i = 0; i < 4; i++)
		if ((r->bell[i] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
			goto fail_fd;
	*U32(r, VGPU_RING_OFF_MAGIC) = VGPU_RING_MAGIC;
	*U32(r, VGPU_RING_OFF_MAGIC + 4) = VGPU_RING_VERSION;
	*U64(r, VGPU_RING_OFF_MAGIC + 8) = bytes;
	ring_locate(r);
	fds[0] = mfd; /* the caller closes it once sent */
	for (int i = 0; i < 4; i++)
		fds[i + 1] = r->bell[i];
	*out = r;
	return 0;
fail_fd:
	close(mfd);
fail:
	vgpu_ring_destroy(r);
	return -1;
}

/* Has the backend closed the socket (or has it failed)? Nothing else comes
 * on it in ring mode. */
static int sock_ended(int sock)
{
	char b;
	ssize_t n = recv(sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void ring_bell(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	if (poll(&p, 1, 0) != 1 || !(p.revents & POLLOUT))
		return; /* a full counter: a wake-up is pending anyway */
	uint64_t one = 1;
	ssize_t w = write(fd, &one, sizeof one);
	(void)w;
}

/* Wakes the peer if its word says it sleeps (1 -> 2: a burst rings once):
 * bell is RING_SETUP's fd index of the backend's doorbell (0: requests,
 * 1: completion space). */
static void wake_if(struct vgpu_ring *r, uint32_t *flag, int bell)
{
	uint32_t one = 1;
	if (__atomic_load_n(flag, __ATOMIC_SEQ_CST) == 1 &&
	    __atomic_compare_exchange_n(flag, &one, 2, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
		if (vgpu_stats_enabled())
			VGPU_WAITSTAT_ADD(bells, 1);
		if (r->dev < 0) {
			ring_bell(r->bell[bell]);
			return;
		}
		__u32 b = bell == 0 ? VGPU_RING_BELL_REQUESTS : VGPU_RING_BELL_SPACE;
		while (ioctl(r->dev, VGPU_IOC_RING_BELL, &b) != 0 && errno == EINTR)
			;
	}
}

/* A guest: sleeps on vgpu.ko until the backend's doorbell or ready() says
 * go (1), or fails (-1): the session died or the ring broke. The wait is
 * bounded (and repeated), so a lost doorbell costs time, not a hang. */
static int sleep_on_dev(struct vgpu_ring *r, uint32_t *flag, int (*ready)(struct vgpu_ring *))
{
	uint64_t seen = __atomic_load_n(&r->bells_seen, __ATOMIC_RELAXED);
	__atomic_store_n(flag, 1, __ATOMIC_SEQ_CST);
	int rc;
	for (;;) {
		rc = ready(r);
		if (rc)
			break;
		struct vgpu_ring_wait w = {.seen = seen, .timeout_ms = 1000};
		if (ioctl(r->dev, VGPU_IOC_RING_WAIT, &w) != 0) {
			if (errno == EINTR)
				continue;
			VERR("VGPU_IOC_RING_WAIT failed: %s", strerror(errno));
			rc = -1;
			break;
		}
		seen = w.seen;
		__atomic_store_n(&r->bells_seen, seen, __ATOMIC_RELAXED);
		if (__atomic_load_n(flag, __ATOMIC_SEQ_CST) == 2)
			__atomic_store_n(flag, 1, __ATOMIC_SEQ_CST);
	}
	__atomic_store_n(flag, 0, __ATOMIC_SEQ_CST);
	return rc > 0 ? 0 : -1;
}

/* Sleeps on bell with *flag set until ready() says go (1), or fails (-1):
 * the socket ended or the ring broke (ready() < 0). */
static int sleep_on(struct vgpu_ring *r, int bell, uint32_t *flag, int (*ready)(struct vgpu_ring *))
{
	if (r->dev >= 0)
		return sleep_on_dev(r, flag, ready);
	__atomic_store_n(flag, 1, __ATOMIC_SEQ_CST);
	int rc;
	for (;;) {
		rc = ready(r);
		if (rc)
			break;
		struct pollfd p[2] = {{.fd = bell, .events = POLLIN}, {.fd = r->sock, .events = POLLIN}};
		if (poll(p, 2, -1) < 0 && errno != EINTR) {
			rc = -1;
			break;
		}
		if (p[0].revents & POLLIN) {
			uint64_t v;
			ssize_t n = read(bell, &v, sizeof v);
			(void)n;
		}
		if ((p[0].revents & (POLLERR | POLLNVAL)) || (p[1].revents && sock_ended(r->sock))) {
			rc = ready(r);
			if (!rc)
				rc = -1;
			break;
		}
		if (__atomic_load_n(flag, __ATOMIC_SEQ_CST) == 2)
			__atomic_store_n(flag, 1, __ATOMIC_SEQ_CST);
	}
	__atomic_store_n(flag, 0, __ATOMIC_SEQ_CST);
	return rc > 0 ? 0 : -1;
}

/* Free request-ring bytes: > 0, 0 (full) or -1 (the backend's head is out
 * of range). */
static int64_t space(struct vgpu_ring *r)
{
	uint64_t head = __atomic_load_n(r->req_head, __ATOMIC_ACQUIRE);
	uint64_t used = r->tx - head;
	if (used > r->size)
		return -1;
	r->head_seen = head;
	return (int64_t)(r->size - used);
}

/* Free request-ring bytes for a write of n: what the backend's head last
 * read leaves free when that is enough, without reading its cache line
 * again (it moves only forward, so the room it left is still there). */
static int64_t space_for(struct vgpu_ring *r, size_t n)
{
	uint64_t free = r->size - (r->tx - r->head_seen);
	return free >= n ? (int64_t)free : space(r);
}

static int space_ready(struct vgpu_ring *r)
{
	int64_t s = space(r);
	return s < 0 ? -1 : s > 0;
}

/* Publishes the request bytes written so far (the tail) and wakes the
 * backend if it sleeps. */
static void publish(struct vgpu_ring *r)
{
	if (r->pub == r->tx)
		return;
	r->pub = r->tx;
	__atomic_store_n(r->req_tail, r->tx, __ATOMIC_SEQ_CST);
	wake_if(r, r->srv_sleep, 0);
}

int vgpu_ring_write(struct vgpu_ring *r, const void *p, size_t n) { return vgpu_ring_put(r, p, n, 1); }

int vgpu_ring_put(struct vgpu_ring *r, const void *p, size_t n, int last)
{
	const uint8_t *b = p;
	while (n) {
		int64_t s = space_for(r, n);
		if (s < 0) {
			VERR("the backend corrupted the request ring (head out of range)");
			return -1;
		}
		if (!s) {
			publish(r); /* what is written must be readable to make room */
			uint64_t t0 = vgpu_now_ns();
			while (!(s = space(r)) && vgpu_now_ns() - t0 < r->spin_ns)
				vgpu_cpu_relax();
			if (!s && sleep_on(r, r->bell[3], r->cli_wait, space_ready) != 0)
				return -1;
			continue;
		}
		uint64_t k = (uint64_t)s < n ? (uint64_t)s : n;
		uint64_t off = r->tx % r->size;
		uint64_t first = k < r->size - off ? k : r->size - off;
		memcpy(r->req + off, b, first);
		memcpy(r->req, b + first, k - first);
		r->tx += k;
		b += k;
		n -= k;
	}
	if (last) {
		publish(r);
		__atomic_store_n(&r->sends, r->sends + 1, __ATOMIC_RELAXED);
	}
	return 0;
}

uint64_t vgpu_ring_write_pos(struct vgpu_ring *r) { return r->tx; }

int vgpu_ring_wait_taken(struct vgpu_ring *r, uint64_t pos, volatile int *broken)
{
	uint64_t t0 = vgpu_now_ns(), sleep_ns = 1000;
	for (;;) {
		uint64_t t = __atomic_load_n(r->taken, __ATOMIC_ACQUIRE);
		if (t - pos < (1ull << 63)) /* t >= pos, free-running */
			return 0;
		if (*broken)
			return -1;
		if (vgpu_now_ns() - t0 < r->spin_ns)
			continue;
		struct timespec ts = {0, (long)sleep_ns};
		nanosleep(&ts, NULL);
		if (sleep_ns < 1000000)
			sleep_ns *= 2;
	}
}

void vgpu_ring_note_carrier(struct vgpu_ring *r)
{
	__atomic_fetch_add(U64(r, VGPU_RING_OFF_CARRIERS), 1, __ATOMIC_SEQ_CST);
}

/* Unread completion bytes, or -1 (the backend's tail is out of range). */
static int64_t avail(struct vgpu_ring *r)
{
	uint64_t n = __atomic_load_n(r->comp_tail, __ATOMIC_ACQUIRE) - r->rx;
	if (n > r->size)
		return -1;
	return (int64_t)n;
}

static int avail_ready(struct vgpu_ring *r)
{
	int64_t a = avail(r);
	return a < 0 ? -1 : a > 0;
}

int vgpu_ring_pending(struct vgpu_ring *r) { return avail_ready(r); }

/* Has the backend published completion bytes past our position? A peek
 * that another thread's read may race with (the positions are loaded one
 * after the other), so it says only "look"; avail() is the check, made by
 * the one reader. */
static int changed(struct vgpu_ring *r)
{
	uint64_t rx = __atomic_load_n(&r->rx, __ATOMIC_ACQUIRE);
	return __atomic_load_n(r->comp_tail, __ATOMIC_ACQUIRE) != rx;
}

int vgpu_ring_changed(struct vgpu_ring *r) { return changed(r); }

int vgpu_ring_wait_readable(struct vgpu_ring *r, const int *yield)
{
	for (;;) {
		if (changed(r))
			return 1;
		/* Spin while a reply may be due: spin_ns past the last request
		 * sent (seen here: the clock is read every 16 turns, and not by
		 * the senders, as a read can cost ~0.1 us), then sleep. */
		int c = 0;
		uint64_t seen = __atomic_load_n(&r->sends, __ATOMIC_RELAXED), last = vgpu_now_ns();
		for (unsigned i = 1;; i++) {
			if ((c = changed(r)) != 0)
				break;
			if (yield && __atomic_load_n(yield, __ATOMIC_ACQUIRE))
				return 0;
			vgpu_cpu_relax();
			if (i % 16)
				continue;
			uint64_t now = vgpu_now_ns(), sends = __atomic_load_n(&r->sends, __ATOMIC_RELAXED);
			if (sends != seen) {
				seen = sends;
				last = now;
			} else if (now - last >= r->spin_ns) {
				break;
			}
		}
		if (c)
			return 1;
		if (vgpu_stats_enabled())
			VGPU_WAITSTAT_ADD(reader_sleeps, 1);
		if (sleep_on(r, r->bell[2], r->cli_sleep, changed) != 0)
			return -1;
	}
}

int vgpu_ring_read(struct vgpu_ring *r, void *p, size_t n)
{
	uint8_t *b = p;
	while (n) {
		int64_t a = avail(r);
		if (!a) {
			if (vgpu_ring_wait_readable(r, NULL) < 0)
				return -1;
			continue;
		}
		if (a < 0) {
			VERR("the backend corrupted the completion ring (tail out of range)");
			return -1;
		}
		uint64_t k = (uint64_t)a < n ? (uint64_t)a : n;
		uint64_t off = r->rx % r->size;
		uint64_t first = k < r->size - off ? k : r->size - off;
		memcpy(b, r->comp + off, first);
		memcpy(b + first, r->comp, k - first);
		__atomic_store_n(&r->rx, r->rx + k, __ATOMIC_RELEASE); /* waiters peek it (changed) */
		__atomic_store_n(r->comp_head, r->rx, __ATOMIC_SEQ_CST);
		wake_if(r, r->srv_wait, 1);
		b += k;
		n -= k;
	}
	return 0;
}
