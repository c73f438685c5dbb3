/*
 * ring_hostile_test.c - the library against a backend that breaks the
 * shared-memory ring's rules (VGPU_FEATURE_SHM_RING): a thread of this
 * process plays the backend on a unix socket, accepts HELLO and RING_SETUP
 * (answering on the completion ring, as a real backend does), then
 * publishes a completion-ring tail past the ring's size. Every call must
 * then fail with CUDA_ERROR_DEVICE_UNAVAILABLE (46): no crash, no read
 * outside the mapping, no hang (run.sh runs it under a timeout).
 * With "batchsync", the backend offers BATCH_SYNC and answers every
 * request on the completion ring, but answers a BATCH_SYNC with a reply
 * whose inner frame (the synchronous call's own reply) claims more bytes
 * than came: the call that carried the queue must fail with 46, as every
 * call after it, with no crash or hang.
 * Usage: ring_hostile_test SOCKET_PATH [batchsync]
 */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "vgpu_protocol.h"

int cuInit(unsigned);
int cuDeviceGetCount(int *);
int cuDriverGetVersion(int *);
int cuMemsetD8Async(unsigned long long, unsigned char, size_t, void *);
int cuStreamSynchronize(void *);

static int lsock;
static int batchsync; /* the BATCH_SYNC reply lies, instead of the ring's tail */

static int read_full(int s, void *p, size_t n, int *fds, int *nfds)
{
	uint8_t *b = p;
	while (n) {
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(sizeof(int) * 8)];
		} cm;
		struct iovec iov = {.iov_base = b, .iov_len = n};
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof cm.buf};
		ssize_t r = recvmsg(s, &mh, 0);
		if (r <= 0)
			return -1;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c && fds; c = CMSG_NXTHDR(&mh, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
				int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
				memcpy(fds + *nfds, CMSG_DATA(c), sizeof(int) * (size_t)k);
				*nfds += k;
			}
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/* Reads one request (header + payload); returns its header. */
static int read_req(int s, struct vgpu_header *h, int *fds, int *nfds)
{
	uint8_t body[4096];
	if (read_full(s, h, sizeof *h, fds, nfds) != 0)
		return -1;
	uint64_t n = vgpu_frame_len(h->payload_len, h->num_segs) - sizeof *h;
	if (n > sizeof body)
		return -1;
	return read_full(s, body, n, fds, nfds);
}

/* batchsync: answers each request on the request ring in order (status 0,
 * no payload; nothing for FlagNoReply), but a BATCH_SYNC with a reply whose
 * inner frame says 4096 payload bytes and carries none. */
static void serve_lying(uint8_t *mem, int bell, uint64_t ctail)
{
	uint8_t *req = mem + VGPU_RING_HEADER_SIZE;
	uint8_t *comp = req + VGPU_RING_DEFAULT_BYTES;
	uint64_t head = 0;
	for (;;) {
		uint64_t tail = __atomic_load_n((uint64_t *)(mem + VGPU_RING_OFF_REQ_TAIL), __ATOMIC_SEQ_CST);
		if (tail - head < VGPU_HEADER_SIZE) {
			usleep(100);
			continue;
		}
		struct vgpu_header h;
		memcpy(&h, req + head % VGPU_RING_DEFAULT_BYTES, sizeof h); /* a few small frames: no wrap */
		uint64_t n = vgpu_frame_len(h.payload_len, 0);
		while (__atomic_load_n((uint64_t *)(mem + VGPU_RING_OFF_REQ_TAIL), __ATOMIC_SEQ_CST) - head < n)
			usleep(100);
		head += n;
		__atomic_store_n((uint64_t *)(mem + VGPU_RING_OFF_REQ_HEAD), head, __ATOMIC_SEQ_CST);
		if (h.flags & VGPU_FLAG_NO_REPLY)
			continue;
		struct {
			struct vgpu_header h;
			struct vgpu_batch_sync_reply r;
			struct vgpu_header inner;
		} rep;
		memset(&rep, 0, sizeof rep);
		rep.h = h;
		rep.h.flags = VGPU_FLAG_REPLY;
		size_t len = sizeof rep.h;
		if (h.opcode == VGPU_OP_BATCH_SYNC) {
			rep.h.payload_len = sizeof rep.r + sizeof rep.inner;
			rep.r.ran = 1;
			rep.inner.magic = VGPU_MAGIC;
			rep.inner.major = VGPU_PROTO_MAJOR;
			rep.inner.flags = VGPU_FLAG_REPLY;
			rep.inner.opcode = VGPU_OP_STREAM_SYNCHRONIZE;
			rep.inner.payload_len = 4096; /* the lie: no such bytes follow */
			len = sizeof rep;
		} else {
			rep.h.payload_len = 0;
		}
		memcpy(comp + ctail % VGPU_RING_DEFAULT_BYTES, &rep, len);
		ctail += len;
		__atomic_store_n((uint64_t *)(mem + VGPU_RING_OFF_COMP_TAIL), ctail, __ATOMIC_SEQ_CST);
		uint64_t one = 1;
		if (write(bell, &one, sizeof one) < 0)
			return;
	}
}

static void *backend(void *arg)
{
	(void)arg;
	int s = accept(lsock, NULL, NULL);
	struct vgpu_header h;
	int fds[8], nfds = 0;
	if (s < 0 || read_req(s, &h, NULL, NULL) != 0 || h.opcode != VGPU_OP_HELLO)
		return NULL;
	struct {
		struct vgpu_header h;
		struct vgpu_hello_reply r;
	} hr;
	memset(&hr, 0, sizeof hr);
	hr.h = h;
	hr.h.flags = VGPU_FLAG_REPLY;
	hr.h.payload_len = sizeof hr.r;
	hr.r.major = VGPU_PROTO_MAJOR;
	hr.r.device_count = 1;
	hr.r.features = VGPU_FEATURE_SHM_RING | VGPU_FEATURE_INLINE;
	if (batchsync)
		hr.r.features |= VGPU_FEATURE_BATCH | VGPU_FEATURE_BATCH_SYNC;
	hr.r.max_payload = 1 << 20;
	hr.r.max_batch = 256;
	if (write(s, &hr, sizeof hr) != sizeof hr)
		return NULL;
	if (read_req(s, &h, fds, &nfds) != 0 || h.opcode != VGPU_OP_RING_SETUP || nfds != VGPU_RING_FDS)
		return NULL;
	size_t len = VGPU_RING_HEADER_SIZE + 2 * (size_t)VGPU_RING_DEFAULT_BYTES;
	uint8_t *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	if (mem == MAP_FAILED)
		return NULL;
	/* The reply, as the first frame on the completion ring. */
	struct vgpu_header rep = h;
	rep.flags = VGPU_FLAG_REPLY;
	rep.payload_len = 0;
	uint8_t *comp = mem + VGPU_RING_HEADER_SIZE + VGPU_RING_DEFAULT_BYTES;
	memcpy(comp, &rep, sizeof rep);
	__atomic_store_n((uint64_t *)(mem + VGPU_RING_OFF_COMP_TAIL), sizeof rep, __ATOMIC_SEQ_CST);
	uint64_t one = 1;
	if (write(fds[3], &one, sizeof one) < 0)
		return NULL;
	if (batchsync) {
		serve_lying(mem, fds[3], sizeof rep);
		pause();
		return NULL;
	}
	/* Then, once the library has read it, a tail far past the ring. */
	while (__atomic_load_n((uint64_t *)(mem + VGPU_RING_OFF_COMP_HEAD), __ATOMIC_SEQ_CST) != sizeof rep)
		usleep(1000);
	__atomic_store_n((uint64_t *)(mem + VGPU_RING_OFF_COMP_TAIL), (uint64_t)VGPU_RING_DEFAULT_BYTES * 3,
			 __ATOMIC_SEQ_CST);
	if (write(fds[3], &one, sizeof one) < 0)
		return NULL;
	/* Keep the socket open: the library must notice the ring, not the socket. */
	pause();
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	batchsync = argc > 2 && !strcmp(argv[2], "batchsync");
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", argv[1]);
	unlink(argv[1]);
	lsock = socket(AF_UNIX, SOCK_STREAM, 0);
	if (lsock < 0 || bind(lsock, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lsock, 1) != 0) {
		perror("listen");
		return 2;
	}
	pthread_t t;
	pthread_create(&t, NULL, backend, NULL);
	char env[200];
	snprintf(env, sizeof env, "unix:%s", argv[1]);
	setenv("VGPU_TRANSPORT", env, 1);
	setenv("VGPU_RING_SPIN_US", "20", 1);
	int bad = 0, n = -1, v = 0;
	if (batchsync) {
		int i0 = cuInit(0);
		int q = cuMemsetD8Async(0x10000, 1, 8, NULL);
		int r = cuStreamSynchronize(NULL);
		int after = cuDeviceGetCount(&n);
		bad = i0 != 0 || q != 0 || r != 46 || after != 46;
		unlink(argv[1]);
		printf("%s lying BATCH_SYNC reply: cuInit %d, queued memset %d, cuStreamSynchronize %d (want 46), then %d (want 46)\n",
		       bad ? "FAIL" : "ok  ", i0, q, r, after);
		return bad;
	}
	int r0 = cuInit(0);
	int r1 = cuDeviceGetCount(&n);
	int r2 = cuDriverGetVersion(&v);
	if (r1 != 46 && r0 != 46) {
		printf("FAIL cuInit = %d, cuDeviceGetCount = %d: want 46 once the ring is corrupt\n", r0, r1);
		bad++;
	}
	if (r2 == 0 && v == 0) {
		printf("FAIL cuDriverGetVersion succeeded with no version\n");
		bad++;
	}
	unlink(argv[1]);
	printf("%s corrupt completion ring: cuInit %d, cuDeviceGetCount %d, cuDriverGetVersion %d\n", bad ? "FAIL" : "ok  ", r0, r1, r2);
	return bad;
}
