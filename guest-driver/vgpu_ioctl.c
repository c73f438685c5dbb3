// SPDX-License-Identifier: GPL-2.0
/*
 * vgpu_ioctl.c - VGPU_IOC_CALL, VGPU_IOC_SUBMIT, VGPU_IOC_REGISTER and
 * VGPU_IOC_UNREGISTER: check what user space hands in, pin, translate to
 * guest-physical segments, send, and (CALL) wait for the reply.
 */
#include <linux/ktime.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "vgpu_drv.h"

/* Log a user-caused error, rate-limited, and return it. */
#define vgpu_user_err(err, fmt, ...) ({					\
	int __err = (err);						\
	pr_info_ratelimited("vgpu: pid %d: " fmt " (%d)\n",		\
			    task_tgid_vnr(current), ##__VA_ARGS__, __err);	\
	__err;								\
})

static int vgpu_check_buf(const struct vgpu_buf *b)
{
	u64 end;

	if (!b->len || b->flags || !b->dir ||
	    (b->dir & ~(VGPU_BUF_TO_HOST | VGPU_BUF_FROM_HOST)))
		return -EINVAL;
	if (check_add_overflow(b->addr, b->len, &end))
		return -EOVERFLOW;
	return 0;
}

/* Pin every buffer of a call and build its segment list. */
static int vgpu_call_pin(struct vgpu_session *s, struct vgpu_req *req,
			 const struct vgpu_buf *bufs, u32 nbufs,
			 struct vgpu_segment **segsp, u32 *nsegsp)
{
	struct vgpu_seg_builder b;
	struct vgpu_segment *segs;
	unsigned long first, nr, total = 0;
	ktime_t start = ktime_get();
	u64 cap;
	u32 i;
	int err;

	for (i = 0; i < nbufs; i++) {
		err = vgpu_span_pages(bufs[i].addr, bufs[i].len, &first, &nr);
		if (err)
			return err;
		total += nr;
	}
	cap = (u64)s->max_segments * max(vgpu_max_frames, 1U);
	cap = min_t(u64, cap, total);
	segs = kvmalloc_array(cap, sizeof(*segs), GFP_KERNEL);
	if (!segs)
		return -ENOMEM;
	vgpu_segs_init(&b, segs, cap);

	for (i = 0; i < nbufs; i++) {
		unsigned int gup = 0;

		if (bufs[i].dir & VGPU_BUF_FROM_HOST)
			gup |= FOLL_WRITE;
		err = vgpu_pin_range(bufs[i].addr, bufs[i].len, gup,
				     &req->pins[i]);
		if (err)
			goto free_segs;
		req->nr_pins = i + 1;
		err = vgpu_pins_to_segs(&req->pins[i], bufs[i].addr,
					bufs[i].len, &b);
		if (err)
			goto free_segs;
	}
	*segsp = segs;
	*nsegsp = b.nr;
	WRITE_ONCE(vgpu_last_pin_ns, ktime_to_ns(ktime_sub(ktime_get(), start)));
	WRITE_ONCE(vgpu_last_pin_pages, total);
	WRITE_ONCE(vgpu_last_pin_segs, b.nr);
	return 0;

free_segs:
	kvfree(segs);
	return err;
}

static int vgpu_copy_reply(struct vgpu_call __user *argp,
			   const struct vgpu_call *call, struct vgpu_frame *f)
{
	u32 len = VGPU_HEADER_SIZE + vgpu_frame_hdr(f)->payload_len;

	if (put_user(len, &argp->reply_len))
		return -EFAULT;
	if (len > call->reply_cap)
		return -EMSGSIZE;
	if (copy_to_user(u64_to_user_ptr(call->reply), f->data, len))
		return -EFAULT;
	return 0;
}

/**
 * vgpu_ioctl_call() - VGPU_IOC_CALL and VGPU_IOC_SUBMIT.
 * @s:      the session.
 * @argp:   user pointer to struct vgpu_call.
 * @submit: SUBMIT: return once sent; the pages stay pinned until the host
 *          answers, and a failed answer is queued for VGPU_IOC_RECV. At
 *          most VGPU_MAX_SUBMITS answers may be outstanding; beyond that
 *          SUBMIT waits (killably) for one.
 *
 * Context: process; sleeps (killably while waiting for the reply).
 * Return: 0 (the host's status is in the reply header); -EINVAL, -EPROTO,
 * -EPERM, -E2BIG, -EBADMSG, -EOVERFLOW, -EFAULT for bad arguments (see
 * the uapi header); -EBUSY for a request id already pending; -EOPNOTSUPP
 * for buffers when the host takes no segments; -EMSGSIZE when the reply
 * does not fit; -ETIMEDOUT; -EINTR (fatal signal); -EPIPE when the host
 * is gone.
 */
long vgpu_ioctl_call(struct vgpu_session *s, void __user *argp, bool submit)
{
	struct vgpu_buf bufs[VGPU_MAX_BUFS];
	struct vgpu_segment *segs = NULL;
	struct vgpu_header *hdr;
	struct vgpu_call call;
	struct vgpu_req *req;
	void *frame;
	u32 nsegs = 0;
	bool no_reply;
	int err;

	if (copy_from_user(&call, argp, sizeof(call)))
		return -EFAULT;
	if (call.flags || call.nbufs > VGPU_MAX_BUFS)
		return vgpu_user_err(-EINVAL, "bad call flags %#x or %u buffers",
				     call.flags, call.nbufs);
	if (call.frame_len < VGPU_HEADER_SIZE)
		return vgpu_user_err(-EINVAL, "frame of %u bytes",
				     call.frame_len);
	if (call.frame_len > vgpu_frame_len(s->max_payload, 0))
		return vgpu_user_err(-E2BIG, "frame of %u bytes",
				     call.frame_len);
	if (call.nbufs && copy_from_user(bufs, u64_to_user_ptr(call.bufs),
					 call.nbufs * sizeof(bufs[0])))
		return -EFAULT;

	frame = kvmalloc(call.frame_len, GFP_KERNEL);
	if (!frame)
		return -ENOMEM;
	if (copy_from_user(frame, u64_to_user_ptr(call.frame), call.frame_len)) {
		err = -EFAULT;
		goto free_frame;
	}
	hdr = frame;
	err = vgpu_check_user_frame(hdr, call.frame_len, s->max_payload);
	if (err) {
		vgpu_user_err(err, "bad frame (op %#x flags %#x nsegs %u)",
			      hdr->opcode, hdr->flags, hdr->num_segs);
		goto free_frame;
	}
	no_reply = hdr->flags & VGPU_FLAG_NO_REPLY;
	if (!submit && no_reply) {
		err = vgpu_user_err(-EINVAL, "CALL with NO_REPLY");
		goto free_frame;
	}
	for (err = 0; err == 0 && nsegs < call.nbufs; nsegs++)
		err = vgpu_check_buf(&bufs[nsegs]);
	nsegs = 0;
	if (err) {
		vgpu_user_err(err, "bad buffer");
		goto free_frame;
	}
	if (call.nbufs && !s->max_segments) {
		err = -EOPNOTSUPP;
		goto free_frame;
	}

	req = kzalloc(sizeof(*req), GFP_KERNEL);
	if (!req) {
		err = -ENOMEM;
		goto free_frame;
	}
	INIT_LIST_HEAD(&req->node);
	init_completion(&req->done);
	req->id = hdr->request_id;
	req->kind = submit ? VGPU_REQ_SUBMIT : VGPU_REQ_CALL;

	if (call.nbufs) {
		err = vgpu_call_pin(s, req, bufs, call.nbufs, &segs, &nsegs);
		if (err) {
			if (err != -ENOMEM)
				vgpu_user_err(err, "buffers of op %#x",
					      hdr->opcode);
			goto free_req;
		}
		/* The driver must learn when the host is done with the pages. */
		hdr->flags &= ~VGPU_FLAG_NO_REPLY;
		no_reply = false;
	}

	if (submit && !no_reply) {
		err = vgpu_submit_reserve(s);
		if (err)
			goto free_segs;
	}
	if (!no_reply) {
		err = vgpu_req_enqueue(s, req);
		if (err) {
			vgpu_user_err(err, "request id %llu already pending",
				      hdr->request_id);
			goto release_submit;
		}
	}
	err = vgpu_session_send(s, hdr, frame + VGPU_HEADER_SIZE,
				hdr->payload_len, segs, nsegs);
	kvfree(segs);
	segs = NULL;
	if (err) {
		vgpu_req_cancel(s, req);
		if (err == -E2BIG)
			vgpu_user_err(err, "too many segments");
		goto release_submit;
	}
	kvfree(frame);
	if (submit) {
		if (no_reply)
			vgpu_req_free(req);
		return 0;
	}

	err = vgpu_req_wait(s, req, call.timeout_ms);
	if (err)
		return err;	/* req is an orphan, or freed */
	err = vgpu_copy_reply(argp, &call, req->reply);
	vgpu_req_free(req);
	return err;

release_submit:
	if (submit && !no_reply)
		vgpu_submit_release(s);
free_segs:
	kvfree(segs);
free_req:
	vgpu_req_free(req);
free_frame:
	kvfree(frame);
	return err;
}
