/* SPDX-License-Identifier: GPL-2.0 */
/*
 * vgpu_segs.h - pure helpers of the vgpu guest driver: guest-physical
 * segment lists, page spans, user frame checks. They depend on nothing but
 * their arguments, so vgpu_segs_test.c checks them with KUnit tables (and
 * tests/kunit_host runs the same tables as a host program).
 */
#ifndef _VGPU_SEGS_H
#define _VGPU_SEGS_H

#include <linux/bits.h>
#include <linux/types.h>

#include "vgpu_protocol.h"

/* Request ids with this bit are the driver's own; user frames may not use it. */
#define VGPU_REQ_DRIVER_BIT	BIT_ULL(63)

/**
 * struct vgpu_seg_builder - accumulates guest-physical segments.
 * @segs:   output array.
 * @nr:     segments used.
 * @cap:    capacity of @segs.
 * @sealed: the next range starts a new segment even if contiguous (a buffer
 *          boundary: segments of two buffers never merge).
 */
struct vgpu_seg_builder {
	struct vgpu_segment *segs;
	u32 nr;
	u32 cap;
	bool sealed;
};

void vgpu_segs_init(struct vgpu_seg_builder *b, struct vgpu_segment *segs,
		    u32 cap);
int vgpu_segs_add(struct vgpu_seg_builder *b, u64 phys, u64 len);
void vgpu_segs_seal(struct vgpu_seg_builder *b);
u64 vgpu_segs_total(const struct vgpu_segment *segs, u32 nr);
int vgpu_span_pages(u64 addr, u64 len, unsigned long *first,
		    unsigned long *nr_pages);
int vgpu_check_user_frame(const struct vgpu_header *hdr, u32 frame_len,
			  u32 max_payload);
u32 vgpu_nr_frames(u32 nsegs, u32 max_per_frame);
int vgpu_open_admit(bool privileged, u32 user_open, u32 total_open,
		    u32 per_user, u32 capacity, u32 reserve);

#endif /* _VGPU_SEGS_H */
