/* SPDX-License-Identifier: GPL-2.0 */
/*
 * vgpu_drv.h - internal interfaces of the vgpu guest driver.
 *
 * A session (struct vgpu_session) is one open file of /dev/vgpu: one kernel
 * vsock stream to the host from a privileged source port, a reader thread
 * that demultiplexes the host's frames, the calls waiting for a reply, the
 * notifications waiting for VGPU_IOC_RECV, and the memory the session pinned,
 * registered or mapped.
 */
#ifndef _VGPU_DRV_H
#define _VGPU_DRV_H

#include <linux/completion.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/types.h>
#include <linux/wait.h>

#include "vgpu_protocol.h"
#include "vgpu_segs.h"
#include "include/uapi/vgpu.h"

#define VGPU_DRV_VERSION "0.1.0"

/* Privileged source ports the driver binds, walked downwards. */
#define VGPU_PRIVPORT_MAX	1023
#define VGPU_PRIVPORT_MIN	512

/* Default of max_frames: frames one call's segments may take. */
#define VGPU_MAX_CONT_FRAMES	64

/* Submissions with pinned pages a session may have in flight. */
#define VGPU_MAX_SUBMITS	1024

/* Notifications queued for VGPU_IOC_RECV before new ones are dropped. */
#define VGPU_MAX_NOTIFY		256

/* Largest payload the driver accepts from the host, whatever it announces. */
#define VGPU_MAX_RX_PAYLOAD	(64U << 20)

extern unsigned int vgpu_port;
extern unsigned int vgpu_cid;
extern unsigned int vgpu_call_timeout_ms;
extern unsigned int vgpu_max_pin_mb;
extern unsigned int vgpu_max_frames;
extern unsigned long vgpu_last_pin_ns;
extern unsigned long vgpu_last_pin_pages;
extern unsigned long vgpu_last_pin_segs;

/* ---- frames and sessions (vgpu_session.c) ---- */

/**
 * struct vgpu_frame - a frame received from the host.
 * @node: entry in the notification queue.
 * @len:  bytes at @data (header + payload, padding included).
 * @data: the frame; starts with struct vgpu_header.
 */
struct vgpu_frame {
	struct list_head node;
	size_t len;
	u8 data[];
};

static inline struct vgpu_header *vgpu_frame_hdr(struct vgpu_frame *f)
{
	return (struct vgpu_header *)f->data;
}

/**
 * struct vgpu_pins - pages pinned for one call or region.
 * @pages: the pinned pages (kvmalloc'ed).
 * @nr:    number of entries in @pages that are pinned.
 * @dirty: the host may have written them (mark dirty when unpinning).
 */
struct vgpu_pins {
	struct page **pages;
	unsigned long nr;
	bool dirty;
};

enum vgpu_req_kind {
	VGPU_REQ_CALL,		/* a thread waits for the reply */
	VGPU_REQ_SUBMIT,	/* nobody waits; a failed reply becomes a notification */
	VGPU_REQ_ORPHAN,	/* the waiter left (signal, timeout); drop the reply */
};

/**
 * struct vgpu_req - a request waiting for its reply.
 * @node:  entry in vgpu_session.pending.
 * @id:    request id (the user's, or one with VGPU_REQ_DRIVER_BIT).
 * @kind:  who owns the reply.
 * @done:  completed when @reply or @err is set.
 * @reply: the host's reply (CALL); owned by the waiter.
 * @err:   set instead of @reply when the session died.
 * @pins:  pages the host may touch until the reply arrives.
 * @nr_pins: entries of @pins used (one per buffer).
 */
struct vgpu_req {
	struct list_head node;
	u64 id;
	enum vgpu_req_kind kind;
	struct completion done;
	struct vgpu_frame *reply;
	int err;
	struct vgpu_pins pins[VGPU_MAX_BUFS];
	unsigned int nr_pins;
};

struct vgpu_mapping;
struct vgpu_ring;

/**
 * struct vgpu_region - a range registered with the host.
 * @node:    entry in vgpu_session.regions.
 * @id:      the host's region id.
 * @pins:    long-term pinned pages (user memory), or
 * @mapping: the driver's own mmap() memory (no extra pin).
 */
struct vgpu_region {
	struct list_head node;
	u64 id;
	struct vgpu_pins pins;
	struct vgpu_mapping *mapping;
};

/**
 * struct vgpu_session - state of one open /dev/vgpu file.
 * @sock:        the vsock stream to the host.
 * @reader:      kernel thread that connects, says HELLO and reads frames.
 * @ready:       completed by @reader once HELLO is answered (or failed).
 * @open_err:    result of connecting and HELLO.
 * @opener_tgid: pid (initial namespace) of the process that opened the
 *	file, sent in HELLO: the host routes a process's files to one worker.
 * @opener_uid:  its effective uid (initial namespace), sent in HELLO: the
 *	host bounds each guest user's GPU processes.
 * @send_lock:   serialises frames on the stream (continuations included).
 * @lock:        protects @pending, @notify, @nr_notify, @dead.
 * @pending:     requests waiting for a reply.
 * @notify:      frames waiting for VGPU_IOC_RECV.
 * @nr_notify:   entries on @notify.
 * @nr_submits:  submissions on @pending (at most VGPU_MAX_SUBMITS).
 * @notify_wq:   woken when @notify grows or the session dies.
 * @drain_wq:    woken when a request nobody waits for is answered.
 * @dead:        0, or why the stream is unusable (negative errno).
 * @next_id:     next driver request id (low bits).
 * @reg_lock:    protects @regions.
 * @regions:     registered ranges (id 0: announced, but the host never
 *               answered; kept pinned until close).
 * @local_port:  our privileged source port.
 * @max_segments: most segments per frame (host's HELLO; 0: no segments).
 * @max_payload: largest payload the host takes (host's HELLO).
 * @session_id:  the host's session id (host's HELLO).
 * @dropped:     notifications dropped because the queue was full.
 * @ring_lock:   protects @ring.
 * @ring:        the file's rings in guest RAM (vgpu_ring.c), or NULL.
 * @ring_bells:  doorbells the host rang (VGPU_OP_NOTIFY_RING_BELL).
 * @ring_broken: the host ended the rings (VGPU_RING_BELL_BROKEN): waits
 *               and doorbells on them fail with EPIPE.
 * @ring_wq:     woken when @ring_bells grows or the session dies.
 */
struct vgpu_session {
	struct socket *sock;
	struct task_struct *reader;
	struct completion ready;
	int open_err;
	pid_t opener_tgid;
	uid_t opener_uid;

	struct mutex send_lock;		/* frames go out whole, in order */

	spinlock_t lock;		/* pending, notify, counters, dead */
	struct list_head pending;
	struct list_head notify;
	unsigned int nr_notify;
	unsigned int nr_submits;
	wait_queue_head_t notify_wq;
	wait_queue_head_t drain_wq;
	int dead;
	atomic64_t next_id;

	struct mutex reg_lock;		/* regions */
	struct list_head regions;

	u32 local_port;
	u32 max_segments;
	u32 max_payload;
	u64 session_id;
	unsigned long dropped;

	struct mutex ring_lock;		/* ring */
	struct vgpu_ring *ring;
	atomic64_t ring_bells;
	bool ring_broken;
	wait_queue_head_t ring_wq;
};

struct vgpu_session *vgpu_session_open(void);
void vgpu_session_close(struct vgpu_session *s);
int vgpu_session_send(struct vgpu_session *s, struct vgpu_header *hdr,
		      const void *payload, u32 payload_len,
		      const struct vgpu_segment *segs, u32 nsegs);
int vgpu_req_enqueue(struct vgpu_session *s, struct vgpu_req *req);
int vgpu_submit_reserve(struct vgpu_session *s);
void vgpu_submit_release(struct vgpu_session *s);
int vgpu_req_wait(struct vgpu_session *s, struct vgpu_req *req,
		  unsigned int timeout_ms);
void vgpu_req_cancel(struct vgpu_session *s, struct vgpu_req *req);
void vgpu_req_free(struct vgpu_req *req);
u64 vgpu_session_new_id(struct vgpu_session *s);
int vgpu_session_recv(struct vgpu_session *s, struct vgpu_recv *arg,
		      void __user *buf);
int vgpu_session_driver_call(struct vgpu_session *s, u16 opcode,
			     const void *payload, u32 payload_len,
			     const struct vgpu_segment *segs, u32 nsegs,
			     void *reply, u32 reply_len, s32 *status);
int vgpu_session_driver_call_wait(struct vgpu_session *s, u16 opcode,
				  const void *payload, u32 payload_len,
				  s32 *status, bool killable);

/* ---- pinning (vgpu_pin.c) ---- */

int vgpu_pin_range(u64 addr, u64 len, unsigned int gup_flags,
		   struct vgpu_pins *pins);
void vgpu_unpin(struct vgpu_pins *pins);
int vgpu_pins_to_segs(const struct vgpu_pins *pins, u64 addr, u64 len,
		      struct vgpu_seg_builder *b);

/* ---- ioctls (vgpu_ioctl.c) ---- */

long vgpu_ioctl_call(struct vgpu_session *s, void __user *argp, bool submit);
long vgpu_ioctl_register(struct file *file, void __user *argp);
long vgpu_ioctl_unregister(struct vgpu_session *s, void __user *argp);
void vgpu_regions_release(struct vgpu_session *s);

/* ---- mmap (vgpu_mmap.c) ---- */

void vgpu_vma_set_flags(struct vm_area_struct *vma, unsigned long f);

int vgpu_mmap(struct file *file, struct vm_area_struct *vma);
int vgpu_mapping_lookup(struct file *file, u64 addr, u64 len,
			struct vgpu_mapping **mapping, u64 *offset);
int vgpu_mapping_segs(struct vgpu_mapping *m, u64 offset, u64 len,
		      struct vgpu_seg_builder *b);
void vgpu_mapping_put(struct vgpu_mapping *m);

/* ---- rings in guest RAM (vgpu_ring.c) ---- */

long vgpu_ioctl_ring_setup(struct vgpu_session *s, void __user *argp);
long vgpu_ioctl_ring_bell(struct vgpu_session *s, void __user *argp);
long vgpu_ioctl_ring_wait(struct vgpu_session *s, void __user *argp);
void vgpu_ring_note_bell(struct vgpu_session *s, u32 bell);
int vgpu_ring_mmap(struct vgpu_session *s, struct vm_area_struct *vma);
void vgpu_ring_release(struct vgpu_session *s);

#endif /* _VGPU_DRV_H */
