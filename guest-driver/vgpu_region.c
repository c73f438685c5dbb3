// SPDX-License-Identifier: GPL-2.0
/*
 * vgpu_region.c - VGPU_IOC_REGISTER / VGPU_IOC_UNREGISTER: long-term pinned
 * user memory (or the driver's own mmap() memory) announced to the host once
 * with OpGuestRegister, then named in calls as (region, offset).
 */
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "vgpu_drv.h"

static void vgpu_region_free(struct vgpu_region *r)
{
	if (r->mapping)
		vgpu_mapping_put(r->mapping);
	else
		vgpu_unpin(&r->pins);
	kfree(r);
}

/**
 * vgpu_ioctl_register() - VGPU_IOC_REGISTER.
 * @file: the open /dev/vgpu file.
 * @argp: user pointer to struct vgpu_register.
 *
 * Memory the driver mapped with mmap() is announced without a second pin;
 * other memory is pinned with FOLL_LONGTERM (FOLL_WRITE unless
 * VGPU_REG_READONLY).
 *
 * Context: process; sleeps up to the call timeout (killably).
 * Return: 0; -EINVAL (flags, zero length); -EOVERFLOW; -EFAULT; -E2BIG
 * (more than max_pin_mb, or more segments than the host takes in one call);
 * -EOPNOTSUPP (the host takes no segments); -EREMOTEIO (the host refused:
 * its CUresult is in @status); -ETIMEDOUT or -EINTR (the range stays
 * pinned until the file is closed); -EPIPE.
 */
long vgpu_ioctl_register(struct file *file, void __user *argp)
{
	struct vgpu_session *s = file->private_data;
	struct vgpu_guest_register_reply rep = {};
	struct vgpu_guest_register_req greq = {};
	struct vgpu_register __user *uarg = argp;
	struct vgpu_seg_builder b;
	struct vgpu_segment *segs;
	struct vgpu_register arg;
	struct vgpu_region *r;
	unsigned long first, nr;
	u64 offset, cap;
	s32 status = 0;
	int err;

	if (copy_from_user(&arg, argp, sizeof(arg)))
		return -EFAULT;
	if (arg.flags & ~(VGPU_REG_MAPPED | VGPU_REG_READONLY))
		return -EINVAL;
	err = vgpu_span_pages(arg.addr, arg.len, &first, &nr);
	if (err)
		return err;
	if (!s->max_segments)
		return -EOPNOTSUPP;

	r = kzalloc(sizeof(*r), GFP_KERNEL);
	if (!r)
		return -ENOMEM;
	INIT_LIST_HEAD(&r->node);

	cap = min_t(u64, nr, (u64)s->max_segments * max(vgpu_max_frames, 1U));
	segs = kvmalloc_array(cap, sizeof(*segs), GFP_KERNEL);
	if (!segs) {
		err = -ENOMEM;
		goto free_region;
	}
	vgpu_segs_init(&b, segs, cap);

	err = vgpu_mapping_lookup(file, arg.addr, arg.len, &r->mapping, &offset);
	if (!err) {
		err = vgpu_mapping_segs(r->mapping, offset, arg.len, &b);
	} else if (err == -ENOENT) {
		unsigned int gup = FOLL_LONGTERM;

		if (!(arg.flags & VGPU_REG_READONLY))
			gup |= FOLL_WRITE;
		err = vgpu_pin_range(arg.addr, arg.len, gup, &r->pins);
		if (!err)
			err = vgpu_pins_to_segs(&r->pins, arg.addr, arg.len, &b);
	}
	if (err)
		goto free_segs;

	greq.flags = arg.flags;
	greq.size = arg.len;
	err = vgpu_session_driver_call(s, VGPU_OP_GUEST_REGISTER, &greq,
				       sizeof(greq), segs, b.nr, &rep,
				       sizeof(rep), &status);
	kvfree(segs);
	if (err == -ETIMEDOUT || err == -EINTR) {
		/* The host may use the range any time: keep it until close. */
		mutex_lock(&s->reg_lock);
		list_add(&r->node, &s->regions);
		mutex_unlock(&s->reg_lock);
		return err;
	}
	if (!err && status)
		err = -EREMOTEIO;
	if (err) {
		if (put_user(status, &uarg->status))
			err = -EFAULT;
		goto free_region;
	}

	r->id = rep.region;
	arg.region = rep.region;
	arg.dev_ptr = rep.dev_ptr;
	arg.status = 0;
	mutex_lock(&s->reg_lock);
	list_add(&r->node, &s->regions);
	mutex_unlock(&s->reg_lock);
	if (copy_to_user(argp, &arg, sizeof(arg)))
		return -EFAULT;	/* stays registered until close */
	return 0;

free_segs:
	kvfree(segs);
free_region:
	vgpu_region_free(r);
	return err;
}

/**
 * vgpu_ioctl_unregister() - VGPU_IOC_UNREGISTER.
 * @s:    the session.
 * @argp: user pointer to the __u64 region id.
 *
 * Context: process; sleeps up to the call timeout (killably).
 * Return: 0; -ENOENT (no such region in this session); -EREMOTEIO (the host
 * refused; the range stays registered); -ETIMEDOUT, -EINTR or -EPIPE (the
 * range stays pinned until close); -EFAULT.
 */
long vgpu_ioctl_unregister(struct vgpu_session *s, void __user *argp)
{
	struct vgpu_handle_req hreq;
	struct vgpu_region *r, *found = NULL;
	s32 status = 0;
	u64 id;
	int err;

	if (get_user(id, (u64 __user *)argp))
		return -EFAULT;
	if (!id)
		return -ENOENT;
	mutex_lock(&s->reg_lock);
	list_for_each_entry(r, &s->regions, node) {
		if (r->id == id) {
			found = r;
			list_del_init(&r->node);
			break;
		}
	}
	mutex_unlock(&s->reg_lock);
	if (!found)
		return -ENOENT;

	hreq.handle = id;
	err = vgpu_session_driver_call(s, VGPU_OP_GUEST_UNREGISTER, &hreq,
				       sizeof(hreq), NULL, 0, NULL, 0, &status);
	if (!err && !status) {
		vgpu_region_free(found);
		return 0;
	}
	mutex_lock(&s->reg_lock);
	list_add(&found->node, &s->regions);
	mutex_unlock(&s->reg_lock);
	return err ? err : -EREMOTEIO;
}

/**
 * vgpu_regions_release() - free every region of a closing session.
 * @s: the session, whose stream is already shut down.
 *
 * Context: process.
 */
void vgpu_regions_release(struct vgpu_session *s)
{
	struct vgpu_region *r, *tmp;

	list_for_each_entry_safe(r, tmp, &s->regions, node) {
		list_del(&r->node);
		vgpu_region_free(r);
	}
}
