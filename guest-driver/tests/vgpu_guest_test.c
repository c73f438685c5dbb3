// SPDX-License-Identifier: GPL-2.0
/*
 * vgpu_guest_test - exercises vgpu.ko inside the test guest against the
 * backend's pattern mode (backend/pattern). Build it static:
 *
 *   gcc -static -O2 -pthread -Iguest-driver -Iprotocol \
 *       -o vgpu-guest-test guest-driver/tests/vgpu_guest_test.c
 *
 * Usage: vgpu-guest-test [-m vgpu.ko] [-p "port=N ..."] [TEST...]
 *
 * With -m, the module is loaded (unloaded first if present), unloaded and
 * loaded again before the tests. Without TEST names every test runs. Each
 * test prints "PASS name" or "FAIL name: why"; BENCH lines carry figures.
 * The exit status is the number of failed tests.
 *
 * The pattern (backend/pattern/pattern.go has the Go twin): byte i of a
 * buffer belongs to 64-bit word w = i / 8 and is byte i % 8 (little-endian)
 * of mix(seed ^ (w * 0x9E3779B97F4A7C15)), mix being the splitmix64
 * finalizer; the seed is the device address of the copy (Dst of an HtoD,
 * Src of a DtoH). Offsets count from the buffer's first byte, so any start
 * address and length work.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

#include "include/uapi/vgpu.h"
#include "vgpu_protocol.h"

/* Pattern-mode conventions (backend/pattern). */
#define PAT_STREAM_DELAY 0xde1a7ULL	/* the host answers after its delay */
#define PAT_STREAM_CLOSE 0xc105eULL	/* the host closes the connection */
#define PAT_STREAM_GARBAGE 0x6a4ba6eULL	/* the host claims a 4 GiB reply */
#define PAT_DEVPTR_BASE 0x7f0000000000ULL /* + segments of a mapped register */
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_SUPPORTED 801

static int failures;
static const char *cur;
static uint64_t next_req = 1;
static pthread_mutex_t req_lock = PTHREAD_MUTEX_INITIALIZER;

#define FAIL(...) do {						\
	printf("FAIL %s: ", cur); printf(__VA_ARGS__); printf("\n");	\
	fflush(stdout); failures++; return;			\
} while (0)
#define CHECK(c, ...) do { if (!(c)) FAIL(__VA_ARGS__); } while (0)

static uint64_t mix(uint64_t z)
{
	z ^= z >> 30;
	z *= 0xbf58476d1ce4e5b9ULL;
	z ^= z >> 27;
	z *= 0x94d049bb133111ebULL;
	z ^= z >> 31;
	return z;
}

static uint64_t pat_word(uint64_t seed, uint64_t w)
{
	return mix(seed ^ (w * 0x9E3779B97F4A7C15ULL));
}

static void pat_fill(uint8_t *b, size_t n, uint64_t seed)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t v = pat_word(seed, i / 8);

		memcpy(b + i, &v, 8);
	}
	if (i < n) {
		uint64_t v = pat_word(seed, i / 8);

		memcpy(b + i, &v, n - i);
	}
}

/* Returns the first differing offset, or -1. */
static long pat_check(const uint8_t *b, size_t n, uint64_t seed)
{
	size_t i;

	for (i = 0; i < n; i += 8) {
		uint64_t v = pat_word(seed, i / 8);
		size_t k = n - i < 8 ? n - i : 8;

		if (memcmp(b + i, &v, k))
			return i;
	}
	return -1;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t new_id(void)
{
	uint64_t id;

	pthread_mutex_lock(&req_lock);
	id = next_req++;
	pthread_mutex_unlock(&req_lock);
	return id;
}

static void hdr_init(struct vgpu_header *h, uint16_t op, uint32_t plen)
{
	memset(h, 0, sizeof(*h));
	h->magic = VGPU_MAGIC;
	h->major = VGPU_PROTO_MAJOR;
	h->minor = VGPU_PROTO_MINOR;
	h->opcode = op;
	h->request_id = new_id();
	h->payload_len = plen;
}

struct copy_frame {
	struct vgpu_header h;
	union {
		struct vgpu_memcpy_htod_req htod;
		struct vgpu_memcpy_dtoh_req dtoh;
	};
};

struct reply {
	struct vgpu_header h;
	uint8_t payload[256];
};

/* One copy through VGPU_IOC_CALL (or SUBMIT); returns -errno or the status. */
static int do_copy(int fd, bool htod, uint64_t dev, void *buf, uint64_t len,
		   uint64_t stream, unsigned long req, uint32_t hflags,
		   uint64_t *id)
{
	struct copy_frame f;
	struct reply r;
	struct vgpu_buf b = {
		.addr = (uintptr_t)buf, .len = len,
		.dir = htod ? VGPU_BUF_TO_HOST : VGPU_BUF_FROM_HOST,
	};
	struct vgpu_call c = {
		.frame = (uintptr_t)&f, .frame_len = sizeof(f),
		.nbufs = 1, .bufs = (uintptr_t)&b,
		.reply = (uintptr_t)&r, .reply_cap = sizeof(r),
	};
	struct vgpu_buf_ref ref = { .kind = VGPU_BUF_SEGMENTS, .index = 0, .len = len };

	hdr_init(&f.h, htod ? VGPU_OP_MEMCPY_HTOD : VGPU_OP_MEMCPY_DTOH,
		 sizeof(f.htod));
	f.h.flags = hflags;
	if (htod) {
		memset(&f.htod, 0, sizeof(f.htod));
		f.htod.dst = dev;
		f.htod.stream = stream;
		f.htod.src = ref;
	} else {
		memset(&f.dtoh, 0, sizeof(f.dtoh));
		f.dtoh.src = dev;
		f.dtoh.stream = stream;
		f.dtoh.dst = ref;
	}
	if (id)
		*id = f.h.request_id;
	if (ioctl(fd, req, &c))
		return -errno;
	if (req == VGPU_IOC_SUBMIT)
		return 0;
	if (c.reply_len < sizeof(struct vgpu_header) ||
	    r.h.request_id != f.h.request_id || !(r.h.flags & VGPU_FLAG_REPLY))
		return -EBADMSG;
	return r.h.status;
}

static int htod(int fd, uint64_t seed, void *buf, uint64_t len)
{
	return do_copy(fd, true, seed, buf, len, 0, VGPU_IOC_CALL, 0, NULL);
}

static int dtoh(int fd, uint64_t seed, void *buf, uint64_t len)
{
	return do_copy(fd, false, seed, buf, len, 0, VGPU_IOC_CALL, 0, NULL);
}

static int vopen(void)
{
	return open("/dev/vgpu", O_RDWR | O_CLOEXEC);
}

static void *map_anon(size_t len, bool thp)
{
	size_t align = 2 << 20;
	uint8_t *p = mmap(NULL, len + align, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	p = (uint8_t *)(((uintptr_t)p + align - 1) & ~(align - 1));
	madvise(p, len, thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
	return p;
}

static unsigned long read_param(const char *name)
{
	char path[128], buf[64] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/sys/module/vgpu/parameters/%s", name);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	return strtoul(buf, NULL, 10);
}

static void write_param(const char *name, unsigned long v)
{
	char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "/sys/module/vgpu/parameters/%s", name);
	f = fopen(path, "w");
	if (f) {
		fprintf(f, "%lu\n", v);
		fclose(f);
	}
}

/* ---- tests ---- */

static void t_info(void)
{
	struct vgpu_info info;
	int fd = vopen();

	CHECK(fd >= 0, "open /dev/vgpu: %s", strerror(errno));
	CHECK(!ioctl(fd, VGPU_IOC_INFO, &info), "INFO: %s", strerror(errno));
	close(fd);
	CHECK(info.uapi_version == VGPU_UAPI_VERSION, "uapi %u", info.uapi_version);
	CHECK(info.local_port > 0 && info.local_port < 1024,
	      "local port %u not privileged", info.local_port);
	CHECK(info.max_segments > 0, "max_segments 0");
	CHECK(info.host_port == VGPU_DEFAULT_PORT, "host port %u", info.host_port);
	printf("INFO session %llu local_port %u max_segments %u max_frame %u\n",
	       (unsigned long long)info.session_id, info.local_port,
	       info.max_segments, info.max_frame);
	printf("PASS %s\n", cur);
}

static void t_copy(bool thp)
{
	static const uint64_t sizes[] = {
		1, 7, 8, 4095, 4096, 4097, 65536 + 3, 1 << 20, (2 << 20) + 1,
		(16 << 20) + 5, 64 << 20,
	};
	static const size_t offs[] = { 0, 1, 2049, 4095 };
	size_t cap = (64 << 20) + 8192;
	uint8_t *mem = map_anon(cap, thp);
	unsigned int i, j;
	int fd = vopen(), st;

	CHECK(fd >= 0 && mem, "open/mmap: %s", strerror(errno));
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		for (j = 0; j < sizeof(offs) / sizeof(offs[0]); j++) {
			uint64_t n = sizes[i], seed = 0x1000 + i * 64 + j;
			uint8_t *p = mem + offs[j];
			long bad;

			if (n >= (16 << 20) && j > 1)
				continue;	/* keep TCG time down */
			pat_fill(p, n, seed);
			st = htod(fd, seed, p, n);
			CHECK(st == 0, "HtoD %llu bytes at +%zu: %d",
			      (unsigned long long)n, offs[j], st);
			/* A wrong pattern must be noticed by the host. */
			if (n < (1 << 20)) {
				st = htod(fd, seed + 1, p, n);
				CHECK(st == CUDA_ERROR_INVALID_VALUE,
				      "HtoD with a wrong seed: %d", st);
			}
			memset(p, 0xa5, n + 1);
			st = dtoh(fd, seed ^ 0x55, p, n);
			CHECK(st == 0, "DtoH %llu bytes at +%zu: %d",
			      (unsigned long long)n, offs[j], st);
			bad = pat_check(p, n, seed ^ 0x55);
			CHECK(bad < 0, "DtoH %llu bytes at +%zu: wrong byte at %ld",
			      (unsigned long long)n, offs[j], bad);
			CHECK(p[n] == 0xa5, "DtoH wrote past the buffer");
		}
	}
	close(fd);
	munmap(mem, cap);
	printf("PASS %s\n", cur);
}

static void t_copy_4k(void) { t_copy(false); }
static void t_copy_thp(void) { t_copy(true); }

/* Many buffers in one call; segments of two buffers never merge. */
static void t_multibuf(void)
{
	struct {
		struct vgpu_header h;
		struct vgpu_memcpy_htod_req r;
	} f;
	struct reply r;
	struct vgpu_buf b[2];
	struct vgpu_call c = {
		.frame = (uintptr_t)&f, .frame_len = sizeof(f), .nbufs = 2,
		.bufs = (uintptr_t)b, .reply = (uintptr_t)&r,
		.reply_cap = sizeof(r),
	};
	uint8_t *m = map_anon(8192, false);
	int fd = vopen();

	CHECK(fd >= 0 && m, "open");
	/* Two adjacent halves of one page: contiguous, yet two buffers. */
	pat_fill(m, 100, 77);
	b[0] = (struct vgpu_buf){ .addr = (uintptr_t)m, .len = 100, .dir = VGPU_BUF_TO_HOST };
	b[1] = (struct vgpu_buf){ .addr = (uintptr_t)m + 100, .len = 50, .dir = VGPU_BUF_TO_HOST };
	hdr_init(&f.h, VGPU_OP_MEMCPY_HTOD, sizeof(f.r));
	memset(&f.r, 0, sizeof(f.r));
	f.r.dst = 77;
	f.r.src = (struct vgpu_buf_ref){ .kind = VGPU_BUF_SEGMENTS, .index = 0, .len = 100 };
	CHECK(!ioctl(fd, VGPU_IOC_CALL, &c), "CALL: %s", strerror(errno));
	CHECK(r.h.status == 0, "status %d (buffers merged?)", r.h.status);
	CHECK(read_param("last_pin_segs") == 2, "segments %lu, want 2",
	      read_param("last_pin_segs"));
	close(fd);
	printf("PASS %s\n", cur);
}

static int call_raw(int fd, void *frame, uint32_t flen, struct vgpu_buf *b,
		    uint32_t nb, void *reply, uint32_t cap)
{
	struct vgpu_call c = {
		.frame = (uintptr_t)frame, .frame_len = flen, .nbufs = nb,
		.bufs = (uintptr_t)b, .reply = (uintptr_t)reply, .reply_cap = cap,
	};

	return ioctl(fd, VGPU_IOC_CALL, &c) ? -errno : 0;
}

static void t_errors(void)
{
	struct copy_frame f;
	struct reply r;
	uint8_t *m = map_anon(1 << 20, false);
	uint8_t *ro;
	struct vgpu_buf b = { .addr = (uintptr_t)m, .len = 64, .dir = VGPU_BUF_TO_HOST };
	struct vgpu_buf many[VGPU_MAX_BUFS + 1];
	int fd = vopen(), e;
	unsigned int i;

	CHECK(fd >= 0 && m, "open");
	pat_fill(m, 64, 5);
#define FRAME() do { hdr_init(&f.h, VGPU_OP_MEMCPY_HTOD, sizeof(f.htod));	\
	memset(&f.htod, 0, sizeof(f.htod)); f.htod.dst = 5;			\
	f.htod.src = (struct vgpu_buf_ref){ .kind = VGPU_BUF_SEGMENTS, .len = 64 }; } while (0)
	FRAME();
	CHECK((e = call_raw(fd, &f, sizeof(f), &b, 1, &r, sizeof(r))) == 0, "good call: %d", e);
	CHECK(r.h.status == 0, "good call status %d", r.h.status);

	FRAME(); f.h.flags = VGPU_FLAG_SEGMENTS;
	CHECK((e = call_raw(fd, &f, sizeof(f), &b, 1, &r, sizeof(r))) == -EPERM, "SEGMENTS flag: %d", e);
	FRAME(); f.h.num_segs = 1;
	CHECK((e = call_raw(fd, &f, sizeof(f), &b, 1, &r, sizeof(r))) == -EPERM, "num_segs: %d", e);
	FRAME(); f.h.flags = VGPU_FLAG_REPLY;
	CHECK((e = call_raw(fd, &f, sizeof(f), &b, 1, &r, sizeof(r))) == -EPERM, "REPLY flag: %d", e);
	FRAME(); f.h.flags = 0x100;
	CHECK((e = call_raw(fd, &f, sizeof(f), &b, 1, &r, sizeof(r))) == -EINVAL, "unknown flag: %d", e);
	FRAME(); f.h.magic = 0;
	CHECK((e = call_raw(fd, &f, sizeof(f), &b, 1, &r, sizeof(r))) == -EPROTO, "magic: %d", e);
	FRAME();
	CHECK((e = call_raw(fd, &f, 16, &b, 1, &r, sizeof(r))) == -EINVAL, "short frame: %d", e);
	CHECK((e = call_raw(fd, &f, sizeof(f) - 8, &b, 1, &r, sizeof(r))) == -EBADMSG, "length mismatch: %d", e);
	FRAME(); f.h.payload_len = 0x7fffffff;
	CHECK((e = call_raw(fd, &f, sizeof(f), &b, 1, &r, sizeof(r))) == -E2BIG, "huge payload: %d", e);
	FRAME(); f.h.request_id |= 1ULL << 63;
	CHECK((e = call_raw(fd, &f, sizeof(f), &b, 1, &r, sizeof(r))) == -EINVAL, "driver id: %d", e);
	FRAME();
	CHECK((e = call_raw(fd, (void *)8, sizeof(f), &b, 1, &r, sizeof(r))) == -EFAULT, "bad frame ptr: %d", e);

	FRAME(); b.len = 0;
	CHECK((e = call_raw(fd, &f, sizeof(f), &b, 1, &r, sizeof(r))) == -EINVAL, "zero length: %d", e);
	b.len = 64; b.dir = 4;
	CHECK((e = call_raw(fd, &f, sizeof(f), &b, 1, &r, sizeof(r))) == -EINVAL, "bad dir: %d", e);
	b.dir = VGPU_BUF_TO_HOST; b.addr = ~0ULL - 10;
	CHECK((e = call_raw(fd, &f, sizeof(f), &b, 1, &r, sizeof(r))) == -EOVERFLOW, "wrapping: %d", e);
	b.addr = 0x1000;
	CHECK((e = call_raw(fd, &f, sizeof(f), &b, 1, &r, sizeof(r))) == -EFAULT, "unmapped: %d", e);
	b.addr = 0xffff800000000000ULL;
	CHECK((e = call_raw(fd, &f, sizeof(f), &b, 1, &r, sizeof(r))) == -EFAULT, "kernel address: %d", e);
	ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	b.addr = (uintptr_t)ro; b.dir = VGPU_BUF_FROM_HOST;
	CHECK((e = call_raw(fd, &f, sizeof(f), &b, 1, &r, sizeof(r))) == -EFAULT, "read-only FROM_HOST: %d", e);
	b.dir = VGPU_BUF_TO_HOST; b.addr = (uintptr_t)m;
	for (i = 0; i < VGPU_MAX_BUFS + 1; i++)
		many[i] = b;
	CHECK((e = call_raw(fd, &f, sizeof(f), many, VGPU_MAX_BUFS + 1, &r, sizeof(r))) == -EINVAL, "9 buffers: %d", e);
	CHECK((e = call_raw(fd, &f, sizeof(f), &b, 1, &r, 16)) == -EMSGSIZE, "small reply: %d", e);
	FRAME(); f.h.flags = VGPU_FLAG_NO_REPLY;
	CHECK((e = call_raw(fd, &f, sizeof(f), &b, 1, &r, sizeof(r))) == -EINVAL, "CALL with NO_REPLY: %d", e);
	CHECK(ioctl(fd, _IO('V', 0x7f)) == -1 && errno == ENOTTY, "unknown ioctl: %s", strerror(errno));

	/* More segments than the host allows: one frame only, shuffled pages. */
	{
		struct vgpu_info info;
		size_t n = 4 << 20, pg, np = n / 4096;
		uint8_t *s = map_anon(n, false);
		unsigned long saved = read_param("max_frames");

		CHECK(!ioctl(fd, VGPU_IOC_INFO, &info), "INFO");
		for (pg = 0; pg < np; pg++)
			s[((pg * 7919) % np) * 4096] = 1;
		write_param("max_frames", 1);
		b.addr = (uintptr_t)s; b.len = n;
		FRAME(); f.htod.src.len = n;
		e = call_raw(fd, &f, sizeof(f), &b, 1, &r, sizeof(r));
		write_param("max_frames", saved);
		if (np > info.max_segments)
			CHECK(e == -E2BIG, "too many segments (%lu pages, host max %u): %d",
			      (unsigned long)np, info.max_segments, e);
	}
	close(fd);
	printf("PASS %s\n", cur);
}

struct thr_arg {
	int fd;
	int idx;
	int bad;
};

static void *thr_main(void *p)
{
	struct thr_arg *a = p;
	size_t n = 256 << 10;
	uint8_t *m = map_anon(n, false);
	int i;

	for (i = 0; i < 10 && m; i++) {
		uint64_t seed = 0x5000 + a->idx * 100 + i;

		pat_fill(m, n, seed);
		if (htod(a->fd, seed, m, n))
			a->bad++;
		if (dtoh(a->fd, seed + 1, m, n) || pat_check(m, n, seed + 1) >= 0)
			a->bad++;
	}
	if (!m)
		a->bad++;
	return NULL;
}

static void t_threads(void)
{
	pthread_t t[4];
	struct thr_arg a[4];
	int fd = vopen(), i, bad = 0;

	CHECK(fd >= 0, "open");
	for (i = 0; i < 4; i++) {
		a[i] = (struct thr_arg){ .fd = fd, .idx = i };
		pthread_create(&t[i], NULL, thr_main, &a[i]);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		bad += a[i].bad;
	}
	close(fd);
	CHECK(!bad, "%d calls failed", bad);
	printf("PASS %s\n", cur);
}

static void t_kill(void)
{
	double t0;
	pid_t pid;
	int status, fd;
	uint8_t *m;

	pid = fork();
	if (pid == 0) {
		fd = vopen();
		m = map_anon(8 << 20, false);
		memset(m, 0, 8 << 20);
		/* The host holds this reply for its delay, then writes m. */
		do_copy(fd, false, 42, m, 8 << 20, PAT_STREAM_DELAY,
			VGPU_IOC_CALL, 0, NULL);
		_exit(3);
	}
	CHECK(pid > 0, "fork");
	usleep(500 * 1000);
	t0 = now();
	kill(pid, SIGKILL);
	CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
	      "child was not killed mid-call (status %#x)", status);
	printf("INFO killed child reaped in %.2f s\n", now() - t0);

	/* The driver and the host are still fine. */
	fd = vopen();
	CHECK(fd >= 0, "open after kill");
	m = map_anon(1 << 20, false);
	pat_fill(m, 1 << 20, 9);
	CHECK(htod(fd, 9, m, 1 << 20) == 0, "call after kill");
	close(fd);
	printf("PASS %s\n", cur);
}

static volatile sig_atomic_t got_alarm;

static void on_alarm(int sig)
{
	(void)sig;
	got_alarm = 1;
}

static void t_interrupt(void)
{
	uint8_t *m = map_anon(1 << 20, false);
	int fd = vopen(), e;

	CHECK(fd >= 0, "open");
	/* A call that times out leaves its pages to the host until it answers. */
	{
		struct copy_frame f;
		struct reply r;
		struct vgpu_buf b = { .addr = (uintptr_t)m, .len = 4096, .dir = VGPU_BUF_FROM_HOST };
		struct vgpu_call c = {
			.frame = (uintptr_t)&f, .frame_len = sizeof(f), .nbufs = 1,
			.bufs = (uintptr_t)&b, .reply = (uintptr_t)&r,
			.reply_cap = sizeof(r), .timeout_ms = 200,
		};

		hdr_init(&f.h, VGPU_OP_MEMCPY_DTOH, sizeof(f.dtoh));
		memset(&f.dtoh, 0, sizeof(f.dtoh));
		f.dtoh.src = 11;
		f.dtoh.stream = PAT_STREAM_DELAY;
		f.dtoh.dst = (struct vgpu_buf_ref){ .kind = VGPU_BUF_SEGMENTS, .len = 4096 };
		e = ioctl(fd, VGPU_IOC_CALL, &c) ? -errno : 0;
		CHECK(e == -ETIMEDOUT, "timed-out call: %d", e);
	}
	pat_fill(m, 4096, 12);
	CHECK((e = htod(fd, 12, m, 4096)) == 0, "call after a timeout: %d", e);

	/* A caught signal neither ends nor restarts a call that was sent. */
	{
		struct sigaction sa = { .sa_handler = on_alarm };
		struct itimerval it = { .it_value = { .tv_usec = 300000 } };

		sigaction(SIGALRM, &sa, NULL);	/* no SA_RESTART */
		got_alarm = 0;
		setitimer(ITIMER_REAL, &it, NULL);
		e = do_copy(fd, false, 13, m, 8192, PAT_STREAM_DELAY,
			    VGPU_IOC_CALL, 0, NULL);
		CHECK(e == 0, "call across a caught signal: %d", e);
		CHECK(got_alarm, "the signal handler did not run");
		CHECK(pat_check(m, 8192, 13) < 0, "data of the call across a signal");
	}
	close(fd);	/* waits for the delayed reply before unpinning */
	printf("PASS %s\n", cur);
}

static void t_hostclose(void)
{
	struct reply r;
	struct vgpu_recv rv = { .buf = (uintptr_t)&r, .cap = sizeof(r) };
	uint8_t *m = map_anon(1 << 20, false);
	int fd = vopen(), e;

	CHECK(fd >= 0 && m, "open");
	e = do_copy(fd, false, 1, m, 4096, PAT_STREAM_CLOSE, VGPU_IOC_CALL, 0, NULL);
	CHECK(e == -EPIPE, "call the host dropped: %d", e);
	pat_fill(m, 4096, 2);
	CHECK((e = htod(fd, 2, m, 4096)) == -EPIPE, "call after the host left: %d", e);
	CHECK(ioctl(fd, VGPU_IOC_RECV, &rv) == -1 && errno == EPIPE,
	      "RECV after the host left: %s", strerror(errno));
	close(fd);
	fd = vopen();
	CHECK(fd >= 0, "open again: %s", strerror(errno));
	CHECK((e = htod(fd, 2, m, 4096)) == 0, "call on a new session: %d", e);
	/* A reply header with an absurd size ends the session, nothing else. */
	e = do_copy(fd, false, 1, m, 4096, PAT_STREAM_GARBAGE, VGPU_IOC_CALL, 0, NULL);
	CHECK(e == -EPROTO, "garbage reply: %d", e);
	CHECK((e = htod(fd, 2, m, 4096)) == -EPROTO, "call after garbage: %d", e);
	close(fd);
	fd = vopen();
	CHECK(fd >= 0 && htod(fd, 2, m, 4096) == 0, "new session after garbage");
	close(fd);
	printf("PASS %s\n", cur);
}

static void t_nonroot(void)
{
	pid_t pid = fork();
	int status;

	if (pid == 0) {
		struct sockaddr_vm a = {
			.svm_family = AF_VSOCK, .svm_cid = 2,
			.svm_port = VGPU_DEFAULT_PORT,
		};
		struct vgpu_info info;
		uint8_t buf[4096];
		int s, fd;

		if (setgid(65534) || setuid(65534))
			_exit(10);
		s = socket(AF_VSOCK, SOCK_STREAM, 0);
		if (s < 0)
			_exit(11);
		if (connect(s, (struct sockaddr *)&a, sizeof(a)) == 0) {
			/* Refused by RST right after connecting is also fine. */
			char c;

			if (read(s, &c, 1) != 0 && errno != ECONNRESET)
				_exit(12);
		}
		close(s);
		/* Through the driver the same user gets a privileged stream. */
		fd = vopen();
		if (fd < 0)
			_exit(13);
		if (ioctl(fd, VGPU_IOC_INFO, &info) || info.local_port >= 1024)
			_exit(14);
		pat_fill(buf, sizeof(buf), 3);
		if (htod(fd, 3, buf, sizeof(buf)))
			_exit(15);
		_exit(0);
	}
	CHECK(pid > 0, "fork");
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "non-root child failed with status %d (12: host accepted an unprivileged port)",
	      WEXITSTATUS(status));
	printf("PASS %s\n", cur);
}

static void t_register(void)
{
	size_t n = 1 << 20;
	uint8_t *m = map_anon(n, false);
	struct vgpu_register reg = { .addr = (uintptr_t)m + 100, .len = n - 200 };
	uint64_t id;
	int fd = vopen();

	CHECK(fd >= 0 && m, "open");
	memset(m, 1, n);
	CHECK(!ioctl(fd, VGPU_IOC_REGISTER, &reg), "REGISTER: %s", strerror(errno));
	CHECK(reg.region != 0, "region id 0");
	id = reg.region;
	CHECK(!ioctl(fd, VGPU_IOC_UNREGISTER, &id), "UNREGISTER: %s", strerror(errno));
	CHECK(ioctl(fd, VGPU_IOC_UNREGISTER, &id) == -1 && errno == ENOENT,
	      "second UNREGISTER: %s", strerror(errno));
	reg.addr = 0x1000;
	CHECK(ioctl(fd, VGPU_IOC_REGISTER, &reg) == -1 && errno == EFAULT,
	      "REGISTER unmapped: %s", strerror(errno));
	reg.addr = (uintptr_t)m;
	reg.flags = 0x80;
	CHECK(ioctl(fd, VGPU_IOC_REGISTER, &reg) == -1 && errno == EINVAL,
	      "REGISTER bad flags: %s", strerror(errno));
	/* Scattered pages: more segments than one frame takes (continuations). */
	{
		size_t sn = 8 << 20, pg, np = sn / 4096;
		uint8_t *sc = map_anon(sn, false);
		struct vgpu_register sreg = { .addr = (uintptr_t)sc, .len = sn };

		for (pg = 0; pg < np; pg++)
			sc[((pg * 7919) % np) * 4096] = 1;
		CHECK(!ioctl(fd, VGPU_IOC_REGISTER, &sreg), "REGISTER scattered: %s",
		      strerror(errno));
		id = sreg.region;
		CHECK(!ioctl(fd, VGPU_IOC_UNREGISTER, &id), "UNREGISTER scattered: %s",
		      strerror(errno));
		munmap(sc, sn);
	}
	/* Left registered on purpose: close releases it. */
	reg.flags = 0;
	CHECK(!ioctl(fd, VGPU_IOC_REGISTER, &reg), "REGISTER again: %s", strerror(errno));
	close(fd);
	printf("PASS %s\n", cur);
}

static void t_mmap(void)
{
	size_t n = 8 << 20;
	int fd = vopen();
	uint8_t *m;
	struct vgpu_register reg = { .len = n, .flags = VGPU_REG_MAPPED };
	uint64_t segs;

	CHECK(fd >= 0, "open");
	m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(m != MAP_FAILED, "mmap: %s", strerror(errno));
	CHECK(mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0) == MAP_FAILED,
	      "private mmap accepted");
	pat_fill(m, n, 21);
	CHECK(htod(fd, 21, m, n) == 0, "HtoD from mapped memory");
	printf("INFO mmap 8 MiB: call used %lu segments\n", read_param("last_pin_segs"));
	CHECK(dtoh(fd, 22, m + 5, n - 5) == 0 && pat_check(m + 5, n - 5, 22) < 0,
	      "DtoH into mapped memory");
	reg.addr = (uintptr_t)m;
	CHECK(!ioctl(fd, VGPU_IOC_REGISTER, &reg), "REGISTER mapped: %s", strerror(errno));
	segs = reg.dev_ptr - PAT_DEVPTR_BASE;
	printf("INFO mmap 8 MiB: registered as %llu segments\n", (unsigned long long)segs);
	CHECK(segs >= 1 && segs <= 8, "mapped memory in %llu segments", (unsigned long long)segs);
	/* Unmapping keeps the registered memory alive until close. */
	munmap(m, n);
	close(fd);
	printf("PASS %s\n", cur);
}

static void t_submit(void)
{
	uint8_t *m = map_anon(1 << 20, false);
	struct reply r;
	struct vgpu_recv rv = { .buf = (uintptr_t)&r, .cap = sizeof(r), .timeout_ms = 300 };
	uint64_t id;
	int fd = vopen(), e;

	CHECK(fd >= 0 && m, "open");
	pat_fill(m, 1 << 20, 31);
	e = do_copy(fd, true, 31, m, 1 << 20, 0, VGPU_IOC_SUBMIT, 0, NULL);
	CHECK(e == 0, "SUBMIT: %d", e);
	e = do_copy(fd, true, 32, m, 1 << 20, 0, VGPU_IOC_SUBMIT, VGPU_FLAG_NO_REPLY, &id);
	CHECK(e == 0, "SUBMIT wrong pattern: %d", e);
	rv.timeout_ms = 5000;
	CHECK(!ioctl(fd, VGPU_IOC_RECV, &rv), "RECV: %s", strerror(errno));
	CHECK(r.h.request_id == id && r.h.status == CUDA_ERROR_INVALID_VALUE,
	      "RECV got id %llu status %d, want %llu/%d",
	      (unsigned long long)r.h.request_id, r.h.status,
	      (unsigned long long)id, CUDA_ERROR_INVALID_VALUE);
	rv.timeout_ms = 300;
	CHECK(ioctl(fd, VGPU_IOC_RECV, &rv) == -1 && errno == EAGAIN,
	      "RECV with nothing queued: %s", strerror(errno));

	/* Flow control: the 1025th submission with buffers waits for a reply. */
	{
		double t0 = now(), t1;
		int i;

		for (i = 0; i < 1024; i++) {
			e = do_copy(fd, false, 40, m + (i % 256) * 4096, 4096,
				    PAT_STREAM_DELAY, VGPU_IOC_SUBMIT, 0, NULL);
			CHECK(e == 0, "SUBMIT %d: %d", i, e);
		}
		t1 = now();
		e = do_copy(fd, false, 40, m, 4096, 0, VGPU_IOC_SUBMIT, 0, NULL);
		CHECK(e == 0, "SUBMIT 1025: %d", e);
		printf("INFO 1024 submissions in %.2f s; the 1025th waited %.2f s\n",
		       t1 - t0, now() - t1);
		CHECK(now() - t1 > 0.5, "the 1025th submission did not wait");
		rv.timeout_ms = 300;
		CHECK(ioctl(fd, VGPU_IOC_RECV, &rv) == -1 && errno == EAGAIN,
		      "RECV after successful submissions: %s", strerror(errno));
	}

	/* No buffers, no reply: the host's error comes as a notification. */
	{
		struct vgpu_header h;
		struct vgpu_call c = { .frame = (uintptr_t)&h, .frame_len = sizeof(h) };

		hdr_init(&h, VGPU_OP_DEVICE_RESET, 0);
		h.flags = VGPU_FLAG_NO_REPLY;
		id = h.request_id;
		CHECK(!ioctl(fd, VGPU_IOC_SUBMIT, &c), "SUBMIT NO_REPLY: %s", strerror(errno));
		rv.timeout_ms = 5000;
		rv.cap = 8;
		CHECK(ioctl(fd, VGPU_IOC_RECV, &rv) == -1 && errno == EMSGSIZE && rv.len > 8,
		      "RECV into a small buffer: %s", strerror(errno));
		rv.cap = sizeof(r);
		CHECK(!ioctl(fd, VGPU_IOC_RECV, &rv), "RECV notify: %s", strerror(errno));
		CHECK((r.h.flags & VGPU_FLAG_NOTIFY) && r.h.opcode == VGPU_OP_NOTIFY_ERROR,
		      "want an error notification, got op %#x flags %#x", r.h.opcode, r.h.flags);
		{
			struct vgpu_error_notify en;

			memcpy(&en, r.payload, sizeof(en));
			CHECK(en.request_id == id && en.error == CUDA_ERROR_NOT_SUPPORTED,
			      "notification for %llu error %d",
			      (unsigned long long)en.request_id, en.error);
		}
	}
	close(fd);
	printf("PASS %s\n", cur);
}

static void bench_one(const char *name, bool thp, bool scatter)
{
	size_t n = 64 << 20, pg, np = n / 4096;
	uint8_t *m = map_anon(n, thp);
	unsigned long best = ~0UL, pages = 0, segs = 0;
	double t0, best_call = 1e9;
	int fd = vopen(), i;

	CHECK(fd >= 0 && m, "open");
	/* Fault the pages in a scattered order: few physically adjacent. */
	for (pg = 0; scatter && pg < np; pg++)
		m[((pg * 7919) % np) * 4096] = 1;
	pat_fill(m, n, 0xbe);
	for (i = 0; i < 5; i++) {
		t0 = now();
		CHECK(htod(fd, 0xbe, m, n) == 0, "HtoD 64 MiB");
		if (now() - t0 < best_call)
			best_call = now() - t0;
		if (read_param("last_pin_ns") < best) {
			best = read_param("last_pin_ns");
			pages = read_param("last_pin_pages");
			segs = read_param("last_pin_segs");
		}
	}
	close(fd);
	printf("BENCH %s pin+translate 64MiB: %.3f ms (best of 5), %lu pages, %lu segments; whole call %.3f ms\n",
	       name, best / 1e6, pages, segs, best_call * 1e3);
}

static void t_bench(void)
{
	bench_one("4k", false, false);
	bench_one("4k-scattered", false, true);
	bench_one("thp", true, false);
	printf("PASS %s\n", cur);
}

/* ---- module load/unload ---- */

static int load(const char *ko, const char *params)
{
	int fd = open(ko, O_RDONLY | O_CLOEXEC), err;

	if (fd < 0)
		return -errno;
	err = syscall(SYS_finit_module, fd, params, 0) ? -errno : 0;
	close(fd);
	return err;
}

static int unload(void)
{
	return syscall(SYS_delete_module, "vgpu", O_NONBLOCK) ? -errno : 0;
}

static void t_load(const char *ko, const char *params)
{
	int e;

	unload();
	CHECK((e = load(ko, params)) == 0, "load: %s", strerror(-e));
	CHECK(access("/dev/vgpu", F_OK) == 0 || (usleep(200000), access("/dev/vgpu", F_OK) == 0),
	      "no /dev/vgpu after load");
	{
		int fd = vopen();

		CHECK(fd >= 0, "open: %s", strerror(errno));
		e = unload();
		CHECK(e == -EWOULDBLOCK || e == -EBUSY, "unload while open: %d", e);
		close(fd);
	}
	CHECK((e = unload()) == 0, "unload: %s", strerror(-e));
	CHECK((e = load(ko, params)) == 0, "load again: %s", strerror(-e));
	printf("PASS %s\n", cur);
}

struct test {
	const char *name;
	void (*fn)(void);
};

static const struct test tests[] = {
	{ "info", t_info },
	{ "errors", t_errors },
	{ "copy_4k", t_copy_4k },
	{ "copy_thp", t_copy_thp },
	{ "multibuf", t_multibuf },
	{ "threads", t_threads },
	{ "register", t_register },
	{ "mmap", t_mmap },
	{ "submit", t_submit },
	{ "interrupt", t_interrupt },
	{ "kill", t_kill },
	{ "hostclose", t_hostclose },
	{ "nonroot", t_nonroot },
	{ "bench", t_bench },
};

int main(int argc, char **argv)
{
	const char *ko = NULL, *params = "";
	unsigned int i;
	int opt, a;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((opt = getopt(argc, argv, "m:p:")) != -1) {
		if (opt == 'm')
			ko = optarg;
		else if (opt == 'p')
			params = optarg;
		else
			return 100;
	}
	if (ko) {
		cur = "load";
		t_load(ko, params);
		if (failures)
			return failures;
	}
	for (i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		bool run = optind >= argc;

		for (a = optind; a < argc; a++)
			run |= !strcmp(argv[a], tests[i].name);
		if (!run)
			continue;
		cur = tests[i].name;
		printf("RUN %s\n", cur);
		tests[i].fn();
	}
	printf("DONE %d failures\n", failures);
	return failures;
}
