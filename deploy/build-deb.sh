#!/bin/sh
# build-deb.sh OUTDIR: build vgpu's Debian packages (vgpu, vgpu-guest,
# vgpu-guest-dkms) with dpkg-buildpackage into OUTDIR, from this repository
# after `make` (make deb runs it). The packaging is deploy/debian; it is
# copied to OUTDIR/vgpu-VERSION/debian with a generated changelog, so that
# dpkg-buildpackage writes nothing into the repository.
#
# The version is the module's (guest-driver/dkms.conf) plus the commit:
# 0.1.0+git20261125.53a5797 (".dirty" when the tree has changes).
set -eu
out=${1:?usage: build-deb.sh OUTDIR}
repo=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
say() { echo "deb: $*" >&2; }

for need in dpkg-buildpackage dh dh_dkms; do
	command -v "$need" >/dev/null || { say "no $need: run scripts/setup.sh (debhelper, dh-dkms, dpkg-dev)"; exit 1; }
done
for f in bin/vgpu guest-lib/build/libcuda.so.1 guest-lib/build/libnvidia-ml.so.1; do
	[ -e "$repo/$f" ] || { say "$f is missing: run make first"; exit 1; }
done

base=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$repo/guest-driver/dkms.conf")
[ -n "$base" ] || { say "no PACKAGE_VERSION in guest-driver/dkms.conf"; exit 1; }
if commit=$(git -C "$repo" log -1 --format='%ct %h' 2>/dev/null) && [ -n "$commit" ]; then
	when=${commit% *}
	version="$base+git$(date -u -d "@$when" +%Y%m%d).${commit#* }"
	[ -z "$(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null)" ] || version="$version.dirty"
else
	when=$(date +%s)
	version="$base"
fi

mkdir -p "$out"
out=$(CDPATH= cd -- "$out" && pwd)
src=$out/vgpu-$base
rm -rf "$src" "$out"/*.deb "$out"/*.buildinfo "$out"/*.changes
mkdir -p "$src"
cp -R "$repo/deploy/debian" "$src/debian"
cat >"$src/debian/changelog" <<CHANGELOG
vgpu ($version) unstable; urgency=medium

  * Built from the vgpu repository at $(git -C "$repo" describe --always --dirty 2>/dev/null || echo "an unknown commit").

 -- vgpu developers <vgpu-project@users.noreply.github.com>  $(date -u -R -d "@$when")
CHANGELOG

say "building $version with dpkg-buildpackage (log: $out/build.log)"
if ! (cd "$src" && VGPU_ROOT=$repo dpkg-buildpackage -b -uc -us) >"$out/build.log" 2>&1; then
	tail -30 "$out/build.log" >&2
	say "dpkg-buildpackage failed; see $out/build.log"
	exit 1
fi
rm -rf "$src"
for d in "$out"/*.deb; do say "$(basename "$d")"; done
