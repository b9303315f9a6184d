#!/usr/bin/env bash
# Boots the static harness as /init of a Linux guest under bochs 3.0 and saves what it prints on the serial console.
#   emu.sh MODEL TAG OUTDIR [HARNESS ARGS...]     e.g. emu.sh corei7_skylake_x a512 /tmp/r avx2 avx512
# env: EMBER_ISA_EMU_CACHE (see setup.sh), HARNESS (default $CACHE/build/harness), MAX_S (default 1500)
# Writes OUTDIR/emu_TAG.txt (the harness output) and OUTDIR/emu_TAG.serial (the whole console); exits 0 only
# if the harness finished ("EMU DONE"), whatever it found (run.sh judges the SUMMARY line).
set -euo pipefail

MODEL=$1 TAG=$2 OUT=$3
shift 3
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${EMBER_ISA_EMU_CACHE:-$HOME/.cache/ember-isa-emu}
HARNESS=${HARNESS:-$CACHE/build/harness}
MAX_S=${MAX_S:-1500}
W=$CACHE/emu/$TAG
for f in "$CACHE/bochs/bin/bochs" "$CACHE/kernel/vmlinuz" "$CACHE/isolinux/isolinux.bin" "$HARNESS"; do
  [ -f "$f" ] || { echo "emu.sh: missing $f (run setup.sh / run.sh)" >&2; exit 1; }
done
rm -rf "$W" && mkdir -p "$W/iso/boot/isolinux" "$OUT"

# ISO: isolinux -> the Debian cloud kernel + a one-file initramfs whose /init is the harness.
# The harness arguments follow "--" on the kernel command line, which the kernel hands to /init.
cp "$CACHE/kernel/vmlinuz" "$W/iso/boot/vmlinuz"
cp "$CACHE"/isolinux/{isolinux.bin,ldlinux.c32} "$W/iso/boot/isolinux/"
python3 "$HERE/mkinitrd.py" "$HARNESS" "$W/iso/boot/initrd.gz"
# mitigations=off shortens the emulated boot; clearcpuid=pku and the rest are the configuration this
# tool was validated with (XCR0 = 0xe7 in the guest: x87, SSE, AVX and the three AVX-512 components)
cat > "$W/iso/boot/isolinux/isolinux.cfg" <<CFG
DEFAULT emu
PROMPT 0
TIMEOUT 0
LABEL emu
  KERNEL /boot/vmlinuz
  APPEND initrd=/boot/initrd.gz console=ttyS0,115200 loglevel=6 rdinit=/init panic=-1 mitigations=off clearcpuid=pku -- $*
CFG
xorriso -as mkisofs -quiet -o "$W/emu.iso" -b boot/isolinux/isolinux.bin -c boot/isolinux/boot.cat \
  -no-emul-boot -boot-load-size 4 -boot-info-table "$W/iso" > "$W/xorriso.log" 2>&1 \
  || { cat "$W/xorriso.log" >&2; echo "emu.sh: xorriso failed" >&2; exit 1; }

# clock sync=none: the guest's time runs with emulated instructions (deterministic, no timer storms
# when the host is slow); ips only sets the emulated clock rate
cat > "$W/bochsrc" <<RC
megs: 1024
romimage: file=/usr/share/bochs/BIOS-bochs-latest
vgaromimage: file=/usr/share/vgabios/vgabios.bin
cpu: model=$MODEL, count=1, ips=200000000
ata0-master: type=cdrom, path=$W/emu.iso, status=inserted
boot: cdrom
com1: enabled=1, mode=file, dev=$W/serial.out
display_library: nogui
log: $W/bochs.log
panic: action=fatal
error: action=report
info: action=ignore
clock: sync=none
RC

start=$(date +%s)
timeout "$MAX_S" "$CACHE/bochs/bin/bochs" -q -f "$W/bochsrc" > "$W/bochs.stdout" 2>&1 &
pid=$!
# bochs keeps running after the guest powers off or panics (panic=-1 reboots): stop it on those lines
while kill -0 "$pid" 2>/dev/null; do
  sleep 5
  if grep -aq "EMU DONE\|Kernel panic\|reboot: Power down" "$W/serial.out" 2>/dev/null; then sleep 3; break; fi
done
kill "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
tr -d '\r' < "$W/serial.out" > "$OUT/emu_$TAG.serial" 2>/dev/null || true
sed -n '/^harness:/,$p' "$OUT/emu_$TAG.serial" > "$OUT/emu_$TAG.txt"
echo "emu.sh [$TAG] $MODEL: $(( $(date +%s) - start )) s"
if ! grep -q "^EMU DONE" "$OUT/emu_$TAG.txt"; then
  echo "emu.sh [$TAG]: the harness did not finish (see $OUT/emu_$TAG.serial, $W/bochs.log)" >&2
  exit 1
fi
