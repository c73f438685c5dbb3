// SPDX-License-Identifier: GPL-2.0
/*
 * vgpu_main.c - the /dev/vgpu misc device of the vgpu paravirtual GPU.
 *
 * Each open() is a session with the host backend over its own kernel vsock
 * stream from a privileged source port; the guest CUDA library sends its
 * calls through VGPU_IOC_CALL and VGPU_IOC_SUBMIT, and the driver adds the
 * guest-physical segments of the user buffers they name. Only this driver
 * can name guest-physical memory: the host refuses segments on streams from
 * unprivileged ports. See include/uapi/vgpu.h for the user API and
 * protocol/doc.go for the wire protocol.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/fs.h>
#include <linux/hashtable.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/uidgid.h>

#include "vgpu_drv.h"

unsigned int vgpu_port = VGPU_DEFAULT_PORT;
module_param_named(port, vgpu_port, uint, 0644);
MODULE_PARM_DESC(port, "vsock port of the host vGPU service (default 30311)");

unsigned int vgpu_cid = 2;
module_param_named(cid, vgpu_cid, uint, 0644);
MODULE_PARM_DESC(cid, "vsock CID of the host (default 2)");

/*
 * Long: a synchronising call legitimately waits for all queued GPU work, and
 * the waits are killable. The library may pass a shorter per-call timeout.
 */
unsigned int vgpu_call_timeout_ms = 600000;
module_param_named(call_timeout_ms, vgpu_call_timeout_ms, uint, 0644);
MODULE_PARM_DESC(call_timeout_ms,
		 "default time a call waits for its reply, ms (default 600000; 0: forever)");

unsigned int vgpu_max_pin_mb = 4096;
module_param_named(max_pin_mb, vgpu_max_pin_mb, uint, 0644);
MODULE_PARM_DESC(max_pin_mb,
		 "largest buffer, registration or mapping, MiB (default 4096)");

unsigned int vgpu_max_frames = VGPU_MAX_CONT_FRAMES;
module_param_named(max_frames, vgpu_max_frames, uint, 0644);
MODULE_PARM_DESC(max_frames,
		 "most frames (call + OpSegments continuations) one call's segments may take (default 64)");

/*
 * Each open file takes a privileged source port (VGPU_PRIVPORT_MIN..MAX)
 * and a kernel reader thread: one user must not take them all.
 */
unsigned int vgpu_max_opens_per_user = 64;
module_param_named(max_opens_per_user, vgpu_max_opens_per_user, uint, 0644);
MODULE_PARM_DESC(max_opens_per_user,
		 "most /dev/vgpu files one non-root user may hold open (default 64; 0: no cap)");

unsigned int vgpu_root_reserve = 32;
module_param_named(root_reserve, vgpu_root_reserve, uint, 0644);
MODULE_PARM_DESC(root_reserve,
		 "files (of the 512 privileged ports) only root may open (default 32)");

#define VGPU_PRIVPORTS	(VGPU_PRIVPORT_MAX - VGPU_PRIVPORT_MIN + 1)

/**
 * struct vgpu_user - open files of one user.
 * @node: entry in vgpu_users.
 * @uid:  the user (the opener's effective uid).
 * @open: files the user holds.
 */
struct vgpu_user {
	struct hlist_node node;
	kuid_t uid;
	u32 open;
};

static DEFINE_MUTEX(vgpu_users_lock);
static DEFINE_HASHTABLE(vgpu_users, 6);
static u32 vgpu_open_total;

static struct vgpu_user *vgpu_user_find(kuid_t uid)
{
	struct vgpu_user *u;

	hash_for_each_possible(vgpu_users, u, node, __kuid_val(uid))
		if (uid_eq(u->uid, uid))
			return u;
	return NULL;
}

/* vgpu_charge_open() - count one more file of @uid, or refuse it. */
static int vgpu_charge_open(kuid_t uid, bool privileged)
{
	struct vgpu_user *u;
	int err;

	mutex_lock(&vgpu_users_lock);
	u = vgpu_user_find(uid);
	err = vgpu_open_admit(privileged, u ? u->open : 0, vgpu_open_total,
			      vgpu_max_opens_per_user, VGPU_PRIVPORTS,
			      vgpu_root_reserve);
	if (!err && !u) {
		u = kzalloc(sizeof(*u), GFP_KERNEL);
		if (u) {
			u->uid = uid;
			hash_add(vgpu_users, &u->node, __kuid_val(uid));
		} else {
			err = -ENOMEM;
		}
	}
	if (!err) {
		u->open++;
		vgpu_open_total++;
	}
	mutex_unlock(&vgpu_users_lock);
	return err;
}

static void vgpu_uncharge_open(kuid_t uid)
{
	struct vgpu_user *u;

	mutex_lock(&vgpu_users_lock);
	u = vgpu_user_find(uid);
	if (!WARN_ON_ONCE(!u)) {
		vgpu_open_total--;
		if (--u->open == 0) {
			hash_del(&u->node);
			kfree(u);
		}
	}
	mutex_unlock(&vgpu_users_lock);
}

/* Measurements of the last call's pin + translate step, for benchmarks. */
unsigned long vgpu_last_pin_ns;
module_param_named(last_pin_ns, vgpu_last_pin_ns, ulong, 0444);
MODULE_PARM_DESC(last_pin_ns, "time the last call with buffers spent pinning and translating, ns");
unsigned long vgpu_last_pin_pages;
module_param_named(last_pin_pages, vgpu_last_pin_pages, ulong, 0444);
MODULE_PARM_DESC(last_pin_pages, "pages the last call with buffers pinned");
unsigned long vgpu_last_pin_segs;
module_param_named(last_pin_segs, vgpu_last_pin_segs, ulong, 0444);
MODULE_PARM_DESC(last_pin_segs, "segments the last call with buffers produced");

static int vgpu_open(struct inode *inode, struct file *file)
{
	struct vgpu_session *s;
	int err;

	/* The file's credentials are the opener's, at release too. */
	err = vgpu_charge_open(file->f_cred->euid, capable(CAP_SYS_ADMIN));
	if (err) {
		pr_info_ratelimited("open refused for uid %u: %s\n",
				    from_kuid(&init_user_ns, file->f_cred->euid),
				    err == -EMFILE ? "the user holds max_opens_per_user files" :
				    "only root's reserve of sessions is left");
		return err;
	}
	s = vgpu_session_open();
	if (IS_ERR(s)) {
		vgpu_uncharge_open(file->f_cred->euid);
		pr_info_ratelimited("cannot reach the host at %u:%u (%ld)\n",
				    vgpu_cid, vgpu_port, PTR_ERR(s));
		return PTR_ERR(s);
	}
	file->private_data = s;
	return nonseekable_open(inode, file);
}

static int vgpu_release(struct inode *inode, struct file *file)
{
	vgpu_session_close(file->private_data);
	vgpu_uncharge_open(file->f_cred->euid);
	return 0;
}

static long vgpu_ioctl_info(struct vgpu_session *s, void __user *argp)
{
	struct vgpu_info info = {
		.uapi_version = VGPU_UAPI_VERSION,
		.max_segments = s->max_segments,
		.max_frame = vgpu_frame_len(s->max_payload, 0),
		.host_port = vgpu_port,
		.local_port = s->local_port,
		.session_id = s->session_id,
	};

	return copy_to_user(argp, &info, sizeof(info)) ? -EFAULT : 0;
}

static long vgpu_ioctl_recv(struct vgpu_session *s, void __user *argp)
{
	struct vgpu_recv __user *uarg = argp;
	struct vgpu_recv arg;
	int err;

	if (copy_from_user(&arg, argp, sizeof(arg)))
		return -EFAULT;
	if (arg.flags)
		return -EINVAL;
	err = vgpu_session_recv(s, &arg, u64_to_user_ptr(arg.buf));
	if ((!err || err == -EMSGSIZE) && put_user(arg.len, &uarg->len))
		return -EFAULT;
	return err;
}

static long vgpu_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct vgpu_session *s = file->private_data;
	void __user *argp = (void __user *)arg;

	switch (cmd) {
	case VGPU_IOC_CALL:
		return vgpu_ioctl_call(s, argp, false);
	case VGPU_IOC_SUBMIT:
		return vgpu_ioctl_call(s, argp, true);
	case VGPU_IOC_RECV:
		return vgpu_ioctl_recv(s, argp);
	case VGPU_IOC_REGISTER:
		return vgpu_ioctl_register(file, argp);
	case VGPU_IOC_UNREGISTER:
		return vgpu_ioctl_unregister(s, argp);
	case VGPU_IOC_INFO:
		return vgpu_ioctl_info(s, argp);
	case VGPU_IOC_RING_SETUP:
		return vgpu_ioctl_ring_setup(s, argp);
	case VGPU_IOC_RING_BELL:
		return vgpu_ioctl_ring_bell(s, argp);
	case VGPU_IOC_RING_WAIT:
		return vgpu_ioctl_ring_wait(s, argp);
	default:
		return -ENOTTY;
	}
}

static const struct file_operations vgpu_fops = {
	.owner = THIS_MODULE,
	.open = vgpu_open,
	.release = vgpu_release,
	.unlocked_ioctl = vgpu_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = vgpu_mmap,
	.llseek = no_llseek,
};

static struct miscdevice vgpu_miscdev = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "vgpu",
	.fops = &vgpu_fops,
	.mode = 0666,
};

static int __init vgpu_init(void)
{
	int err;

	err = misc_register(&vgpu_miscdev);
	if (err) {
		pr_err("cannot register /dev/vgpu: %d\n", err);
		return err;
	}
	pr_info("version %s, host %u:%u\n", VGPU_DRV_VERSION, vgpu_cid,
		vgpu_port);
	return 0;
}

static void __exit vgpu_exit(void)
{
	misc_deregister(&vgpu_miscdev);
}

module_init(vgpu_init);
module_exit(vgpu_exit);

MODULE_DESCRIPTION("vgpu paravirtual GPU guest driver");
MODULE_AUTHOR("The vgpu project");
MODULE_LICENSE("GPL");
MODULE_VERSION(VGPU_DRV_VERSION);
MODULE_SOFTDEP("pre: vmw_vsock_virtio_transport");
