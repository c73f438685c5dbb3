// SPDX-License-Identifier: GPL-2.0
/*
 * vgpu_session.c - one session: a kernel vsock stream to the host, the HELLO
 * exchange, sending frames, and the reader thread that hands replies to the
 * calls waiting for them and queues notifications.
 *
 * Protocol primer (protocol/doc.go has the full text): every message is a
 * 32-byte header, a payload padded to 8 bytes and, in requests from this
 * driver only, a list of 16-byte guest-physical segments. A reply carries the
 * request's id and FlagReply; frames with FlagNotify come unasked. A segment
 * list longer than the host's max_segments continues in OpSegments frames
 * with the same id; the first frame then has FlagMoreSegments.
 *
 * Trust: the host is trusted with guest memory it was given, not with sizes:
 * every header it sends is checked before anything is allocated, and a
 * malformed frame ends the session instead of the guest.
 */
#include <linux/cred.h>
#include <linux/kthread.h>
#include <linux/mm.h>
#include <linux/net.h>
#include <linux/sched/signal.h>
#include <linux/signal.h>
#include <linux/slab.h>
#include <linux/socket.h>
#include <linux/vm_sockets.h>
#include <net/sock.h>

#include "vgpu_drv.h"

/* How long connecting and HELLO may take before open() fails. */
#define VGPU_HELLO_TIMEOUT_MS	10000

static int vgpu_sock_recv_all(struct socket *sock, void *buf, size_t len)
{
	struct msghdr msg = { .msg_flags = MSG_WAITALL };
	struct kvec vec;
	int ret;

	while (len) {
		vec.iov_base = buf;
		vec.iov_len = len;
		ret = kernel_recvmsg(sock, &msg, &vec, 1, len, MSG_WAITALL);
		if (ret < 0)
			return ret;
		if (ret == 0)
			return -ECONNRESET;
		buf += ret;
		len -= ret;
	}
	return 0;
}

/* Where the next session starts looking for a free privileged port. */
static atomic_t vgpu_port_cursor = ATOMIC_INIT(0);

/*
 * Bind a privileged source port, walking down the reserved range and
 * retrying on -EADDRINUSE. Each session starts one port below where the last
 * one started (wrapping), so a port whose connection the host may still be
 * tearing down is not reused at once. Runs in the reader thread: a kernel
 * thread has the capability that binding a port below 1024 needs, whoever
 * opened the file.
 */
static int vgpu_bind_privport(struct vgpu_session *s)
{
	const unsigned int range = VGPU_PRIVPORT_MAX - VGPU_PRIVPORT_MIN + 1;
	unsigned int start = (unsigned int)atomic_inc_return(&vgpu_port_cursor) - 1;
	struct sockaddr_vm addr = {
		.svm_family = AF_VSOCK,
		.svm_cid = VMADDR_CID_ANY,
	};
	unsigned int i;
	int err = -EADDRINUSE;

	for (i = 0; i < range; i++) {
		addr.svm_port = VGPU_PRIVPORT_MAX - (start + i) % range;
		err = kernel_bind(s->sock, (struct sockaddr *)&addr,
				  sizeof(addr));
		if (err != -EADDRINUSE)
			break;
	}
	if (!err)
		s->local_port = addr.svm_port;
	return err;
}

static int vgpu_hello(struct vgpu_session *s)
{
	struct vgpu_hello_req req = {
		.major = VGPU_PROTO_MAJOR,
		.minor = VGPU_PROTO_MINOR,
		.role = VGPU_ROLE_DRIVER,
		.features = VGPU_FEATURE_SEGMENTS,
		.pid = s->opener_tgid,
		.uid = s->opener_uid,
	};
	struct vgpu_hello_reply rep = {};
	struct vgpu_header hdr = {
		.magic = VGPU_MAGIC,
		.major = VGPU_PROTO_MAJOR,
		.minor = VGPU_PROTO_MINOR,
		.opcode = VGPU_OP_HELLO,
	};
	struct vgpu_header rh;
	u64 rest;
	void *buf;
	int err;

	hdr.request_id = vgpu_session_new_id(s);
	strscpy(req.client_version, "vgpu.ko " VGPU_DRV_VERSION,
		sizeof(req.client_version));
	err = vgpu_session_send(s, &hdr, &req, sizeof(req), NULL, 0);
	if (err)
		return err;

	err = vgpu_sock_recv_all(s->sock, &rh, sizeof(rh));
	if (err)
		return err;
	if (rh.magic != VGPU_MAGIC || rh.major != VGPU_PROTO_MAJOR ||
	    !(rh.flags & VGPU_FLAG_REPLY) || rh.opcode != VGPU_OP_HELLO ||
	    rh.request_id != hdr.request_id || rh.num_segs ||
	    rh.payload_len > 4096)
		return -EPROTO;
	rest = vgpu_frame_len(rh.payload_len, 0) - VGPU_HEADER_SIZE;
	buf = kzalloc(max_t(u64, rest, sizeof(rep)), GFP_KERNEL);
	if (!buf)
		return -ENOMEM;
	err = vgpu_sock_recv_all(s->sock, buf, rest);
	if (!err && rh.status)
		err = -ECONNREFUSED;
	if (!err && rh.payload_len < sizeof(rep))
		err = -EPROTO;
	if (!err)
		memcpy(&rep, buf, sizeof(rep));
	kfree(buf);
	if (err)
		return err;

	s->max_payload = min_t(u32, rep.max_payload ? rep.max_payload :
			       VGPU_DEFAULT_MAX_PAYLOAD, VGPU_MAX_RX_PAYLOAD);
	s->max_segments = rep.max_segments;
	if (!(rep.features & VGPU_FEATURE_SEGMENTS))
		s->max_segments = 0;
	s->session_id = rep.session_id;
	return 0;
}

static int vgpu_connect(struct vgpu_session *s)
{
	struct sockaddr_vm addr = {
		.svm_family = AF_VSOCK,
		.svm_cid = vgpu_cid,
		.svm_port = vgpu_port,
	};
	long tmo = msecs_to_jiffies(VGPU_HELLO_TIMEOUT_MS);
	int err;

	err = sock_create_kern(&init_net, AF_VSOCK, SOCK_STREAM, 0, &s->sock);
	if (err)
		return err;
	err = vgpu_bind_privport(s);
	if (err)
		return err;
	err = kernel_connect(s->sock, (struct sockaddr *)&addr, sizeof(addr), 0);
	if (err == -ECONNRESET)
		err = -ECONNREFUSED;	/* the host answered RST: nobody listens */
	if (err)
		return err;

	s->sock->sk->sk_rcvtimeo = tmo;
	s->sock->sk->sk_sndtimeo = tmo;
	err = vgpu_hello(s);
	s->sock->sk->sk_rcvtimeo = MAX_SCHEDULE_TIMEOUT;
	s->sock->sk->sk_sndtimeo = MAX_SCHEDULE_TIMEOUT;
	if (err == -EAGAIN)
		err = -ETIMEDOUT;	/* no HELLO reply in time */
	return err;
}

/*
 * Mark the session dead and fail every waiting call. Submissions and orphans
 * stay on the pending list, pinned: the host may still be using their pages
 * until the stream is shut down in vgpu_session_close().
 */
static void vgpu_session_kill(struct vgpu_session *s, int err)
{
	struct vgpu_req *req, *tmp;

	spin_lock(&s->lock);
	if (!s->dead)
		s->dead = err;
	list_for_each_entry_safe(req, tmp, &s->pending, node) {
		if (req->kind != VGPU_REQ_CALL)
			continue;
		list_del_init(&req->node);
		req->err = s->dead;
		complete(&req->done);
	}
	spin_unlock(&s->lock);
	wake_up_all(&s->notify_wq);
	wake_up_all(&s->drain_wq);
	wake_up_all(&s->ring_wq);
}

static void vgpu_queue_notify(struct vgpu_session *s, struct vgpu_frame *f)
{
	bool dropped = false;

	spin_lock(&s->lock);
	if (s->nr_notify >= VGPU_MAX_NOTIFY) {
		s->dropped++;
		dropped = true;
	} else {
		list_add_tail(&f->node, &s->notify);
		s->nr_notify++;
	}
	spin_unlock(&s->lock);
	if (dropped) {
		pr_warn_ratelimited("vgpu: session %llu: notification queue full, dropped %s\n",
				    s->session_id,
				    vgpu_op_name(vgpu_frame_hdr(f)->opcode));
		kvfree(f);
		return;
	}
	wake_up_interruptible(&s->notify_wq);
}

/* Hand one frame from the host to whoever waits for it. */
static void vgpu_dispatch(struct vgpu_session *s, struct vgpu_frame *f)
{
	struct vgpu_header *h = vgpu_frame_hdr(f);
	struct vgpu_req *req, *found = NULL;

	if (!(h->flags & VGPU_FLAG_REPLY)) {
		if (h->opcode == VGPU_OP_NOTIFY_RING_BELL) {
			/* A doorbell: a wake-up, never queued for RECV. */
			struct vgpu_ring_bell_notify n = {};

			if (h->payload_len >= sizeof(n))
				memcpy(&n, f->data + VGPU_HEADER_SIZE, sizeof(n));
			vgpu_ring_note_bell(s, n.bell);
			kvfree(f);
			return;
		}
		vgpu_queue_notify(s, f);
		return;
	}

	spin_lock(&s->lock);
	list_for_each_entry(req, &s->pending, node) {
		if (req->id == h->request_id) {
			found = req;
			list_del_init(&req->node);
			break;
		}
	}
	if (found && found->kind == VGPU_REQ_CALL) {
		found->reply = f;
		complete(&found->done);
		spin_unlock(&s->lock);
		return;
	}
	spin_unlock(&s->lock);

	if (!found) {
		/* A reply nobody waits for: a deferred answer; let RECV see it. */
		vgpu_queue_notify(s, f);
		return;
	}
	if (found->kind == VGPU_REQ_SUBMIT) {
		vgpu_submit_release(s);
		if (h->status) {
			vgpu_queue_notify(s, f);
			f = NULL;
		}
	}
	kvfree(f);
	vgpu_req_free(found);
	wake_up_all(&s->drain_wq);
}

static int vgpu_read_frame(struct vgpu_session *s, struct vgpu_frame **out)
{
	struct vgpu_header h;
	struct vgpu_frame *f;
	u64 len;
	int err;

	err = vgpu_sock_recv_all(s->sock, &h, sizeof(h));
	if (err)
		return err;
	if (h.magic != VGPU_MAGIC || h.major != VGPU_PROTO_MAJOR || h.num_segs ||
	    (h.flags & (VGPU_FLAG_SEGMENTS | VGPU_FLAG_MORE_SEGMENTS)) ||
	    h.payload_len > s->max_payload) {
		pr_warn_ratelimited("vgpu: session %llu: bad frame from host (magic %#x op %#x flags %#x nsegs %u len %u)\n",
				    s->session_id, h.magic, h.opcode, h.flags,
				    h.num_segs, h.payload_len);
		return -EPROTO;
	}
	len = vgpu_frame_len(h.payload_len, 0);
	f = kvmalloc(struct_size(f, data, len), GFP_KERNEL);
	if (!f)
		return -ENOMEM;
	f->len = len;
	memcpy(f->data, &h, sizeof(h));
	err = vgpu_sock_recv_all(s->sock, f->data + sizeof(h), len - sizeof(h));
	if (err) {
		kvfree(f);
		return err;
	}
	*out = f;
	return 0;
}

static int vgpu_reader(void *data)
{
	struct vgpu_session *s = data;
	struct vgpu_frame *f;
	int err;

	err = vgpu_connect(s);
	s->open_err = err;
	complete(&s->ready);
	if (err)
		goto wait_stop;

	while (!kthread_should_stop()) {
		err = vgpu_read_frame(s, &f);
		if (err)
			break;
		vgpu_dispatch(s, f);
	}
	vgpu_session_kill(s, err == -ECONNRESET || !err ? -EPIPE : err);

wait_stop:
	for (;;) {
		set_current_state(TASK_INTERRUPTIBLE);
		if (kthread_should_stop())
			break;
		schedule();
	}
	__set_current_state(TASK_RUNNING);
	return 0;
}

/**
 * vgpu_session_new_id() - a request id for a frame of the driver's own.
 * @s: the session.
 *
 * Context: any.
 * Return: an id with VGPU_REQ_DRIVER_BIT set, unique in the session.
 */
u64 vgpu_session_new_id(struct vgpu_session *s)
{
	return VGPU_REQ_DRIVER_BIT | (u64)atomic64_inc_return(&s->next_id);
}

/**
 * vgpu_session_open() - connect a new session to the host.
 *
 * Description: starts the session's reader thread, which creates the kernel vsock socket,
 * binds a privileged source port, connects to (cid, port), sends the
 * driver's HELLO and keeps the host's limits.
 *
 * Context: process; sleeps up to VGPU_HELLO_TIMEOUT_MS plus the vsock
 * connect timeout.
 * Return: the session, or an ERR_PTR: -ENOMEM, -ECONNREFUSED (no service or
 * HELLO refused), -ETIMEDOUT, -EADDRINUSE (no free privileged port), -EPROTO.
 */
struct vgpu_session *vgpu_session_open(void)
{
	struct vgpu_session *s;
	int err;

	s = kzalloc(sizeof(*s), GFP_KERNEL);
	if (!s)
		return ERR_PTR(-ENOMEM);
	init_completion(&s->ready);
	mutex_init(&s->send_lock);
	spin_lock_init(&s->lock);
	INIT_LIST_HEAD(&s->pending);
	INIT_LIST_HEAD(&s->notify);
	init_waitqueue_head(&s->notify_wq);
	init_waitqueue_head(&s->drain_wq);
	mutex_init(&s->reg_lock);
	INIT_LIST_HEAD(&s->regions);
	mutex_init(&s->ring_lock);
	init_waitqueue_head(&s->ring_wq);
	s->max_payload = VGPU_DEFAULT_MAX_PAYLOAD;
	/*
	 * The PID in the initial namespace: unique in the guest (processes of
	 * two containers may share a namespaced one), and the host serves all
	 * the files one process opens in one worker by it.
	 */
	s->opener_tgid = task_tgid_nr(current);
	/*
	 * Its effective uid in the initial namespace: the host bounds the GPU
	 * processes of each guest user (root exempt) by it.
	 */
	s->opener_uid = from_kuid_munged(&init_user_ns, current_euid());

	s->reader = kthread_create(vgpu_reader, s, "vgpu-rx/%d", s->opener_tgid);
	if (IS_ERR(s->reader)) {
		err = PTR_ERR(s->reader);
		goto free_session;
	}
	get_task_struct(s->reader);
	wake_up_process(s->reader);
	wait_for_completion(&s->ready);
	if (s->open_err) {
		err = s->open_err;
		goto stop_reader;
	}
	return s;

stop_reader:
	kthread_stop(s->reader);
	put_task_struct(s->reader);
	if (s->sock)
		sock_release(s->sock);
free_session:
	kfree(s);
	return ERR_PTR(err);
}

static bool vgpu_session_drained(struct vgpu_session *s)
{
	bool done;

	spin_lock(&s->lock);
	done = list_empty(&s->pending) || s->dead;
	spin_unlock(&s->lock);
	return done;
}

/**
 * vgpu_session_close() - end a session and release everything it holds.
 * @s: the session; freed on return.
 *
 * Calls whose caller left (killed or interrupted mid-call) and submissions
 * may still have the host reading or writing their pages, so their replies
 * are awaited first, up to call_timeout_ms. Then the stream is shut down
 * (the host sees the connection close and frees the session's GPU
 * resources), the reader stopped, and what calls, submissions,
 * registrations and notifications still hold is unpinned and freed.
 *
 * Context: process (file release, possibly in a killed task); no ioctl of
 * the file can be running. Sleeps uninterruptibly.
 */
void vgpu_session_close(struct vgpu_session *s)
{
	unsigned int ms = vgpu_call_timeout_ms ? vgpu_call_timeout_ms : 600000;
	struct vgpu_req *req, *rtmp;
	struct vgpu_frame *f, *ftmp;

	if (!wait_event_timeout(s->drain_wq, vgpu_session_drained(s),
				msecs_to_jiffies(ms)))
		pr_warn_ratelimited("vgpu: session %llu: host still busy with a call after %u ms; closing\n",
				    s->session_id, ms);

	vgpu_ring_release(s);
	kernel_sock_shutdown(s->sock, SHUT_RDWR);
	kthread_stop(s->reader);
	put_task_struct(s->reader);
	sock_release(s->sock);

	list_for_each_entry_safe(req, rtmp, &s->pending, node) {
		list_del(&req->node);
		vgpu_req_free(req);
	}
	list_for_each_entry_safe(f, ftmp, &s->notify, node) {
		list_del(&f->node);
		kvfree(f);
	}
	vgpu_regions_release(s);
	kfree(s);
}

/**
 * vgpu_session_send() - send one call, continuing its segments in
 * OpSegments frames when they exceed the host's per-frame limit.
 * @s:           the session.
 * @hdr:         the call's header; flags, num_segs and payload_len are set here.
 * @payload:     the payload (padded here to 8 bytes).
 * @payload_len: its length.
 * @segs:        the segments, or NULL.
 * @nsegs:       how many.
 *
 * Context: process; takes the session's send lock (killably).
 * Return: 0; -EINTR on a fatal signal before anything was sent; the
 * session's first error if it is dead (-EPIPE, -EPROTO); -E2BIG if the
 * segments need more than max_frames frames; a socket error (the session is
 * then marked dead, since a partial frame desynchronises the stream).
 */
int vgpu_session_send(struct vgpu_session *s, struct vgpu_header *hdr,
		      const void *payload, u32 payload_len,
		      const struct vgpu_segment *segs, u32 nsegs)
{
	static const u8 zeros[VGPU_ALIGN];
	struct msghdr msg = { .msg_flags = MSG_NOSIGNAL };
	struct vgpu_header cont;
	sigset_t block, saved;
	struct kvec vec[4];
	u32 per = s->max_segments, n, done, nframes;
	size_t len, pad;
	int nvec, ret, err = 0;

	if (nsegs && !per)
		return -EOPNOTSUPP;
	nframes = vgpu_nr_frames(nsegs, per);
	if (nframes > max(vgpu_max_frames, 1U))
		return -E2BIG;

	if (mutex_lock_killable(&s->send_lock))
		return -EINTR;
	err = READ_ONCE(s->dead);	/* the first cause, for every later call */
	if (err)
		goto unlock;
	/*
	 * A frame must go out whole: a caught signal would end a send that
	 * waits for credit part-way and desynchronise the stream. Only a
	 * fatal signal may interrupt it (the session dies with the process).
	 */
	siginitsetinv(&block, sigmask(SIGKILL));
	sigprocmask(SIG_BLOCK, &block, &saved);
	n = min(nsegs, per);
	hdr->num_segs = n;
	hdr->payload_len = payload_len;
	hdr->flags &= ~(VGPU_FLAG_SEGMENTS | VGPU_FLAG_MORE_SEGMENTS);
	if (n)
		hdr->flags |= VGPU_FLAG_SEGMENTS;
	if (n < nsegs)
		hdr->flags |= VGPU_FLAG_MORE_SEGMENTS;

	for (done = 0; done == 0 || done < nsegs;) {
		const struct vgpu_header *h = done ? &cont : hdr;

		nvec = 0;
		vec[nvec].iov_base = (void *)h;
		vec[nvec++].iov_len = sizeof(*h);
		len = sizeof(*h);
		if (!done && payload_len) {
			vec[nvec].iov_base = (void *)payload;
			vec[nvec++].iov_len = payload_len;
			pad = vgpu_frame_len(payload_len, 0) - VGPU_HEADER_SIZE -
			      payload_len;
			len += payload_len;
			if (pad) {
				vec[nvec].iov_base = (void *)zeros;
				vec[nvec++].iov_len = pad;
				len += pad;
			}
		}
		if (n) {
			vec[nvec].iov_base = (void *)(segs + done);
			vec[nvec++].iov_len = (size_t)n * sizeof(*segs);
			len += (size_t)n * sizeof(*segs);
		}
		ret = kernel_sendmsg(s->sock, &msg, vec, nvec, len);
		if (ret != len) {
			pr_warn_ratelimited("vgpu: session %llu: sending %s failed after %d of %zu bytes\n",
					    s->session_id,
					    vgpu_op_name(hdr->opcode), ret, len);
			err = ret < 0 ? ret : -EPIPE;
			break;
		}
		done += n;
		if (done >= nsegs)
			break;
		/* Next: an OpSegments continuation of the same request. */
		n = min(nsegs - done, per);
		cont = (struct vgpu_header){
			.magic = VGPU_MAGIC,
			.major = VGPU_PROTO_MAJOR,
			.minor = VGPU_PROTO_MINOR,
			.opcode = VGPU_OP_SEGMENTS,
			.flags = VGPU_FLAG_SEGMENTS,
			.num_segs = n,
			.request_id = hdr->request_id,
		};
		if (done + n < nsegs)
			cont.flags |= VGPU_FLAG_MORE_SEGMENTS;
	}
	sigprocmask(SIG_SETMASK, &saved, NULL);
	if (err) {
		spin_lock(&s->lock);
		if (!s->dead)
			s->dead = -EPIPE;
		spin_unlock(&s->lock);
		kernel_sock_shutdown(s->sock, SHUT_RDWR);
	}
unlock:
	mutex_unlock(&s->send_lock);
	return err;
}

/**
 * vgpu_req_enqueue() - make a request visible to the reader before its
 * frame is sent, so that no reply can overtake it.
 * @s:   the session.
 * @req: the request (its id set).
 *
 * Context: any; takes the session lock.
 * Return: 0, or -EBUSY if a request with the same id is still pending.
 */
int vgpu_req_enqueue(struct vgpu_session *s, struct vgpu_req *req)
{
	struct vgpu_req *other;

	spin_lock(&s->lock);
	list_for_each_entry(other, &s->pending, node) {
		if (other->id == req->id) {
			spin_unlock(&s->lock);
			return -EBUSY;
		}
	}
	list_add_tail(&req->node, &s->pending);
	spin_unlock(&s->lock);
	return 0;
}

static bool vgpu_submit_slot(struct vgpu_session *s, int *err)
{
	bool ok = true;

	spin_lock(&s->lock);
	if (s->dead)
		*err = s->dead;
	else if (s->nr_submits < VGPU_MAX_SUBMITS)
		s->nr_submits++;
	else
		ok = false;
	spin_unlock(&s->lock);
	return ok;
}

/**
 * vgpu_submit_reserve() - wait for room for one more submission with
 * pinned pages, so that a process cannot pin without bound ahead of the
 * host.
 * @s: the session.
 *
 * Context: process; sleeps killably until the host answers an earlier
 * submission.
 * Return: 0 (release the slot with vgpu_submit_release() when the reply
 * arrives or the frame is not sent); -EINTR; the session's error.
 */
int vgpu_submit_reserve(struct vgpu_session *s)
{
	int err = 0;

	if (wait_event_killable(s->drain_wq, vgpu_submit_slot(s, &err)))
		return -EINTR;
	return err;
}

/**
 * vgpu_submit_release() - give back a slot taken by vgpu_submit_reserve().
 * @s: the session.
 *
 * Context: any; takes the session lock.
 */
void vgpu_submit_release(struct vgpu_session *s)
{
	spin_lock(&s->lock);
	s->nr_submits--;
	spin_unlock(&s->lock);
	wake_up_all(&s->drain_wq);
}

/**
 * vgpu_req_cancel() - take back a request whose frame was never sent.
 * @s:   the session.
 * @req: the request; the caller still owns it.
 *
 * Context: any; takes the session lock.
 */
void vgpu_req_cancel(struct vgpu_session *s, struct vgpu_req *req)
{
	spin_lock(&s->lock);
	list_del_init(&req->node);
	spin_unlock(&s->lock);
}

/**
 * vgpu_req_wait() - wait for the reply to a sent CALL.
 * @s:          the session.
 * @req:        the request.
 * @timeout_ms: 0 means the module's call_timeout_ms (0 there: forever).
 *
 * On success the caller owns @req and @req->reply. If the session died,
 * @req is freed here. Otherwise (fatal signal, timeout) @req becomes an
 * orphan: its pages stay pinned until the host answers or the file is
 * closed, because the host may still be using them. After a failure the
 * caller must not touch @req again.
 *
 * The wait is killable, not interruptible: the call has been sent, so a
 * caught signal must not make the ioctl restart and send it again; its
 * handler runs when the reply is in (as with a native CUDA call).
 *
 * Context: process; sleeps until the reply, the timeout or a fatal signal.
 * Return: 0; -EINTR on a fatal signal; -ETIMEDOUT; the session's error
 * (-EPIPE when the host closed the stream).
 */
int vgpu_req_wait(struct vgpu_session *s, struct vgpu_req *req,
		  unsigned int timeout_ms)
{
	unsigned int ms = timeout_ms ? timeout_ms : vgpu_call_timeout_ms;
	long tmo = ms ? msecs_to_jiffies(ms) : MAX_SCHEDULE_TIMEOUT;
	long ret;
	int err;

	ret = wait_for_completion_killable_timeout(&req->done, tmo);
	if (ret <= 0) {
		spin_lock(&s->lock);
		if (!completion_done(&req->done)) {
			req->kind = VGPU_REQ_ORPHAN;
			spin_unlock(&s->lock);
			return ret ? -EINTR : -ETIMEDOUT;
		}
		spin_unlock(&s->lock);
	}
	if (req->reply)
		return 0;
	err = req->err;
	vgpu_req_free(req);
	return err;
}

/**
 * vgpu_req_free() - unpin a request's pages and free it with its reply.
 * @req: the request, off every list.
 *
 * Context: process (unpinning may sleep).
 */
void vgpu_req_free(struct vgpu_req *req)
{
	unsigned int i;

	for (i = 0; i < req->nr_pins; i++)
		vgpu_unpin(&req->pins[i]);
	kvfree(req->reply);
	kfree(req);
}

/**
 * vgpu_session_recv() - VGPU_IOC_RECV: the next notification.
 * @s:   the session.
 * @arg: the ioctl argument (copied in; len is set here).
 * @buf: user buffer of arg->cap bytes.
 *
 * Context: process; sleeps interruptibly.
 * Return: 0; -EMSGSIZE if the frame is larger than arg->cap (it stays
 * queued, arg->len says its size); -EAGAIN when arg->timeout_ms passed;
 * -ERESTARTSYS; the session's first error (-EPIPE, -EPROTO) when it is
 * dead and nothing is queued; -EFAULT.
 */
int vgpu_session_recv(struct vgpu_session *s, struct vgpu_recv *arg,
		      void __user *buf)
{
	struct vgpu_frame *f = NULL;
	long tmo = arg->timeout_ms ? msecs_to_jiffies(arg->timeout_ms) :
		   MAX_SCHEDULE_TIMEOUT;
	long ret;

	ret = wait_event_interruptible_timeout(s->notify_wq,
					       !list_empty(&s->notify) ||
					       READ_ONCE(s->dead), tmo);
	if (ret < 0)
		return ret;

	spin_lock(&s->lock);
	if (!list_empty(&s->notify))
		f = list_first_entry(&s->notify, struct vgpu_frame, node);
	if (f) {
		arg->len = f->len;
		if (f->len > arg->cap) {
			spin_unlock(&s->lock);
			return -EMSGSIZE;
		}
		list_del(&f->node);
		s->nr_notify--;
	}
	spin_unlock(&s->lock);
	if (!f)
		return READ_ONCE(s->dead) ?: -EAGAIN;

	ret = copy_to_user(buf, f->data, f->len) ? -EFAULT : 0;
	kvfree(f);
	return ret;
}

/**
 * vgpu_driver_call() - a call of the driver's own (register,
 * unregister, rings), waited for up to the call timeout.
 * @s:           the session.
 * @opcode:      VGPU_OP_*.
 * @payload:     request payload.
 * @payload_len: its length.
 * @segs:        segments, or NULL.
 * @nsegs:       how many.
 * @reply:       where the reply payload goes.
 * @reply_len:   bytes expected at @reply (a shorter reply is -EPROTO).
 * @status:      out: the host's status (CUresult).
 * @killable:    a fatal signal ends the wait (vgpu_session_driver_call()
 *               always; the rings' teardown at release never).
 *
 * Context: process; sleeps. The caller keeps anything @segs points at
 * pinned until this returns, or until the file is closed if it returns
 * -ETIMEDOUT or -EINTR (the host may still act on the call).
 * Return: 0 (check @status); -ENOMEM; -EPROTO; -ETIMEDOUT; -EINTR (fatal
 * signal); -EPIPE; -E2BIG.
 */
static int vgpu_driver_call(struct vgpu_session *s, u16 opcode,
			    const void *payload, u32 payload_len,
			    const struct vgpu_segment *segs, u32 nsegs,
			    void *reply, u32 reply_len, s32 *status,
			    bool killable)
{
	struct vgpu_header hdr = {
		.magic = VGPU_MAGIC,
		.major = VGPU_PROTO_MAJOR,
		.minor = VGPU_PROTO_MINOR,
		.opcode = opcode,
	};
	unsigned int ms = vgpu_call_timeout_ms;
	struct vgpu_header *rh;
	struct vgpu_req *req;
	long ret;
	int err;

	req = kzalloc(sizeof(*req), GFP_KERNEL);
	if (!req)
		return -ENOMEM;
	INIT_LIST_HEAD(&req->node);
	req->id = vgpu_session_new_id(s);
	req->kind = VGPU_REQ_CALL;
	init_completion(&req->done);
	hdr.request_id = req->id;

	err = vgpu_req_enqueue(s, req);
	if (!err)
		err = vgpu_session_send(s, &hdr, payload, payload_len, segs,
					nsegs);
	if (err) {
		vgpu_req_cancel(s, req);
		kfree(req);
		return err;
	}

	if (killable)
		ret = wait_for_completion_killable_timeout(&req->done, ms ?
							   msecs_to_jiffies(ms) :
							   MAX_SCHEDULE_TIMEOUT);
	else
		ret = wait_for_completion_timeout(&req->done, ms ?
						  msecs_to_jiffies(ms) :
						  MAX_SCHEDULE_TIMEOUT);
	if (ret <= 0) {
		spin_lock(&s->lock);
		if (!completion_done(&req->done)) {
			req->kind = VGPU_REQ_ORPHAN;
			spin_unlock(&s->lock);
			return ret ? -EINTR : -ETIMEDOUT;
		}
		spin_unlock(&s->lock);
	}
	if (!req->reply) {
		err = req->err;
		goto free_req;
	}
	rh = vgpu_frame_hdr(req->reply);
	*status = rh->status;
	if (!rh->status) {
		if (rh->payload_len < reply_len) {
			err = -EPROTO;
			goto free_req;
		}
		memcpy(reply, req->reply->data + VGPU_HEADER_SIZE, reply_len);
	}
free_req:
	vgpu_req_free(req);
	return err;
}

int vgpu_session_driver_call(struct vgpu_session *s, u16 opcode,
			     const void *payload, u32 payload_len,
			     const struct vgpu_segment *segs, u32 nsegs,
			     void *reply, u32 reply_len, s32 *status)
{
	return vgpu_driver_call(s, opcode, payload, payload_len, segs, nsegs,
				reply, reply_len, status, true);
}

/**
 * vgpu_session_driver_call_wait() - a driver call without segments or reply
 * payload that may also wait where a fatal signal is pending (file release
 * in a killed task), up to the call timeout.
 * @s:           the session.
 * @opcode:      VGPU_OP_*.
 * @payload:     request payload.
 * @payload_len: its length.
 * @status:      out: the host's status.
 * @killable:    a fatal signal ends the wait (-EINTR).
 *
 * Context: process; sleeps.
 * Return: as vgpu_session_driver_call().
 */
int vgpu_session_driver_call_wait(struct vgpu_session *s, u16 opcode,
				  const void *payload, u32 payload_len,
				  s32 *status, bool killable)
{
	return vgpu_driver_call(s, opcode, payload, payload_len, NULL, 0,
				NULL, 0, status, killable);
}
