#!/bin/sh
# build.sh OUTDIR: the vgpu *user guest*, a Debian 12 disk image with the
# vGPU installed the way a user installs it: the guest packages of `make deb`
# (from $DEBS, default build/deb) with dpkg -i --
#   - vgpu-guest-dkms: vgpu.ko built by DKMS against the image's own kernel
#     headers, loaded at boot with the virtio vsock transport, udev rule;
#   - vgpu-guest: libcuda.so.1 and libnvidia-ml.so.1 on the library path
#     (/usr/lib/x86_64-linux-gnu/vgpu, ld.so.conf.d/vgpu.conf).
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
debs=${DEBS:-$repo/build/deb}

say() { echo "userguest: $*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot)"
set -- "$debs"/vgpu-guest-dkms_*.deb "$debs"/vgpu-guest_*.deb
[ -f "$1" ] && [ -f "$2" ] || die "no guest packages in $debs: run make deb (or set DEBS)"
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

say "dpkg -i vgpu-guest-dkms vgpu-guest (DKMS builds vgpu.ko $drv_version for $kver)"
cp "$1" "$2" "$root/tmp/"
chroot "$root" sh -c 'DEBIAN_FRONTEND=noninteractive dpkg -i /tmp/vgpu-guest-dkms_*.deb /tmp/vgpu-guest_*.deb' >"$out/dpkg.log" 2>&1 ||
	die "installing the guest packages failed; see $out/dpkg.log"
rm -f "$root"/tmp/vgpu-guest*.deb
chroot "$root" dkms status -m vgpu -k "$kver" 2>/dev/null | grep -q installed ||
	die "DKMS did not build vgpu.ko for $kver; see $out/dpkg.log"

say "configuring"
echo vgpu-guest >"$root/etc/hostname"
printf '/dev/vda / ext4 defaults 0 1\n' >"$root/etc/fstab"
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
for l in libcuda.so.1 libnvidia-ml.so.1; do
	p=$(ldconfig -p | awk -v l="$l" '$1 == l { print $NF; exit }')
	case "$p" in /usr/lib/*/vgpu/*) echo "$l -> $p" ;; *) echo "$l: not vgpu's ($p)"; rc=1 ;; esac
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
  "vgpu_driver": "$drv_version (vgpu-guest-dkms)",
  "guest_lib": "/usr/lib/x86_64-linux-gnu/vgpu (vgpu-guest)",
  "packages": "$(basename "$1") $(basename "$2")",
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
say "done: $out (kernel $kver, vgpu.ko $drv_version via DKMS, vgpu-guest's libraries on the library path)"

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
