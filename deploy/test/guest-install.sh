#!/bin/sh
# guest-install.sh DEBDIR PROGDIR: runs inside the test guest (as root, the
# host's Debian root read-only over 9p). Installs the guest packages the way
# a Debian guest's owner does -- dpkg -i vgpu-guest-dkms vgpu-guest, DKMS
# building vgpu.ko for the running guest kernel -- into a writable overlay
# over that root, loads the module, checks the library path, the udev rule
# and /dev/vgpu, and runs PROGDIR/run (deploy/test/cuda-program.sh) with no
# LD_LIBRARY_PATH. Prints "GUEST-INSTALL: ..." progress lines.
set -eu
debs=${1:?usage: guest-install.sh DEBDIR PROGDIR}
prog=${2:?usage: guest-install.sh DEBDIR PROGDIR}
say() { echo "GUEST-INSTALL: [$(cut -d' ' -f1 /proc/uptime)s] $*"; }

modprobe overlay
ov=/run/vgpu-overlay
mkdir -p $ov/up $ov/work $ov/root
mount -t overlay overlay -o lowerdir=/,upperdir=$ov/up,workdir=$ov/work $ov/root
for m in proc sys dev; do mount --rbind /$m $ov/root/$m; done
mount -t tmpfs -o mode=1777 tmp $ov/root/tmp
mount -t tmpfs -o mode=755 run $ov/root/run
for d in "$debs" "$prog"; do mkdir -p "$ov/root$d" && mount --bind "$d" "$ov/root$d"; done
say "writable overlay over the host root at $ov/root"

exec chroot $ov/root /bin/sh -eu -c '
debs=$1 prog=$2
say() { echo "GUEST-INSTALL: [$(cut -d" " -f1 /proc/uptime)s] $*"; }
unset LD_LIBRARY_PATH
say "dpkg -i vgpu-guest-dkms vgpu-guest (DKMS builds vgpu.ko for $(uname -r))"
DEBIAN_FRONTEND=noninteractive dpkg -i "$debs"/vgpu-guest-dkms_*.deb "$debs"/vgpu-guest_*.deb
dkms status vgpu
say "modprobe vgpu"
modprobe vgpu
echo "vgpu.ko: $(modinfo -n vgpu)"
case $(modinfo -n vgpu) in */updates/dkms/vgpu.ko) ;; *) echo "vgpu.ko did not come from DKMS"; exit 1 ;; esac
[ -c /dev/vgpu ] || { echo "no /dev/vgpu"; exit 1; }
ls -l /dev/vgpu
udevadm test --action=add /class/misc/vgpu 2>&1 | grep -q "60-vgpu.rules" || { echo "udev does not read 60-vgpu.rules for /dev/vgpu"; exit 1; }
echo "udev: 60-vgpu.rules applies to /dev/vgpu"
for l in libcuda.so.1 libnvidia-ml.so.1; do
	p=$(ldconfig -p | awk -v l=$l "\$1 == l { print \$NF; exit }")
	echo "$l -> $p"
	case $p in /usr/lib/*/vgpu/$l) ;; *) echo "$l is not the first on the library path"; exit 1 ;; esac
done
# The host root has NVIDIA'"'"'s libcuda1 in /usr/lib/x86_64-linux-gnu (Debian'"'"'s
# CUDA toolkit needs it): without a GPU it fails cuInit, so a pass also shows
# that vgpu'"'"'s library came first.
say "running the CUDA program (no LD_LIBRARY_PATH)"
"$prog/run"
say "passed"
' guest-install "$debs" "$prog"
