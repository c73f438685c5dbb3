#!/usr/bin/env bash
# setup.sh - install what building and testing vgpu needs on a fresh Debian 12
# machine (run as root). Idempotent: a second run installs nothing.
#
#   qemu-system-x86, busybox-static, cpio, kmod  the TCG test guest
#   linux-image-amd64 + linux-headers-<ver>      the guest kernel and the headers vgpu.ko builds against
#   nvidia-cuda-toolkit (non-free)               nvcc 11.8 for real nvcc output in tests (no GPU needed)
#   nvidia-smi (non-free, no recommends)         NVIDIA's nvidia-smi run against our NVML on sim (no kernel driver)
#   debhelper, dh-dkms, dkms, dpkg-dev           make deb, and DKMS in the deployment test
#   libvirt-daemon-system, libvirt-clients       the deployment test's libvirt domain (qemu driver, TCG)
#   libxml2-utils                                xmllint, for libvirt's schema check in the tests (virt-xml-validate)
#   Go modules                                   go mod download
set -euo pipefail

need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

for p in qemu-system-x86 busybox-static cpio kmod linux-image-amd64 gcc make libc6-dev xz-utils \
	debhelper dh-dkms dkms dpkg-dev libvirt-daemon-system libvirt-clients libxml2-utils; do
	have "$p" || need+=("$p")
done
if [[ "${VGPU_SKIP_NVCC:-0}" != 1 ]] && ! have nvidia-cuda-toolkit; then
	need+=(nvidia-cuda-toolkit)
fi
# nvidia-smi needs only libnvidia-ml1 and nvidia-alternative (both come
# with the toolkit); its kernel driver is a recommendation, not installed.
if [[ "${VGPU_SKIP_NVCC:-0}" != 1 ]] && ! have nvidia-smi; then
	need+=(nvidia-smi)
fi

if ((${#need[@]})); then
	if [[ $(id -u) != 0 ]]; then
		echo "setup: need root to install: ${need[*]}" >&2
		exit 1
	fi
	# nvcc lives in Debian's non-free component.
	src=/etc/apt/sources.list.d/vgpu-nonfree.sources
	if [[ ! -e $src ]]; then
		cat >"$src" <<'EOS'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOS
	fi
	echo "setup: installing ${need[*]}"
	apt-get -o DPkg::Lock::Timeout=1200 update -q
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=1200 install -y -q --no-install-recommends "${need[@]}" </dev/null
fi

# Headers of the guest kernel (the newest installed image).
kver=$(ls /lib/modules | sort -V | tail -1)
if [[ -n $kver && ! -e /lib/modules/$kver/build/Makefile ]]; then
	echo "setup: installing linux-headers-$kver"
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=1200 install -y -q --no-install-recommends "linux-headers-$kver" </dev/null
fi

cd "$(dirname "$0")/.."
go mod download
echo "setup: ok (guest kernel $kver)"
