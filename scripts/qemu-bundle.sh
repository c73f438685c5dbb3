#!/bin/sh
# qemu-bundle.sh OUTDIR: pack this machine's (Debian 12) qemu-system-x86_64
# with what it needs to run test guests on a machine without QEMU (the GPU
# machine): its shared libraries (all that ldd lists except the C library's
# own: libc, libm, libpthread, libdl, librt, ld-linux), the TCG accelerator
# module, and the firmware a q35 guest booted with -kernel and -nodefaults
# loads (bios-256k.bin, kvmvapic.bin, linuxboot_dma.bin; vhost-user-vsock-pci,
# virtio-9p-pci and pcie-root-port need no option ROM; -nic none avoids the
# NIC ROMs).
#
# Writes OUTDIR/qemu-bundle/ and OUTDIR/qemu-bundle.tar.xz (about 11 MB).
# Layout:
#   qemu-system-x86_64        wrapper: sets LD_LIBRARY_PATH, QEMU_MODULE_DIR, -L
#   bin/qemu-system-x86_64    the real binary
#   lib/*.so*                 shared libraries
#   lib/qemu/accel-tcg-x86_64.so
#   share/qemu/               firmware
#   VERSION                   qemu --version and the Debian package version
# Use: put OUTDIR/qemu-bundle on PATH, or `vgpu vm run --bundle DIR|DIR.tar.xz`.
# Keep OUTDIR out of git: .carry/ (gitignored) is the place to carry it to
# the GPU machine, e.g. scripts/qemu-bundle.sh .carry
set -eu

out=${1:?usage: qemu-bundle.sh OUTDIR}
qemu=${QEMU:-/usr/bin/qemu-system-x86_64}
moddir=${QEMU_MODDIR:-/usr/lib/x86_64-linux-gnu/qemu}
fwdirs=${QEMU_FIRMWARE:-"/usr/share/qemu /usr/share/seabios /usr/lib/ipxe/qemu"}
firmware="bios-256k.bin kvmvapic.bin linuxboot_dma.bin linuxboot.bin"

[ -x "$qemu" ] || { echo "qemu-bundle: no $qemu: apt-get install qemu-system-x86" >&2; exit 1; }
[ -f "$moddir/accel-tcg-x86_64.so" ] || { echo "qemu-bundle: no $moddir/accel-tcg-x86_64.so" >&2; exit 1; }

dir=$out/qemu-bundle
rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/lib/qemu" "$dir/share/qemu"
cp -L "$qemu" "$dir/bin/qemu-system-x86_64"
cp -L "$moddir/accel-tcg-x86_64.so" "$dir/lib/qemu/"

# Shared libraries of the binary and the module, but not glibc's own: the
# target's glibc must be used (it is newer on Ubuntu 24.04).
for f in "$qemu" "$moddir/accel-tcg-x86_64.so"; do
	ldd "$f" | awk '/=> \// { print $3 }'
done | sort -u | while read -r lib; do
	case "$(basename "$lib")" in
	libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*) continue ;;
	esac
	cp -L "$lib" "$dir/lib/"
done

# Firmware: Debian's QEMU searches /usr/share/qemu, then seabios's and
# ipxe's folders; the bundle's -L folder must hold them all.
for f in $firmware; do
	found=
	for d in $fwdirs; do
		if [ -e "$d/$f" ]; then
			cp -L "$d/$f" "$dir/share/qemu/"
			found=1
			break
		fi
	done
	[ -n "$found" ] || { echo "qemu-bundle: no firmware $f in $fwdirs: apt-get install seabios qemu-system-data" >&2; exit 1; }
done

cat >"$dir/qemu-system-x86_64" <<'WRAP'
#!/bin/sh
# Runs the bundled QEMU with its own libraries, module and firmware.
here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export QEMU_MODULE_DIR="$here/lib/qemu"
exec "$here/bin/qemu-system-x86_64" -L "$here/share/qemu" "$@"
WRAP
chmod +x "$dir/qemu-system-x86_64"

{
	"$qemu" --version | head -1
	dpkg-query -W -f='${Package} ${Version}\n' qemu-system-x86 2>/dev/null || true
} >"$dir/VERSION"

# Check the bundle runs on its own libraries.
"$dir/qemu-system-x86_64" --version >/dev/null
LD_LIBRARY_PATH="$dir/lib" QEMU_MODULE_DIR="$dir/lib/qemu" \
	timeout 30 "$dir/bin/qemu-system-x86_64" -L "$dir/share/qemu" -accel tcg -machine q35 -nodefaults -display none -nic none -S \
	-qmp stdio >"$out/qemu-bundle.check.log" 2>&1 <<'QMP' || {
{"execute": "qmp_capabilities"}
{"execute": "quit"}
QMP
	echo "qemu-bundle: the bundled QEMU does not start:" >&2
	cat "$out/qemu-bundle.check.log" >&2
	exit 1
}
rm -f "$out/qemu-bundle.check.log"

tar -C "$out" -cJf "$out/qemu-bundle.tar.xz" qemu-bundle
echo "qemu-bundle: $out/qemu-bundle.tar.xz ($(du -h "$out/qemu-bundle.tar.xz" | cut -f1)), $(ls "$dir/lib" | wc -l) libraries; $(cat "$dir/VERSION" | head -1)"
