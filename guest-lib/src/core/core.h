/* core.h - declarations shared by the core's own files (not exported). */
#ifndef VGPU_CORE_H
#define VGPU_CORE_H

#include "vgpu_internal.h"

#define VGPU_NOPSTAT 257
struct vgpu_opstat {
	uint16_t op;
	uint64_t calls, round_trips, bytes_out, bytes_in, ns;
};
extern struct vgpu_opstat vgpu_opstats[VGPU_NOPSTAT];
unsigned vgpu_opstat_index(uint16_t op);
void vgpu_opstat_add(uint16_t op, uint64_t bytes_out, uint64_t bytes_in, uint64_t ns, int round_trip);
/* Where a round trip on the rings waits (VGPU_STATS=1; printed at exit):
 * each counter is added to atomically, and only while stats are on. */
struct vgpu_waitstat {
	uint64_t waits;         /* replies a caller waited for on the rings */
	uint64_t slept;         /* ... of which the caller slept (its spin ended first) */
	uint64_t ns_reply;      /* request written -> its reply handed over (by the reader thread, or read by the caller) */
	uint64_t ns_handoff;    /* handed over -> the caller running again */
	uint64_t reader_sleeps; /* the reader thread slept on its doorbell (its spin ended first) */
	uint64_t bells;         /* doorbells the library rang (the backend slept) */
	uint64_t own;           /* replies their caller read from the ring itself (no hand-over) */
};
extern struct vgpu_waitstat vgpu_waitstats;
int vgpu_stats_enabled(void);
#define VGPU_WAITSTAT_ADD(field, v) __atomic_add_fetch(&vgpu_waitstats.field, (v), __ATOMIC_RELAXED)

/* Called for every notification frame from the host (any thread). */
void vgpu_notify(const struct vgpu_header *h, const void *payload);
/* Writes a NOTIFY_OUTPUT frame's device output to stdout or stderr. */
void vgpu_output_notify(const struct vgpu_header *h, const void *payload);
/* Starts the guest-mode notification thread (idempotent). */
void vgpu_start_notify_thread(void);
/* Records the error of an asynchronous call, returned at the next sync point. */
void vgpu_defer_error(int err);
/* Sends a request without waiting for (or getting) a reply. */
int vgpu_send_noreply(uint16_t op, const void *req, uint32_t req_len);
/* The backend's statistics of this session (GET_STATS), if connected. */
int vgpu_session_stats(struct vgpu_session_stats *out);
/* The guest-mode /dev/vgpu file descriptor, -1 in host mode. */
int vgpu_dev_fd(void);
/* Call before an ioctl that sends a frame on the stream (guest rings keep
 * one call order): 0, or a CUresult once the connection is broken. */
int vgpu_stream_fence(void);

/* Host mode's shared-memory rings (ring.c). create makes the memfd and
 * eventfds (fds: RING_SETUP's order; fds[0], the memfd, is the caller's to
 * close once sent); write (one writer at a time) and read (one reader)
 * move bytes, waiting as needed, and return -1 once the socket ended or
 * the backend broke the ring's rules; pending says whether completion
 * bytes wait (1), none (0), or the ring is broken (-1). */
struct vgpu_ring;
int vgpu_ring_create(int sock, uint64_t bytes, struct vgpu_ring **out, int fds[VGPU_RING_FDS]);
void vgpu_ring_destroy(struct vgpu_ring *r);
int vgpu_ring_write(struct vgpu_ring *r, const void *p, size_t n);
/* Writes one piece of a frame; the bytes are published (the tail, and the
 * backend's doorbell if it sleeps) with the last piece, so the backend
 * wakes once per frame and finds it whole (and earlier only when the ring
 * is full). vgpu_ring_write is one last piece. */
int vgpu_ring_put(struct vgpu_ring *r, const void *p, size_t n, int last);
uint64_t vgpu_ring_write_pos(struct vgpu_ring *r);
/* After sending an fd carrier on the socket, before writing its frame. */
void vgpu_ring_note_carrier(struct vgpu_ring *r);
int vgpu_ring_read(struct vgpu_ring *r, void *p, size_t n);
int vgpu_ring_pending(struct vgpu_ring *r);
/* Waits until the backend published completion bytes (1: look, with
 * pending; another thread may have read them), spinning and then sleeping
 * as vgpu_ring_read does. Any thread may wait; one reads at a time. It
 * returns 0 at once when *yield is set while it spins (another thread
 * takes the ring over), -1 when the socket ended. yield may be NULL. */
int vgpu_ring_wait_readable(struct vgpu_ring *r, const int *yield);
/* Without waiting: has the backend published completion bytes past our
 * position (1: look, with pending, as the one reader)? Any thread. */
int vgpu_ring_changed(struct vgpu_ring *r);
uint64_t vgpu_ring_default_spin_ns(void);
/* A guest's rings (vgpu.ko's pages, mapped at mem): doorbells are dev's
 * VGPU_IOC_RING_BELL and VGPU_IOC_RING_WAIT. destroy unmaps them. */
int vgpu_ring_attach(int dev, void *mem, size_t map_len, uint64_t bytes, struct vgpu_ring **out);
/* A guest: waits until the session took the request bytes before pos
 * (RingOffReqTaken), so a frame sent on the stream next comes after
 * them; -1 once *broken is set. */
int vgpu_ring_wait_taken(struct vgpu_ring *r, uint64_t pos, volatile int *broken);

#endif
