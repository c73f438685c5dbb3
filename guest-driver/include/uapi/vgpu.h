/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * vgpu.h - user API of the vgpu guest driver (/dev/vgpu).
 *
 * The guest CUDA library talks to the host backend only through this
 * device. It builds protocol frames (protocol/vgpu_protocol.h) without any
 * guest-physical segment and names the user buffers a call reads or writes;
 * the driver pins those pages, appends their guest-physical segments to the
 * frame, sends it on the file's own vsock stream and returns the reply.
 *
 * Each open() of /dev/vgpu is one session with the host (one vsock stream
 * from a privileged source port, opened with the driver's own HELLO; open
 * fails with ECONNREFUSED, ETIMEDOUT or EPROTO when the host cannot be
 * reached). Everything pinned or registered through a file is released when
 * it is closed; calls the host has not answered yet (their caller was
 * killed, or timed out) are waited for first, up to the call timeout, since
 * the host may still be using their pages.
 *
 * Request ids: the library picks them. They must be unique among the file's
 * calls still waiting for a reply (EBUSY otherwise) and must not have bit 63
 * set, which is the driver's (EINVAL). Several threads may call at once.
 *
 * Errors common to VGPU_IOC_CALL and VGPU_IOC_SUBMIT, each for one cause:
 *   EFAULT     a struct, the frame or a buffer is not accessible as asked
 *              (FROM_HOST buffers must be writable)
 *   EINVAL     flags, nbufs > VGPU_MAX_BUFS, frame_len < 32, unknown frame
 *              flags, driver request id, zero-length or bad-dir buffer,
 *              CALL with VGPU_FLAG_NO_REPLY
 *   EPROTO     bad magic or protocol major version
 *   EPERM      the frame carries segments (num_segs, SEGMENTS or
 *              MORE_SEGMENTS), is a VGPU_OP_SEGMENTS continuation, or has
 *              REPLY/NOTIFY flags: only the driver or the host send those
 *   EBADMSG    frame_len is neither 32 + payload_len nor that padded to 8
 *   E2BIG      payload over the host's limit; a buffer over the max_pin_mb
 *              module parameter; more segments than the host takes in
 *              max_frames frames (one call + VGPU_OP_SEGMENTS continuations)
 *   EOVERFLOW  a buffer's addr + len wraps around
 *   EOPNOTSUPP buffers, but the host takes no segments
 *   EBUSY      the request id is already waiting for a reply
 *   EPIPE      the host closed the session; open the device again
 *   EPROTO     (after the call was accepted) the host sent a malformed
 *              frame and the session was ended; open the device again.
 *              Every later call of a dead session fails with its first
 *              error.
 *   ENOTTY     unknown ioctl
 * User-caused errors are logged, rate-limited.
 */
#ifndef _UAPI_LINUX_VGPU_H
#define _UAPI_LINUX_VGPU_H

#include <linux/ioctl.h>
#include <linux/types.h>

/* 2: VGPU_IOC_RING_SETUP, RING_BELL, RING_WAIT (an older driver answers ENOTTY). */
#define VGPU_UAPI_VERSION 2

/* Direction of a user buffer, seen from the host. */
#define VGPU_BUF_TO_HOST   0x1 /* host reads it (e.g. H2D source) */
#define VGPU_BUF_FROM_HOST 0x2 /* host writes it (e.g. D2H destination) */

/**
 * struct vgpu_buf - one user buffer of a call.
 * @addr:  user virtual address of the first byte.
 * @len:   length in bytes (> 0).
 * @dir:   VGPU_BUF_TO_HOST and/or VGPU_BUF_FROM_HOST.
 * @flags: must be 0.
 *
 * The driver appends the buffer's segments in the order of the buffers; the
 * segments of one buffer never merge with another's, so the host splits the
 * list by the buffer lengths the frame's payload declares.
 */
struct vgpu_buf {
	__u64 addr;
	__u64 len;
	__u32 dir;
	__u32 flags;
};

/**
 * struct vgpu_call - argument of VGPU_IOC_CALL and VGPU_IOC_SUBMIT.
 * @frame:      user pointer to a protocol frame (header + payload) that
 *              carries no segments (hdr.nsegs == 0, no SEGMENTS flag).
 * @frame_len:  its length in bytes.
 * @nbufs:      number of entries at @bufs (at most VGPU_MAX_BUFS).
 * @bufs:       user pointer to struct vgpu_buf[@nbufs].
 * @reply:      user pointer to the reply buffer (CALL only).
 * @reply_cap:  its capacity in bytes.
 * @reply_len:  out: the reply frame's length. If it exceeds @reply_cap the
 *              call fails with -EMSGSIZE and nothing is copied.
 * @timeout_ms: 0 = the driver's default (module parameter call_timeout_ms).
 * @flags:      must be 0.
 *
 * VGPU_IOC_CALL pins the buffers, sends the frame with their segments and
 * waits for the reply, which it copies (header and payload; the CUresult is
 * the header's status) to @reply. The wait ends only with the reply, the
 * timeout (ETIMEDOUT) or a fatal signal: a caught signal does not end or
 * restart a call that was sent; its handler runs afterwards. After
 * ETIMEDOUT the pages stay pinned until the host answers (the answer is
 * then dropped) or the file is closed.
 *
 * VGPU_IOC_SUBMIT returns once the frame is sent; @reply is ignored. With
 * buffers, the driver clears VGPU_FLAG_NO_REPLY so that it learns when the
 * host is done with the pages; they stay pinned until then. A reply with a
 * non-zero status is queued for VGPU_IOC_RECV (it carries VGPU_FLAG_REPLY
 * and the call's request id); a successful one is dropped. At most 1024
 * submissions with buffers may await their reply; beyond that SUBMIT waits
 * (killably) until the host answers one. Without buffers
 * and with VGPU_FLAG_NO_REPLY nothing is kept; the host reports a failure
 * as a VGPU_OP_NOTIFY_ERROR notification.
 */
struct vgpu_call {
	__u64 frame;
	__u32 frame_len;
	__u32 nbufs;
	__u64 bufs;
	__u64 reply;
	__u32 reply_cap;
	__u32 reply_len;
	__u32 timeout_ms;
	__u32 flags;
};

#define VGPU_MAX_BUFS 8

/**
 * struct vgpu_recv - argument of VGPU_IOC_RECV: the next notification
 * frame from the host (host-function requests, deferred errors).
 * @buf:        user pointer where the frame is copied.
 * @cap:        its capacity in bytes.
 * @len:        out: the frame's length.
 * @timeout_ms: 0 waits until a notification arrives or a signal.
 * @flags:      must be 0.
 *
 * The queue holds host notifications (VGPU_FLAG_NOTIFY: deferred errors,
 * host-function requests) and failed VGPU_IOC_SUBMIT replies, oldest first,
 * at most 256 (newer ones are dropped and logged). Errors: EMSGSIZE when
 * the frame is larger than @cap (it stays queued; @len says its size),
 * EAGAIN when @timeout_ms passed, EINTR/ERESTARTSYS on a signal, the
 * session's first error (EPIPE, EPROTO) when it is over and nothing is
 * queued.
 */
struct vgpu_recv {
	__u64 buf;
	__u32 cap;
	__u32 len;
	__u32 timeout_ms;
	__u32 flags;
};

/* struct vgpu_register flags */
#define VGPU_REG_MAPPED   0x1 /* host makes it device-visible (zero-copy) */
#define VGPU_REG_READONLY 0x2 /* host only reads it */

/**
 * struct vgpu_register - argument of VGPU_IOC_REGISTER: pin a user range
 * long-term (FOLL_LONGTERM) and announce it to the host once.
 * @addr:       first byte of the user range (page-aligned start and
 *              length recommended; the driver pins the pages that cover it).
 * @len:        its length in bytes.
 * @flags:      VGPU_REG_*.
 * @status:     out: when the ioctl fails with EREMOTEIO, the host's
 *              CUresult (was a pad field in version 1: same layout).
 * @region:     out: the host's id for the range; calls name guest memory
 *              inside it as (region, offset from @addr).
 * @dev_ptr:    out: with VGPU_REG_MAPPED, the device address of @addr.
 *
 * The host sees the range as VGPU_OP_GUEST_REGISTER with its segments.
 * Memory mapped from this file is announced without a second pin. Errors:
 * EINVAL (flags, zero length), EOVERFLOW, EFAULT, E2BIG, EREMOTEIO (the host
 * refused: @status), ETIMEDOUT or EINTR (fatal signal; the range stays
 * pinned until close), EPIPE.
 * VGPU_IOC_UNREGISTER takes the region id: ENOENT if this file has no such
 * region, EREMOTEIO if the host refused (the range stays registered).
 */
struct vgpu_register {
	__u64 addr;
	__u64 len;
	__u32 flags;
	__s32 status;
	__u64 region;
	__u64 dev_ptr;
};

/**
 * struct vgpu_info - argument of VGPU_IOC_INFO.
 * @uapi_version:  VGPU_UAPI_VERSION.
 * @max_segments:  most segments in one frame (from the host's HELLO); one
 *                 call may carry up to the module parameter max_frames
 *                 times as many (VGPU_OP_SEGMENTS continuations).
 * @max_frame:     largest frame the host accepts, in bytes.
 * @host_port:     the vsock port of the host service.
 * @local_port:    this session's (privileged) source port.
 * @pad:           0.
 * @session_id:    the host's session id.
 */
struct vgpu_info {
	__u32 uapi_version;
	__u32 max_segments;
	__u32 max_frame;
	__u32 host_port;
	__u32 local_port;
	__u32 pad;
	__u64 session_id;
};

/**
 * struct vgpu_ring_setup - argument of VGPU_IOC_RING_SETUP: request and
 * completion rings in guest RAM for this file (protocol/ring.go's layout).
 * @ring_bytes:  each ring's size: a power of two in [VGPU_RING_MIN_BYTES,
 *               VGPU_RING_MAX_BYTES]; 0: VGPU_RING_DEFAULT_BYTES (out: the
 *               size used).
 * @flags:       0.
 * @mmap_offset: out: mmap() this offset (MAP_SHARED, @map_len bytes) to
 *               reach the header page and the two rings.
 * @map_len:     out: VGPU_RING_HEADER_SIZE + 2 * @ring_bytes.
 * @status:      out: when the ioctl fails with EREMOTEIO, the host's
 *               CUresult (an older backend answers NOT_SUPPORTED).
 * @pad:         0.
 *
 * The driver allocates the pages, writes the header, and registers them
 * with the host (VGPU_OP_RING_SETUP_GUEST, its segments naming them). The
 * pages stay the driver's until the file is closed; then the driver ends
 * the rings (VGPU_OP_RING_TEARDOWN) and frees them once the host answered
 * (never before: a host that does not answer keeps them). One ring pair
 * per file. Errors: EINVAL, EBUSY (rings exist), ENOMEM, ENOSPC (64 MiB
 * of earlier rings' pages are kept because their teardown was never
 * answered), EREMOTEIO (@status), ETIMEDOUT or EINTR (the rings may exist:
 * they end at close), EPIPE.
 */
struct vgpu_ring_setup {
	__u64 ring_bytes;
	__u64 flags;
	__u64 mmap_offset;
	__u64 map_len;
	__s32 status;
	__u32 pad;
};

/**
 * struct vgpu_ring_wait - argument of VGPU_IOC_RING_WAIT: wait until the
 * host rang this file's doorbell (VGPU_OP_NOTIFY_RING_BELL) since @seen.
 * @seen:       in: the count of doorbells the caller last saw (0 at
 *              first); out: the count now.
 * @timeout_ms: most milliseconds to wait (0: return at once).
 * @pad:        0.
 *
 * Returns 0 when the count differs from @seen or the time is up (compare
 * @seen), EINTR on a signal, EPIPE (or the session's error) when the
 * session is dead or the host ended the rings (the process broke them:
 * VGPU_RING_BELL_BROKEN; RING_BELL fails with EPIPE too; calls on the
 * stream go on), ENXIO without rings.
 */
struct vgpu_ring_wait {
	__u64 seen;
	__u32 timeout_ms;
	__u32 pad;
};

/* The mmap() offset of the rings (struct vgpu_ring_setup.mmap_offset). */
#define VGPU_RING_MMAP_OFFSET (1ULL << 40)

#define VGPU_IOC_MAGIC 'V'
#define VGPU_IOC_CALL       _IOWR(VGPU_IOC_MAGIC, 0x01, struct vgpu_call)
#define VGPU_IOC_SUBMIT     _IOW(VGPU_IOC_MAGIC, 0x02, struct vgpu_call)
#define VGPU_IOC_RECV       _IOWR(VGPU_IOC_MAGIC, 0x03, struct vgpu_recv)
#define VGPU_IOC_REGISTER   _IOWR(VGPU_IOC_MAGIC, 0x04, struct vgpu_register)
#define VGPU_IOC_UNREGISTER _IOW(VGPU_IOC_MAGIC, 0x05, __u64)
#define VGPU_IOC_INFO       _IOR(VGPU_IOC_MAGIC, 0x06, struct vgpu_info)
#define VGPU_IOC_RING_SETUP _IOWR(VGPU_IOC_MAGIC, 0x07, struct vgpu_ring_setup)
/* Ring the host's doorbell of this file's rings (argument: __u32, a
 * VGPU_RING_BELL_* value): sends VGPU_OP_RING_BELL without waiting. */
#define VGPU_IOC_RING_BELL  _IOW(VGPU_IOC_MAGIC, 0x08, __u32)
#define VGPU_IOC_RING_WAIT  _IOWR(VGPU_IOC_MAGIC, 0x09, struct vgpu_ring_wait)

/*
 * mmap(): maps driver-allocated, pinned, zeroed memory (for cudaMallocHost
 * and cudaHostAlloc), in physically contiguous chunks as large as the guest
 * can give (up to 4 MiB each on x86-64), so the host sees few segments. The
 * mapping must be MAP_SHARED at offset 0 (EINVAL otherwise) and at most
 * max_pin_mb; it is not inherited by fork() children. Calls may name it as
 * ordinary buffers. VGPU_IOC_REGISTER on an address inside it registers it
 * with the host without a second pin; the memory lives until it is unmapped
 * and no registration refers to it.
 */

#endif /* _UAPI_LINUX_VGPU_H */
