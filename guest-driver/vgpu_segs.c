// SPDX-License-Identifier: GPL-2.0
/*
 * vgpu_segs.c - pure helpers: guest-physical segment lists, page spans and
 * user frame checks. Nothing here touches memory the caller did not pass in,
 * so vgpu_segs_test.c can check it with plain tables.
 */
#include <linux/errno.h>
#include <linux/mm.h>
#include <linux/overflow.h>

#include "vgpu_segs.h"

/**
 * vgpu_segs_init() - start an empty segment list.
 * @b:    the builder.
 * @segs: where the segments go.
 * @cap:  how many fit at @segs.
 *
 * Context: any.
 */
void vgpu_segs_init(struct vgpu_seg_builder *b, struct vgpu_segment *segs,
		    u32 cap)
{
	b->segs = segs;
	b->nr = 0;
	b->cap = cap;
	b->sealed = true;
}

/**
 * vgpu_segs_add() - append a physical range, merging it into the last
 * segment when it continues it and no buffer boundary lies in between.
 * @b:    the builder.
 * @phys: guest-physical address of the first byte.
 * @len:  bytes (> 0).
 *
 * Context: any.
 * Return: 0; -EINVAL for an empty or wrapping range; -E2BIG when a new
 * segment is needed and the list is full.
 */
int vgpu_segs_add(struct vgpu_seg_builder *b, u64 phys, u64 len)
{
	struct vgpu_segment *last;
	u64 end;

	if (!len || check_add_overflow(phys, len, &end))
		return -EINVAL;
	if (!b->sealed && b->nr) {
		last = &b->segs[b->nr - 1];
		if (last->gpa + last->len == phys &&
		    !check_add_overflow(last->len, len, &end)) {
			last->len += len;
			return 0;
		}
	}
	if (b->nr >= b->cap)
		return -E2BIG;
	b->segs[b->nr].gpa = phys;
	b->segs[b->nr].len = len;
	b->nr++;
	b->sealed = false;
	return 0;
}

/**
 * vgpu_segs_seal() - mark a buffer boundary: the next range starts a new
 * segment even if it is physically contiguous with the last one.
 * @b: the builder.
 *
 * Context: any.
 */
void vgpu_segs_seal(struct vgpu_seg_builder *b)
{
	b->sealed = true;
}

/**
 * vgpu_segs_total() - sum of the lengths of a segment list.
 * @segs: the segments.
 * @nr:   how many.
 *
 * Context: any.
 * Return: the total, or U64_MAX if it overflows.
 */
u64 vgpu_segs_total(const struct vgpu_segment *segs, u32 nr)
{
	u64 sum = 0;
	u32 i;

	for (i = 0; i < nr; i++)
		if (check_add_overflow(sum, segs[i].len, &sum))
			return U64_MAX;
	return sum;
}

/**
 * vgpu_span_pages() - the pages that cover a user range.
 * @addr:     first byte.
 * @len:      bytes (> 0).
 * @first:    out: address of the first page.
 * @nr_pages: out: number of pages.
 *
 * Context: any.
 * Return: 0; -EINVAL for @len == 0; -EOVERFLOW if the range wraps around.
 */
int vgpu_span_pages(u64 addr, u64 len, unsigned long *first,
		    unsigned long *nr_pages)
{
	u64 end, last;

	if (!len)
		return -EINVAL;
	if (check_add_overflow(addr, len - 1, &last) ||
	    check_add_overflow(last | ~PAGE_MASK, (u64)1, &end))
		return -EOVERFLOW;
	*first = addr & PAGE_MASK;
	*nr_pages = (end - (addr & PAGE_MASK)) >> PAGE_SHIFT;
	return 0;
}

/**
 * vgpu_check_user_frame() - check a frame header given by user space.
 * @hdr:         the header (copied into the kernel).
 * @frame_len:   bytes the caller says the frame has.
 * @max_payload: the host's payload limit.
 *
 * A user frame is a complete request without segments: the driver alone
 * appends segments, sets the segment flags and sends VGPU_OP_SEGMENTS
 * continuations; replies and notifications come only from the host;
 * request ids with VGPU_REQ_DRIVER_BIT are the driver's. @frame_len is the
 * header plus the payload, padded or not.
 *
 * Context: any.
 * Return: 0; -EINVAL for a frame shorter than a header, unknown flags or a
 * driver request id; -EPROTO for a bad magic or major version; -EPERM for
 * segments, continuation frames or flags only the driver or the host may
 * set; -E2BIG for a payload over @max_payload; -EBADMSG when @frame_len
 * disagrees with the header's payload length.
 */
int vgpu_check_user_frame(const struct vgpu_header *hdr, u32 frame_len,
			  u32 max_payload)
{
	const u32 known = VGPU_FLAG_REPLY | VGPU_FLAG_SEGMENTS |
			  VGPU_FLAG_MORE_SEGMENTS | VGPU_FLAG_NO_REPLY |
			  VGPU_FLAG_NOTIFY;
	const u32 kernel_only = VGPU_FLAG_REPLY | VGPU_FLAG_SEGMENTS |
				VGPU_FLAG_MORE_SEGMENTS | VGPU_FLAG_NOTIFY;
	u64 padded, plain;

	if (frame_len < VGPU_HEADER_SIZE)
		return -EINVAL;
	if (hdr->magic != VGPU_MAGIC || hdr->major != VGPU_PROTO_MAJOR)
		return -EPROTO;
	if (hdr->flags & ~known)
		return -EINVAL;
	if (hdr->num_segs || (hdr->flags & kernel_only) ||
	    hdr->opcode == VGPU_OP_SEGMENTS)
		return -EPERM;
	if (hdr->request_id & VGPU_REQ_DRIVER_BIT)
		return -EINVAL;
	if (hdr->payload_len > max_payload)
		return -E2BIG;
	plain = (u64)VGPU_HEADER_SIZE + hdr->payload_len;
	padded = vgpu_frame_len(hdr->payload_len, 0);
	if (frame_len != plain && frame_len != padded)
		return -EBADMSG;
	return 0;
}

/**
 * vgpu_nr_frames() - frames needed to carry a segment list.
 * @nsegs:         segments of the call.
 * @max_per_frame: the host's max_segments (> 0).
 *
 * The first frame is the call itself; the rest are OpSegments frames.
 *
 * Context: any.
 * Return: the number of frames (1 when @nsegs is 0).
 */
u32 vgpu_nr_frames(u32 nsegs, u32 max_per_frame)
{
	if (!nsegs || !max_per_frame)
		return 1;
	return (nsegs - 1) / max_per_frame + 1;
}

/**
 * vgpu_open_admit() - may one more file of /dev/vgpu be opened?
 * @privileged: the opener has CAP_SYS_ADMIN (root).
 * @user_open:  files the opener's user holds now.
 * @total_open: files every user holds now.
 * @per_user:   most files one unprivileged user may hold (0: no cap).
 * @capacity:   most files the driver can hold at all (each takes a
 *              privileged source port and a kernel reader thread).
 * @reserve:    files of @capacity only root may take.
 *
 * One unprivileged user must not take every port: it could keep every
 * other user, and root, from the GPU.
 *
 * Return: 0, -EMFILE (the user's cap is reached) or -EBUSY (what is left
 * is root's reserve, or nothing is left).
 */
int vgpu_open_admit(bool privileged, u32 user_open, u32 total_open,
		    u32 per_user, u32 capacity, u32 reserve)
{
	if (total_open >= capacity)
		return -EBUSY;
	if (privileged)
		return 0;
	if (per_user && user_open >= per_user)
		return -EMFILE;
	if (reserve >= capacity || total_open >= capacity - reserve)
		return -EBUSY;
	return 0;
}
