// SPDX-License-Identifier: GPL-2.0
/*
 * vgpu_ring.c - request and completion rings in guest RAM for one open file
 * (protocol/ring.go): VGPU_IOC_RING_SETUP allocates the pages, writes the
 * header and registers them with the host (VGPU_OP_RING_SETUP_GUEST, the
 * segments naming the pages, which need not be contiguous); mmap() at
 * VGPU_RING_MMAP_OFFSET gives them to the process; VGPU_IOC_RING_BELL sends
 * the host a doorbell (VGPU_OP_RING_BELL, no reply); VGPU_IOC_RING_WAIT
 * sleeps until the host's doorbell (VGPU_OP_NOTIFY_RING_BELL, counted by
 * the reader thread). At close the rings end (VGPU_OP_RING_TEARDOWN) before
 * the pages are freed; a host that does not answer keeps them allocated
 * for good (it may still touch them).
 *
 * The process can write any byte of the pages at any time: the host checks
 * every position and frame it reads there, and frames on the ring cannot
 * name guest-physical memory (only this driver sends segments, on the
 * stream).
 */
#include <linux/fs.h>
#include <linux/gfp.h>
#include <linux/io.h>
#include <linux/log2.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "vgpu_drv.h"

/*
 * Pages of rings whose teardown the host never answered: kept for good
 * (the host may still touch them). Past this many, new rings are refused,
 * so a host or process that makes teardowns fail cannot use up guest RAM.
 */
#define VGPU_RING_KEPT_MAX_PAGES (64UL << (20 - PAGE_SHIFT))
static atomic_long_t vgpu_ring_kept_pages = ATOMIC_LONG_INIT(0);

/**
 * struct vgpu_ring - the pages of one file's rings.
 * @ring_bytes: each ring's size.
 * @nr_pages:   entries of @pages (header page, request ring, completion ring).
 * @pages:      order-0 pages, in ring order.
 */
struct vgpu_ring {
	u64 ring_bytes;
	unsigned long nr_pages;
	struct page *pages[];
};

static void vgpu_ring_free(struct vgpu_ring *r, bool pages)
{
	unsigned long i;

	if (pages)
		for (i = 0; i < r->nr_pages; i++)
			if (r->pages[i])
				__free_page(r->pages[i]);
	kvfree(r);
}

static struct vgpu_ring *vgpu_ring_alloc(u64 ring_bytes)
{
	unsigned long nr = (VGPU_RING_HEADER_SIZE + 2 * ring_bytes) >> PAGE_SHIFT;
	struct vgpu_ring *r;
	unsigned long i;
	u8 *hdr;

	r = kvzalloc(struct_size(r, pages, nr), GFP_KERNEL);
	if (!r)
		return NULL;
	r->ring_bytes = ring_bytes;
	r->nr_pages = nr;
	for (i = 0; i < nr; i++) {
		r->pages[i] = alloc_page(GFP_KERNEL | __GFP_ZERO);
		if (!r->pages[i]) {
			vgpu_ring_free(r, true);
			return NULL;
		}
	}
	hdr = page_address(r->pages[0]);
	*(u32 *)(hdr + VGPU_RING_OFF_MAGIC) = VGPU_RING_MAGIC;
	*(u32 *)(hdr + VGPU_RING_OFF_MAGIC + 4) = VGPU_RING_VERSION;
	*(u64 *)(hdr + VGPU_RING_OFF_MAGIC + 8) = ring_bytes;
	return r;
}

/**
 * vgpu_ioctl_ring_setup() - VGPU_IOC_RING_SETUP.
 * @s:    the session.
 * @argp: struct vgpu_ring_setup.
 *
 * Context: process; sleeps.
 * Return: see struct vgpu_ring_setup.
 */
long vgpu_ioctl_ring_setup(struct vgpu_session *s, void __user *argp)
{
	struct vgpu_ring_setup a;
	struct vgpu_ring_setup_req req = {};
	struct vgpu_seg_builder b;
	struct vgpu_segment *segs;
	struct vgpu_ring *r;
	unsigned long i;
	s32 status = 0;
	int err;

	BUILD_BUG_ON(PAGE_SIZE != VGPU_RING_PAGE_SIZE);
	if (copy_from_user(&a, argp, sizeof(a)))
		return -EFAULT;
	if (a.flags || a.pad)
		return -EINVAL;
	if (!a.ring_bytes)
		a.ring_bytes = VGPU_RING_DEFAULT_BYTES;
	if (a.ring_bytes < VGPU_RING_MIN_BYTES ||
	    a.ring_bytes > VGPU_RING_MAX_BYTES || !is_power_of_2(a.ring_bytes))
		return -EINVAL;

	if (atomic_long_read(&vgpu_ring_kept_pages) >= VGPU_RING_KEPT_MAX_PAGES) {
		pr_warn_ratelimited("vgpu: rings refused: %ld pages of earlier rings are kept (their teardown was never answered)\n",
				    atomic_long_read(&vgpu_ring_kept_pages));
		return -ENOSPC;
	}
	if (mutex_lock_killable(&s->ring_lock))
		return -EINTR;
	err = -EBUSY;
	if (s->ring)
		goto unlock;
	err = -ENOMEM;
	r = vgpu_ring_alloc(a.ring_bytes);
	if (!r)
		goto unlock;
	segs = kvmalloc_array(r->nr_pages, sizeof(*segs), GFP_KERNEL);
	if (!segs) {
		vgpu_ring_free(r, true);
		goto unlock;
	}
	vgpu_segs_init(&b, segs, r->nr_pages);
	for (i = 0; i < r->nr_pages; i++)
		vgpu_segs_add(&b, page_to_phys(r->pages[i]), PAGE_SIZE);

	req.ring_bytes = a.ring_bytes;
	err = vgpu_session_driver_call(s, VGPU_OP_RING_SETUP_GUEST, &req,
				       sizeof(req), segs, b.nr, NULL, 0,
				       &status);
	kvfree(segs);
	if (err == -ETIMEDOUT || err == -EINTR) {
		/* The host may have the rings: they end at close. */
		s->ring = r;
		goto unlock;
	}
	if (err || status) {
		vgpu_ring_free(r, true);
		if (!err) {
			a.status = status;
			err = copy_to_user(argp, &a, sizeof(a)) ? -EFAULT :
								-EREMOTEIO;
		}
		goto unlock;
	}
	s->ring = r;
	a.status = 0;
	a.mmap_offset = VGPU_RING_MMAP_OFFSET;
	a.map_len = (u64)r->nr_pages << PAGE_SHIFT;
	err = copy_to_user(argp, &a, sizeof(a)) ? -EFAULT : 0;
unlock:
	mutex_unlock(&s->ring_lock);
	return err;
}

/**
 * vgpu_ioctl_ring_bell() - VGPU_IOC_RING_BELL: send the host a doorbell.
 * @s:    the session.
 * @argp: __u32, VGPU_RING_BELL_*.
 *
 * Context: process.
 * Return: 0; -EFAULT; -EINVAL; -ENXIO without rings; a send error.
 */
long vgpu_ioctl_ring_bell(struct vgpu_session *s, void __user *argp)
{
	struct vgpu_ring_bell_req p = {};
	struct vgpu_header hdr = {
		.magic = VGPU_MAGIC,
		.major = VGPU_PROTO_MAJOR,
		.minor = VGPU_PROTO_MINOR,
		.opcode = VGPU_OP_RING_BELL,
		.flags = VGPU_FLAG_NO_REPLY,
	};

	if (get_user(p.bell, (__u32 __user *)argp))
		return -EFAULT;
	if (p.bell != VGPU_RING_BELL_REQUESTS && p.bell != VGPU_RING_BELL_SPACE)
		return -EINVAL;
	if (!READ_ONCE(s->ring))
		return -ENXIO;
	if (READ_ONCE(s->ring_broken))
		return -EPIPE;
	hdr.request_id = vgpu_session_new_id(s);
	return vgpu_session_send(s, &hdr, &p, sizeof(p), NULL, 0);
}

/**
 * vgpu_ioctl_ring_wait() - VGPU_IOC_RING_WAIT: wait for the host's doorbell.
 * @s:    the session.
 * @argp: struct vgpu_ring_wait.
 *
 * Context: process; sleeps interruptibly.
 * Return: see struct vgpu_ring_wait.
 */
long vgpu_ioctl_ring_wait(struct vgpu_session *s, void __user *argp)
{
	struct vgpu_ring_wait a;
	long ret = 0;
	int dead;

	if (copy_from_user(&a, argp, sizeof(a)))
		return -EFAULT;
	if (a.pad)
		return -EINVAL;
	if (!READ_ONCE(s->ring))
		return -ENXIO;
	if (a.timeout_ms)
		ret = wait_event_interruptible_timeout(s->ring_wq,
			(u64)atomic64_read(&s->ring_bells) != a.seen ||
			READ_ONCE(s->dead) || READ_ONCE(s->ring_broken),
			msecs_to_jiffies(a.timeout_ms));
	if (ret < 0)
		return -EINTR;
	dead = READ_ONCE(s->dead);
	if (dead)
		return dead;
	if (READ_ONCE(s->ring_broken))
		return -EPIPE;
	a.seen = atomic64_read(&s->ring_bells);
	return copy_to_user(argp, &a, sizeof(a)) ? -EFAULT : 0;
}

/**
 * vgpu_ring_note_bell() - the host rang (VGPU_OP_NOTIFY_RING_BELL).
 * @s:    the session.
 * @bell: VGPU_RING_BELL_*; VGPU_RING_BELL_BROKEN: the host ended the rings.
 *
 * Context: the reader thread.
 */
void vgpu_ring_note_bell(struct vgpu_session *s, u32 bell)
{
	if (bell == VGPU_RING_BELL_BROKEN) {
		pr_warn_ratelimited("vgpu: session %llu: the host ended the rings (the process broke them)\n",
				    s->session_id);
		WRITE_ONCE(s->ring_broken, true);
	}
	atomic64_inc(&s->ring_bells);
	wake_up_all(&s->ring_wq);
}

/**
 * vgpu_ring_mmap() - map the rings (mmap at VGPU_RING_MMAP_OFFSET).
 * @s:   the session.
 * @vma: a MAP_SHARED mapping of exactly the rings' length.
 *
 * Context: process, mmap_lock held for writing.
 * Return: 0; -ENXIO without rings; -EINVAL; an error of vm_insert_page().
 */
int vgpu_ring_mmap(struct vgpu_session *s, struct vm_area_struct *vma)
{
	unsigned long i;
	struct vgpu_ring *r;
	int err = 0;

	if (!(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	mutex_lock(&s->ring_lock);
	r = s->ring;
	if (!r) {
		err = -ENXIO;
		goto unlock;
	}
	if (vma_pages(vma) != r->nr_pages) {
		err = -EINVAL;
		goto unlock;
	}
	vgpu_vma_set_flags(vma, VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY);
	/* Each inserted page holds its own reference until it is unmapped. */
	for (i = 0; i < r->nr_pages && !err; i++)
		err = vm_insert_page(vma, vma->vm_start + (i << PAGE_SHIFT),
				     r->pages[i]);
unlock:
	mutex_unlock(&s->ring_lock);
	return err;
}

/**
 * vgpu_ring_release() - end the rings at close and free their pages once
 * the host answered.
 * @s: the session (no ioctl or mapping of it is left).
 *
 * Context: process (file release, possibly in a killed task); sleeps up to
 * the call timeout.
 */
void vgpu_ring_release(struct vgpu_session *s)
{
	struct vgpu_ring *r = s->ring;
	s32 status = 0;
	int err;

	if (!r)
		return;
	s->ring = NULL;
	err = vgpu_session_driver_call_wait(s, VGPU_OP_RING_TEARDOWN, NULL, 0,
					    &status, false);
	if (err || status) {
		pr_warn_ratelimited("vgpu: session %llu: the host did not end the rings (error %d, status %d); keeping their %lu pages\n",
				    s->session_id, err, status, r->nr_pages);
		atomic_long_add(r->nr_pages, &vgpu_ring_kept_pages);
		vgpu_ring_free(r, false);
		return;
	}
	vgpu_ring_free(r, true);
}
