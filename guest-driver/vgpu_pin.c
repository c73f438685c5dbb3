// SPDX-License-Identifier: GPL-2.0
/*
 * vgpu_pin.c - pin user pages and turn them into guest-physical segments.
 */
#include <linux/io.h>
#include <linux/mm.h>
#include <linux/slab.h>

#include "vgpu_drv.h"

/**
 * vgpu_pin_range() - pin the pages that cover a user range.
 * @addr:      first byte (user virtual address).
 * @len:       bytes (> 0).
 * @gup_flags: FOLL_WRITE when the host writes the pages, FOLL_LONGTERM for
 *             registrations.
 * @pins:      out: the pinned pages; release with vgpu_unpin().
 *
 * Context: process; takes mmap_lock, sleeps.
 * Return: 0; -EINVAL for @len == 0; -EOVERFLOW for a wrapping range; -E2BIG
 * beyond the max_pin_mb module parameter; -ENOMEM; -EFAULT when a page is
 * not mapped or not accessible as asked (nothing stays pinned then).
 */
int vgpu_pin_range(u64 addr, u64 len, unsigned int gup_flags,
		   struct vgpu_pins *pins)
{
	unsigned long first, nr, done = 0;
	int ret;

	pins->pages = NULL;
	pins->nr = 0;
	pins->dirty = gup_flags & FOLL_WRITE;

	ret = vgpu_span_pages(addr, len, &first, &nr);
	if (ret)
		return ret;
	if (nr > ((u64)vgpu_max_pin_mb << (20 - PAGE_SHIFT)))
		return -E2BIG;
	if (!access_ok((void __user *)(uintptr_t)first, nr << PAGE_SHIFT))
		return -EFAULT;

	pins->pages = kvmalloc_array(nr, sizeof(*pins->pages), GFP_KERNEL);
	if (!pins->pages)
		return -ENOMEM;

	while (done < nr) {
		int chunk = min_t(unsigned long, nr - done, INT_MAX >> PAGE_SHIFT);

		ret = pin_user_pages_fast(first + (done << PAGE_SHIFT), chunk,
					  gup_flags, pins->pages + done);
		if (ret <= 0) {
			ret = ret == -ENOMEM ? -ENOMEM : -EFAULT;
			goto unpin_partial;
		}
		done += ret;
		pins->nr = done;
	}
	return 0;

unpin_partial:
	vgpu_unpin(pins);
	return ret;
}

/**
 * vgpu_unpin() - release pages pinned by vgpu_pin_range().
 * @pins: the pins; emptied.
 *
 * Context: process (may sleep to lock pages it marks dirty).
 */
void vgpu_unpin(struct vgpu_pins *pins)
{
	if (pins->nr)
		unpin_user_pages_dirty_lock(pins->pages, pins->nr, pins->dirty);
	kvfree(pins->pages);
	pins->pages = NULL;
	pins->nr = 0;
}

/**
 * vgpu_pins_to_segs() - append the segments of a pinned user range.
 * @pins: pages covering [@addr, @addr + @len), from vgpu_pin_range().
 * @addr: first byte.
 * @len:  bytes.
 * @b:    the segment list; sealed first, so this buffer's segments never
 *        merge with an earlier buffer's.
 *
 * Physically contiguous pages (a transparent huge page, neighbouring page
 * frames) become one segment.
 *
 * Context: any.
 * Return: 0, or -E2BIG when @b is full.
 */
int vgpu_pins_to_segs(const struct vgpu_pins *pins, u64 addr, u64 len,
		      struct vgpu_seg_builder *b)
{
	u64 off = offset_in_page(addr);
	unsigned long i;
	int err;

	vgpu_segs_seal(b);
	for (i = 0; i < pins->nr && len; i++) {
		u64 n = min_t(u64, PAGE_SIZE - off, len);

		err = vgpu_segs_add(b, page_to_phys(pins->pages[i]) + off, n);
		if (err)
			return err;
		len -= n;
		off = 0;
	}
	return 0;
}
