#!/bin/sh
# build.sh OUTDIR: the vgpu *user guest*, a Debian 12 disk image with the
# vGPU pieces installed the way a user would install them:
#   - vgpu.ko through DKMS (guest-driver/ laid out by `make dkms-src`,
#     then dkms add/build/install against the image's own kernel headers),
#     loaded at boot with the virtio vsock transport (modules-load.d);
#   - the guest libraries (guest-lib, `make install PREFIX=/opt/vgpu`) on
#     the loader path (ld.so.conf.d/vgpu.conf).
# Root logs in without a password on the serial console (a test image).
#
# Writes OUTDIR/disk.raw (ext4, sparse, $SIZE), OUTDIR/vmlinuz,
# OUTDIR/initrd.img, OUTDIR/image.json, OUTDIR/run.sh (a QEMU command line with
# the vGPU options). Needs root, debootstrap, network to $MIRROR, mkfs.ext4
# (>= 1.43 for -d). The debootstrapped base is cached in
# $VGPU_CACHE (default vm-images/cache)/userguest-base-$SUITE.
#
# CHECK=1 also boots the image under TCG with init=/usr/local/sbin/vgpu-check,
# which loads vgpu.ko and lists the libraries, and fails if either is missing.
set -eu

out=${1:?usage: build.sh OUTDIR}
here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
repo=$(CDPATH= cd -- "$here/../.." && pwd)
suite=${SUITE:-bookworm}
mirror=${MIRROR:-http://deb.debian.org/debian}
size=${SIZE:-4G}
cache=${VGPU_CACHE:-$repo/vm-images/cache}
base=$cache/userguest-base-$suite
pkgs=linux-image-amd64,linux-headers-amd64,dkms,systemd-sysv,udev,kmod,python3
drv_version=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$repo/guest-driver/dkms.conf")

say() { echo "userguest: $*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot)"
command -v debootstrap >/dev/null || die "no debootstrap: apt-get install debootstrap"
mkdir -p "$out" "$cache"
out=$(CDPATH= cd -- "$out" && pwd)
root=$out/rootfs

if [ ! -f "$base/.vgpu-base-done" ]; then
	say "debootstrap $suite into $base (a few minutes, once)"
	rm -rf "$base.tmp"
	debootstrap --variant=minbase --include="$pkgs" "$suite" "$base.tmp" "$mirror" >"$cache/userguest-debootstrap.log" 2>&1 ||
		die "debootstrap failed; see $cache/userguest-debootstrap.log"
	touch "$base.tmp/.vgpu-base-done"
	rm -rf "$base"
	mv "$base.tmp" "$base"
fi

say "copying the base into $root"
rm -rf "$root"
cp -a "$base" "$root"
rm -f "$root/.vgpu-base-done"
kver=$(ls "$root/lib/modules" | sort -V | tail -1)
[ -n "$kver" ] && [ -d "$root/usr/src/linux-headers-$kver" ] || die "no kernel headers for $kver in the image"

mounted=
cleanup() {
	for m in $mounted; do umount "$m" 2>/dev/null || true; done
}
trap cleanup EXIT INT TERM
for m in proc sys dev; do
	mount --bind "/$m" "$root/$m" && mounted="$root/$m $mounted" || say "warning: cannot bind /$m into the chroot"
done

say "vgpu.ko $drv_version through DKMS for $kver"
make -s -C "$repo/guest-driver" dkms-src DKMS_SRC="$root/usr/src/vgpu-$drv_version"
chroot "$root" dkms add -m vgpu -v "$drv_version" >/dev/null
chroot "$root" dkms build -m vgpu -v "$drv_version" -k "$kver" >"$out/dkms-build.log" 2>&1 ||
	{ cat "$root/var/lib/dkms/vgpu/$drv_version/build/make.log" >>"$out/dkms-build.log" 2>/dev/null; die "dkms build failed; see $out/dkms-build.log"; }
chroot "$root" dkms install -m vgpu -v "$drv_version" -k "$kver" >>"$out/dkms-build.log" 2>&1 || die "dkms install failed; see $out/dkms-build.log"

say "guest libraries into /opt/vgpu"
make -s -C "$repo/guest-lib" install PREFIX=/opt/vgpu DESTDIR="$root" >"$out/guest-lib-install.log" 2>&1 ||
	die "guest-lib install failed; see $out/guest-lib-install.log"
echo /opt/vgpu/lib >"$root/etc/ld.so.conf.d/vgpu.conf"
chroot "$root" ldconfig

say "configuring"
echo vgpu-guest >"$root/etc/hostname"
printf '/dev/vda / ext4 defaults 0 1\n' >"$root/etc/fstab"
printf 'vmw_vsock_virtio_transport\nvgpu\n' >"$root/etc/modules-load.d/vgpu.conf"
chroot "$root" passwd -d root >/dev/null
mkdir -p "$root/etc/systemd/system/serial-getty@ttyS0.service.d"
cat >"$root/etc/systemd/system/serial-getty@ttyS0.service.d/autologin.conf" <<'UNIT'
[Service]
ExecStart=
ExecStart=-/sbin/agetty --autologin root --keep-baud 115200,57600,38400,9600 %I $TERM
UNIT
mkdir -p "$root/usr/local/sbin"
cat >"$root/usr/local/sbin/vgpu-check" <<'CHECK'
#!/bin/sh
# Boot check and one-shot runner of the user guest, used as
# init=/usr/local/sbin/vgpu-check: loads vgpu.ko, checks the libraries, then
# runs the command given as vgpu_run=<base64 of a sh -c script> on the kernel
# command line (if any), prints VGPU-EXIT-STATUS like the test guest and
# powers off.
mount -t proc proc /proc 2>/dev/null; mount -t sysfs sys /sys 2>/dev/null; mount -t devtmpfs dev /dev 2>/dev/null
mount -o remount,rw / 2>/dev/null; mount -t tmpfs tmp /tmp
rc=0
modprobe vmw_vsock_virtio_transport
if modprobe vgpu; then echo "vgpu.ko: $(modinfo -F version vgpu 2>/dev/null) loaded from $(modinfo -n vgpu)"; else echo "vgpu.ko: modprobe failed"; rc=1; fi
ls -l /dev/vgpu* 2>/dev/null
for l in libcuda.so.1 libcudart.so.12 libcudart.so.13 libnvidia-ml.so.1; do
	p=$(ldconfig -p | awk -v l="$l" '$1 == l { print $NF; exit }')
	case "$p" in /opt/vgpu/*) echo "$l -> $p" ;; *) echo "$l: not from /opt/vgpu ($p)"; rc=1 ;; esac
done
for w in $(cat /proc/cmdline); do
	case "$w" in vgpu_run=*) run=${w#vgpu_run=} ;; esac
done
if [ "$rc" = 0 ] && [ -n "${run:-}" ]; then
	echo "VGPU-START: $(cut -d' ' -f1 /proc/uptime)"
	(cd /root && HOME=/root sh -c "$(echo "$run" | base64 -d)" </dev/null)
	rc=$?
fi
echo "VGPU-EXIT-STATUS: $rc"
sync
poweroff -f
CHECK
chmod 755 "$root/usr/local/sbin/vgpu-check"
rm -f "$root/etc/machine-id" && touch "$root/etc/machine-id"
chroot "$root" apt-get clean

cleanup
mounted=
cp -L "$root/boot/vmlinuz-$kver" "$out/vmlinuz"
cp -L "$root/boot/initrd.img-$kver" "$out/initrd.img"

say "making $out/disk.raw ($size, ext4)"
rm -f "$out/disk.raw"
mkfs.ext4 -q -F -L vgpu-root -d "$root" "$out/disk.raw" "$size"

cat >"$out/image.json" <<JSON
{
  "kind": "vgpu-userguest",
  "suite": "$suite",
  "kernel_version": "$kver",
  "vgpu_driver": "$drv_version (dkms)",
  "guest_lib": "/opt/vgpu/lib",
  "built": "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
}
JSON
cat >"$out/run.sh" <<RUN
#!/bin/sh
# Boot the user guest with a vGPU served on \$1 (a vhost-user-vsock socket of
# \`vgpu serve\`); the serial console is on stdio (root logs in by itself).
here=\$(CDPATH= cd -- "\$(dirname -- "\$0")" && pwd)
sock=\${1:?usage: run.sh VHOST_USER_SOCKET [extra qemu options]}; shift
exec \${QEMU:-qemu-system-x86_64} -accel \${ACCEL:-tcg} -cpu max -smp \${CPUS:-2} \\
  -machine q35,memory-backend=mem -m \${MEM:-2G} -object memory-backend-memfd,id=mem,size=\${MEM:-2G},share=on \\
  -chardev socket,id=vgpu0,path="\$sock" -device vhost-user-vsock-pci,chardev=vgpu0 \\
  -device pcie-root-port,id=vgpu-rp,bus=pcie.0,chassis=200,slot=200 \\
  -drive file="\$here/disk.raw",if=virtio,format=raw \\
  -kernel "\$here/vmlinuz" -initrd "\$here/initrd.img" -append "root=/dev/vda rw console=ttyS0 \${APPEND:-}" \\
  -nodefaults -display none -serial stdio -nic none "\$@"
RUN
chmod 755 "$out/run.sh"
rm -rf "$root"
say "done: $out (kernel $kver, vgpu.ko $drv_version via DKMS, libraries in /opt/vgpu/lib)"

if [ "${CHECK:-0}" = 1 ]; then
	say "booting the image once (TCG) to check it"
	timeout 300 qemu-system-x86_64 -accel tcg -cpu max -smp 2 -m 1G -nodefaults -display none -no-reboot -nic none \
		-serial stdio -drive file="$out/disk.raw",if=virtio,format=raw,snapshot=on \
		-kernel "$out/vmlinuz" -initrd "$out/initrd.img" \
		-append "root=/dev/vda ro console=ttyS0 quiet panic=-1 no_timer_check init=/usr/local/sbin/vgpu-check" \
		</dev/null | tee "$out/check.log"
	grep -q '^VGPU-EXIT-STATUS: 0' "$out/check.log" || die "boot check failed; see $out/check.log"
	say "boot check passed"
fi
