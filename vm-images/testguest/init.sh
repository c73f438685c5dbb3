#!/bin/busybox sh
# /init of the vgpu test guest. Built into the initramfs by package testguest;
# the job comes on the kernel command line as vgpu_job=<base64 of a shell
# fragment> (see testguest.JobCmdline). Lines starting with "VGPU-" are read by
# the host launcher: keep their format in step with testguest.ParseLine.
/bin/busybox mkdir -p /proc /sys /dev /host /usr/bin /usr/sbin /sbin
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t devtmpfs dev /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sys /sys

fail() {
	echo "VGPU-INIT-ERROR: $*"
	echo "VGPU-EXIT-STATUS: 255"
	sync
	poweroff -f
	sleep 5
	echo o >/proc/sysrq-trigger
}

echo "VGPU-INIT: $(cut -d' ' -f1 /proc/uptime)"
# The loopback interface, up as on any Linux system: programs that talk to
# themselves over sockets need it (NCCL's bootstrap, even for one GPU).
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up 2>/dev/null

# Modules, in dependency order (written by the builder).
while read -r m; do
	[ -n "$m" ] || continue
	insmod "/lib/modules/$m" || fail "insmod $m failed (kernel $(uname -r))"
done </modules.order

# The job: VGPU_SHARES (lines "tag ro|rw path"), VGPU_SCRIPT (sh -c text).
job=
for w in $(cat /proc/cmdline); do
	case "$w" in vgpu_job=*) job="${w#vgpu_job=}" ;; esac
done
[ -n "$job" ] || fail "no vgpu_job= on the kernel command line"
echo "$job" | base64 -d >/job.sh || fail "vgpu_job is not valid base64"
. /job.sh

mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144 hostroot /host ||
	fail "cannot mount the host root (9p tag hostroot): is -virtfs ...,mount_tag=hostroot given?"
mount -t proc proc /host/proc || fail "mount /host/proc"
mount -t sysfs sys /host/sys || fail "mount /host/sys"
mount -t devtmpfs dev /host/dev || fail "mount /host/dev"
mkdir -p /host/dev/pts /host/dev/shm
mount -t devpts devpts /host/dev/pts
mount -t tmpfs -o mode=1777 shm /host/dev/shm
ln -sf /proc/self/fd /host/dev/fd; ln -sf /proc/self/fd/0 /host/dev/stdin; ln -sf /proc/self/fd/1 /host/dev/stdout; ln -sf /proc/self/fd/2 /host/dev/stderr
mount -t tmpfs -o mode=1777 tmp /host/tmp || fail "mount /host/tmp"
mount -t tmpfs -o mode=755 run /host/run 2>/dev/null
# Extra files the image carries for /tmp and /run (Options.ExtraFiles).
if [ -d /files ]; then
	(cd /files && find . -type f) | while read -r f; do
		f=${f#./}
		mkdir -p "/host/$(dirname "$f")" && cp -p "/files/$f" "/host/$f" ||
			echo "VGPU-INIT-ERROR: cannot copy extra file /$f into the guest"
	done
fi

printf '%s\n' "$VGPU_SHARES" | while read -r tag mode path; do
	[ -n "$tag" ] || continue
	mkdir -p "/host$path" 2>/dev/null
	mount -t 9p -o "trans=virtio,version=9p2000.L,$mode,cache=mmap,msize=262144" "$tag" "/host$path" ||
		echo "VGPU-INIT-ERROR: cannot mount share $tag at $path (it must exist on the host or lie under /tmp or /run)"
done

echo "VGPU-START: $(cut -d' ' -f1 /proc/uptime)"
chroot /host /bin/sh -c "$VGPU_SCRIPT" </dev/null
rc=$?
echo "VGPU-EXIT-STATUS: $rc"
sync
printf '%s\n' "$VGPU_SHARES" | while read -r tag mode path; do
	[ -n "$tag" ] && umount "/host$path" 2>/dev/null
done
poweroff -f
