#!/usr/bin/env bash
# deploy/test/libvirt.sh [WORKDIR]: a vGPU in libvirt domains (part of
# deploy/test/run.sh; root, Debian 12's libvirt-daemon-system, TCG).
#
#  boot     the test guest as a transient domain (vgpu vm domain), the vGPU
#           added by vgpu libvirt-xml --domain (memfd backing +
#           <qemu:commandline> device), runs the CUDA program of
#           cuda-program.sh on a sim backend;
#  hotplug  the same domain with vgpu libvirt-xml --hotplug (a free root
#           port, no device), the vGPU hot-plugged with vgpu attach --libvirt
#           (libvirtd's QEMU monitor), then the program.
#
# libvirtd (and virtlogd) are started here when their socket is absent (no
# systemd in CI) and stopped afterwards. QEMU runs as libvirt-qemu (group
# kvm): the test's files live in a world-readable temporary folder and the
# backends' sockets in a setgid-kvm folder, as /run/vgpu is packaged.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
logs=$root/build/deploy-test
mkdir -p "$logs"
own_work=
if [[ -n ${1:-} ]]; then work=$1/libvirt; else work=$(mktemp -d /tmp/vgpu-libvirt-test.XXXXXX); own_work=$work; fi
t0=$SECONDS
say() { echo "== libvirt: [$((SECONDS - t0))s] $*"; }
die() { echo "libvirt: FAILED: $*" >&2; exit 1; }
vgpu=$root/bin/vgpu
[[ -x $vgpu && -e guest-driver/vgpu.ko && -e guest-lib/build/libcuda.so.1 ]] || die "run make first (bin/vgpu, guest-driver/vgpu.ko, guest-lib/build)"
command -v virsh >/dev/null && command -v libvirtd >/dev/null || die "no libvirt: run scripts/setup.sh (libvirt-daemon-system, libvirt-clients)"

pids=() domains=() started=()
cleanup() {
	for d in "${domains[@]}"; do virsh -q destroy "$d" >/dev/null 2>&1 || true; done
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	# libvirtd last: the domains above are gone, and it stops cleanly.
	for ((i = ${#started[@]} - 1; i >= 0; i--)); do kill "${started[i]}" 2>/dev/null || true; wait "${started[i]}" 2>/dev/null || true; done
	[[ -z $own_work ]] || rm -rf "$own_work"
}
trap cleanup EXIT

mkdir -p "$work"
chmod 755 "$work" "$(dirname "$work")"
sock=$work/sockets
mkdir -p "$sock" && chgrp kvm "$sock" && chmod 2750 "$sock"

if [[ ! -S /run/libvirt/libvirt-sock ]]; then
	say "starting virtlogd and libvirtd (no libvirt socket; not under systemd)"
	mkdir -p /run/libvirt
	virtlogd >"$logs/virtlogd.log" 2>&1 &
	started+=($!)
	libvirtd >"$logs/libvirtd.log" 2>&1 &
	started+=($!)
	for _ in $(seq 300); do [[ -S /run/libvirt/libvirt-sock ]] && break; sleep 0.1; done
	[[ -S /run/libvirt/libvirt-sock ]] || die "libvirtd did not create /run/libvirt/libvirt-sock"
fi
virsh -q version

say "the test guest image, the CUDA program and the guest libraries, where libvirt-qemu can read them"
"$vgpu" vm image --module guest-driver/vgpu.ko --out "$work/image" >"$logs/libvirt-image.txt" 2>&1 || { cat "$logs/libvirt-image.txt"; die "vgpu vm image"; }
[[ -x $work/prog/run ]] || deploy/test/cuda-program.sh "$work/prog"
mkdir -p "$work/lib" && cp -P guest-lib/build/*.so* "$work/lib/"
chmod -R a+rX "$work/image" "$work/prog" "$work/lib"
seclabel=
if virsh capabilities | grep -q '<model>apparmor</model>'; then
	# libvirt's AppArmor profile for QEMU knows nothing of the vGPU socket
	# (DEPLOY.md says what to add); the test domains run unconfined.
	seclabel="<seclabel type='none' model='apparmor'/>"
fi

# backend NAME: a sim backend on $sock/NAME.sock, group kvm, mode 0770.
backend() {
	(umask 0007 && exec "$vgpu" serve --device sim --vhost-user-socket "$sock/$1.sock" --log-level warn) >"$logs/libvirt-serve-$1.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 300); do [[ -S $sock/$1.sock ]] && break; sleep 0.1; done
	[[ -S $sock/$1.sock ]] || die "the $1 backend did not start (see $logs/libvirt-serve-$1.log)"
}

# domain NAME VGPU-OPTIONS... -- COMMAND...: write the domain XML to $work/NAME.xml.
domain() {
	local name=$1
	shift
	local opts=()
	while [[ $1 != -- ]]; do opts+=("$1"); shift; done
	shift
	"$vgpu" vm domain --image "$work/image" --name "$name" --console "$work/$name.console" --mem 1G --cpus 2 \
		--share "$work/prog" --share "$work/lib" --env LD_LIBRARY_PATH="$work/lib" -- "$@" >"$work/$name.base.xml"
	"$vgpu" libvirt-xml "${opts[@]}" --domain "$work/$name.base.xml" >"$work/$name.xml"
	[[ -z $seclabel ]] || sed -i "s|</devices>|</devices>$seclabel|" "$work/$name.xml"
	cp "$work/$name.xml" "$logs/libvirt-$name.xml"
}

# run_domain NAME: start it, wait until it ends (the guest powers off).
start_domain() {
	rm -f "$work/$1.console"
	virsh -q create "$work/$1.xml" >/dev/null || die "virsh create $1 (domain XML in $logs/libvirt-$1.xml)"
	domains+=("$1")
}
wait_domain() {
	local i
	for i in $(seq 600); do
		virsh -q domstate "$1" >/dev/null 2>&1 || break
		sleep 0.5
	done
	virsh -q domstate "$1" >/dev/null 2>&1 && die "domain $1 still runs after 5 minutes"
	cp "$work/$1.console" "$logs/libvirt-$1.console" 2>/dev/null || die "no console output from $1"
	grep -q '^VGPU-EXIT-STATUS: 0' "$work/$1.console" && grep -q 'loaded, launched' "$work/$1.console" ||
		{ tail -20 "$work/$1.console"; die "the CUDA program in domain $1 failed (console: $logs/libvirt-$1.console)"; }
	grep 'loaded, launched' "$work/$1.console"
}

say "boot: a domain with the vGPU from vgpu libvirt-xml (memfd + qemu:commandline)"
backend boot
domain vgpu-ci-boot --vhost-user-socket "$sock/boot.sock" -- "$work/prog/run"
start_domain vgpu-ci-boot
wait_domain vgpu-ci-boot

say "hotplug: vgpu attach --libvirt into a running domain"
backend hotplug
domain vgpu-ci-hotplug --hotplug -- /bin/sh -c \
	"for i in \$(seq 600); do grep -qs 0x0013 /sys/bus/virtio/devices/*/device && break; sleep 0.1; done; exec $work/prog/run"
start_domain vgpu-ci-hotplug
for _ in $(seq 600); do grep -qs '^VGPU-START' "$work/vgpu-ci-hotplug.console" && break; sleep 0.2; done
grep -qs '^VGPU-START' "$work/vgpu-ci-hotplug.console" || die "the hotplug domain's guest did not start its command"
"$vgpu" attach --libvirt vgpu-ci-hotplug --vhost-user-socket "$sock/hotplug.sock"
wait_domain vgpu-ci-hotplug
say "passed"
