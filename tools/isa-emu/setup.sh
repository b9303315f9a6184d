#!/usr/bin/env bash
# Fetches and builds what run.sh needs outside the repo (bochs 3.0, a Debian cloud kernel, isolinux) into a cache dir.
#   tools/isa-emu/setup.sh        idempotent; EMBER_ISA_EMU_CACHE overrides ~/.cache/ember-isa-emu
#   KERNEL_DEB=/path/linux-image-*-cloud-amd64_*.deb   use that kernel package instead of apt-get download
set -euo pipefail

CACHE=${EMBER_ISA_EMU_CACHE:-$HOME/.cache/ember-isa-emu}
JOBS=${JOBS:-2}
# Debian's bookworm+ source tarball of bochs 3.0 (the first release whose CPUID 0xD.1 EBX lets Linux keep XSAVE/AVX-512)
BOCHS_URL=http://deb.debian.org/debian/pool/main/b/bochs/bochs_3.0%2Bdfsg.orig.tar.xz
BOCHS_SHA256=78f6c73d4a6472d5130a87ab9dc306d02c7c71ed8e25b3a8ef642e2a7acd282b
# x86-64 with AVX/EVEX decoding; term+nogui so no X libraries are needed; cdrom to boot the ISO
BOCHS_FLAGS="--enable-x86-64 --enable-cpu-level=6 --enable-avx --enable-evex --enable-all-optimizations \
--with-nogui --with-term --disable-debugger --enable-cdrom"
# used when apt cannot resolve the current cloud kernel (a version known to boot under bochs 3.0)
KERNEL_FALLBACK=linux-image-6.1.0-57-cloud-amd64
PKGS="build-essential libncurses-dev curl ca-certificates xz-utils python3 xorriso isolinux syslinux-common bochsbios vgabios"

log() { echo "setup: $*"; }
mkdir -p "$CACHE"/{src,kernel,isolinux}

# --- apt packages (installed only if missing) ---------------------------------------------------
missing=()
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
if [ ${#missing[@]} -gt 0 ]; then
  log "installing apt packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# autoconf's config.status writes through /dev/null; some containers have a regular file there
[ -c /dev/null ] || { echo "setup: /dev/null is not a character device (fix: mknod -m 666 /dev/null c 1 3)" >&2; exit 1; }

# --- bochs 3.0 -----------------------------------------------------------------------------------
TARBALL=$CACHE/src/bochs_3.0+dfsg.orig.tar.xz
STAMP=$CACHE/bochs/.built-$(echo "$BOCHS_SHA256 $BOCHS_FLAGS" | sha256sum | cut -c1-16)
if [ ! -f "$STAMP" ]; then
  if [ ! -f "$TARBALL" ] || ! echo "$BOCHS_SHA256  $TARBALL" | sha256sum -c --quiet - 2>/dev/null; then
    log "downloading $BOCHS_URL"
    curl -fsSL -o "$TARBALL.part" "$BOCHS_URL"
    echo "$BOCHS_SHA256  $TARBALL.part" | sha256sum -c --quiet - || { echo "setup: bochs tarball checksum mismatch" >&2; exit 1; }
    mv "$TARBALL.part" "$TARBALL"
  fi
  log "building bochs 3.0 (about 7 min with 2 cores; log in $CACHE/bochs-build.log)"
  rm -rf "$CACHE/bochs-3.0" "$CACHE/bochs"
  tar -C "$CACHE" -xJf "$TARBALL"
  (cd "$CACHE/bochs-3.0" && ./configure --prefix="$CACHE/bochs" $BOCHS_FLAGS && make -j"$JOBS" && make install) \
    > "$CACHE/bochs-build.log" 2>&1 || { tail -20 "$CACHE/bochs-build.log" >&2; echo "setup: bochs build failed" >&2; exit 1; }
  rm -rf "$CACHE/bochs-3.0"
  touch "$STAMP"
fi
log "bochs: $CACHE/bochs/bin/bochs"

# --- kernel: the current Debian cloud kernel (small, boots fast, has the serial console built in) ---
if [ ! -f "$CACHE/kernel/vmlinuz" ]; then
  deb=${KERNEL_DEB:-}
  if [ -z "$deb" ]; then
    # the cloud metapackage names the current ABI's image package
    pkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[^ ]*-cloud-amd64\)$/\1/p' | head -1)
    if [ -z "$pkg" ]; then
      $SUDO apt-get update -qq || true
      pkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[^ ]*-cloud-amd64\)$/\1/p' | head -1)
    fi
    pkg=${pkg:-$KERNEL_FALLBACK}
    log "downloading $pkg"
    rm -f "$CACHE"/kernel/*.deb
    # apt-get download writes to the current dir; as root apt warns that _apt cannot write there (harmless)
    (cd "$CACHE/kernel" && apt-get download -q "$pkg" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
    deb=$(ls "$CACHE"/kernel/linux-image-*.deb 2>/dev/null | head -1)
    [ -n "$deb" ] || { echo "setup: could not download $pkg (set KERNEL_DEB=/path/to/linux-image-*-cloud-amd64.deb)" >&2; exit 1; }
  fi
  rm -rf "$CACHE/kernel/x"
  dpkg-deb -x "$deb" "$CACHE/kernel/x"
  cp "$CACHE"/kernel/x/boot/vmlinuz-* "$CACHE/kernel/vmlinuz"
  basename "$deb" > "$CACHE/kernel/SOURCE"
  rm -rf "$CACHE/kernel/x"
fi
log "kernel: $CACHE/kernel/vmlinuz ($(cat "$CACHE/kernel/SOURCE" 2>/dev/null || echo '?'))"

# --- isolinux (BIOS boot of the ISO) ----------------------------------------------------------------
cp /usr/lib/ISOLINUX/isolinux.bin /usr/lib/syslinux/modules/bios/ldlinux.c32 "$CACHE/isolinux/"
for f in /usr/share/bochs/BIOS-bochs-latest /usr/share/vgabios/vgabios.bin; do
  [ -f "$f" ] || { echo "setup: missing $f (packages bochsbios, vgabios)" >&2; exit 1; }
done
log "ready (cache $CACHE)"
