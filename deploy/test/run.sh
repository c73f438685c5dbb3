#!/usr/bin/env bash
# deploy/test/run.sh - the deployment test (make test-deploy; root, Debian 12,
# after make and scripts/setup.sh). It uses the machine as an administrator
# would and puts it back afterwards (packages purged, processes stopped):
#
#  packages  make deb; dpkg -i vgpu on this machine; start vgpu.service and
#            vgpu-front@ci as their installed units say (no systemd in CI:
#            ExecStart and UMask are read from the unit files, --device sim
#            is added); vgpu status and vgpu qemu-args with no flags;
#            then in the TCG test guest: dpkg -i vgpu-guest-dkms vgpu-guest
#            (DKMS builds vgpu.ko for the guest kernel) and the CUDA program
#            of deploy/test/cuda-program.sh with no LD_LIBRARY_PATH, served by
#            the installed service through vgpu-front@ci;
#  libvirt   deploy/test/libvirt.sh (a libvirt domain with the vGPU).
#
# Usage: deploy/test/run.sh [packages] [libvirt]   (default: both)
# Logs: build/deploy-test/.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
logs=$root/build/deploy-test
work=$(mktemp -d /tmp/vgpu-deploy-test.XXXXXX)
chmod 755 "$work"
mkdir -p "$logs"
t0=$SECONDS
say() { echo "== deploy: [$((SECONDS - t0))s] $*"; }
die() { echo "deploy: FAILED: $*" >&2; exit 1; }
steps=("$@")
((${#steps[@]})) || steps=(packages libvirt)

[[ $(id -u) == 0 ]] || die "needs root (dpkg -i, /run/vgpu, libvirt)"
for need in bin/vgpu guest-lib/build/libcuda.so.1; do
	[[ -e $need ]] || die "$need is missing: run make first"
done

pids=()
installed=
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	if [[ -n $installed ]]; then
		dpkg -P vgpu >"$logs/purge.log" 2>&1 || echo "deploy: dpkg -P vgpu failed (see $logs/purge.log)" >&2
		rm -rf /run/vgpu
	fi
	rm -rf "$work"
}
trap cleanup EXIT

# unit_value UNIT KEY: a unit file's KEY= value (the last one).
unit_value() { sed -n "s/^$2=//p" "$1" | tail -1; }

# start_unit UNIT INSTANCE EXTRA...: run the unit's ExecStart under its UMask
# in the background (%i -> INSTANCE, $OPTIONS -> nothing), as systemd would.
start_unit() {
	local unit=$1 inst=$2 log=$3
	shift 3
	local exec umask
	exec=$(unit_value "$unit" ExecStart)
	umask=$(unit_value "$unit" UMask)
	exec=${exec//%i/$inst}
	exec=${exec//\$OPTIONS/}
	[[ -n $exec ]] || die "$unit has no ExecStart"
	say "starting $(basename "$unit") as its unit says: umask ${umask:-0022}; $exec $*"
	# shellcheck disable=SC2086 # ExecStart is split into words as systemd does
	(umask "${umask:-0022}" && exec $exec "$@") >"$log" 2>&1 &
	pids+=($!)
}

wait_socket() {
	local i
	for i in $(seq 300); do
		[[ -S $1 ]] && return 0
		sleep 0.1
	done
	die "no socket $1 after 30 s"
}

test_packages() {
	say "make deb"
	deploy/build-deb.sh "$work/deb" 2>&1 | tail -3
	cp "$work/deb/build.log" "$logs/deb-build.log"
	say "dpkg -i vgpu (host)"
	if dpkg -s vgpu >/dev/null 2>&1; then die "vgpu is already installed here: the test would replace it (dpkg -P vgpu first)"; fi
	installed=1
	dpkg -i "$work"/deb/vgpu_*.deb >"$logs/dpkg-host.log" 2>&1 || { cat "$logs/dpkg-host.log"; die "dpkg -i vgpu"; }
	local u=/lib/systemd/system
	for f in /usr/bin/vgpu /etc/vgpu/vgpu.conf $u/vgpu.service $u/vgpu-front@.service /usr/lib/tmpfiles.d/vgpu.conf; do
		[[ -e $f ]] || die "the vgpu package did not install $f"
	done
	systemd-analyze verify $u/vgpu.service $u/vgpu-front@.service 2>&1 | tee "$logs/systemd-verify.log"
	# Only complaints about our units count (a container's systemd may grumble about others).
	! grep -iE "vgpu" "$logs/systemd-verify.log" | grep -qiE "error|fail|unknown|invalid|not" ||
		die "systemd-analyze verify found problems in the units (see $logs/systemd-verify.log)"
	[[ -d /run/vgpu && -d /run/vgpu/vm ]] || die "postinst did not create /run/vgpu (tmpfiles.d/vgpu.conf)"
	stat -c '%n %A %U:%G' /run/vgpu /run/vgpu/vm

	start_unit $u/vgpu.service "" "$logs/vgpu.service.log" --device sim
	wait_socket /run/vgpu/status.sock
	wait_socket /run/vgpu/vhost-user.sock
	start_unit $u/vgpu-front@.service ci "$logs/vgpu-front@ci.log"
	wait_socket /run/vgpu/vm/ci.sock
	stat -c '%n %A %U:%G' /run/vgpu/status.sock /run/vgpu/vm/ci.sock
	[[ $(stat -c %G:%a /run/vgpu/vm/ci.sock) == kvm:770 ]] || die "the front's socket is not group kvm, mode 0770"

	say "vgpu status (no flags)"
	vgpu status >"$logs/status.txt"
	sed -n 1,8p "$logs/status.txt"
	grep -q "SIMULATED" "$logs/status.txt" || die "vgpu status did not reach the service"
	say "vgpu qemu-args (no flags) and --vm ci"
	vgpu qemu-args --mem 1G | tee "$logs/qemu-args.txt"
	grep -q "path=/run/vgpu/vhost-user.sock" "$logs/qemu-args.txt" || die "vgpu qemu-args does not default to the service's socket"
	vgpu qemu-args --mem 1G --vm ci | grep -q "path=/run/vgpu/vm/ci.sock" || die "vgpu qemu-args --vm ci"

	say "building the CUDA program and the test guest"
	deploy/test/cuda-program.sh "$work/prog"
	vgpu vm image >"$logs/image.txt" 2>&1 || { cat "$logs/image.txt"; die "vgpu vm image"; }
	mkdir -p "$work/guestdebs"
	cp "$work"/deb/vgpu-guest_*.deb "$work"/deb/vgpu-guest-dkms_*.deb "$work/guestdebs/"
	say "guest: dpkg -i the guest packages, DKMS, the CUDA program on sim through vgpu-front@ci (TCG, about 2 minutes)"
	local rc=0
	vgpu vm run --vgpu /run/vgpu/vm/ci.sock --mem 2G --cpus 2 --timeout 15m --timings \
		--share "$work/guestdebs" --share "$work/prog" -- \
		"$root/deploy/test/guest-install.sh" "$work/guestdebs" "$work/prog" 2>&1 |
		grep --line-buffered -v '^!!' | tee "$logs/guest-install.log" | grep --line-buffered -E "^GUEST-INSTALL|passed|FAIL|error|vgpu vm run" || true
	rc=${PIPESTATUS[0]}
	((rc == 0)) || { tail -40 "$logs/guest-install.log"; die "the guest install test exited $rc (log: $logs/guest-install.log)"; }
	grep -q "loaded, launched" "$logs/guest-install.log" || die "the CUDA program did not report success"
	vgpu status --json >"$logs/status-after.json"
	grep -q '"ci"' "$logs/status-after.json" || die "vgpu status does not list the front of VM ci"
	say "packages: passed"
}

for s in "${steps[@]}"; do
	case $s in
	packages) test_packages ;;
	libvirt) deploy/test/libvirt.sh "$work" ;;
	*) die "unknown step $s (packages, libvirt)" ;;
	esac
done
say "all passed"
