"""Writes a gzip'd newc cpio initramfs holding one file, /init (the kernel runs it as PID 1): mkinitrd.py BINARY OUT."""
import gzip
import sys


def entry(name, mode, data, ino):
    # newc header: magic + 13 hex fields (ino, mode, uid, gid, nlink, mtime, size, devs, namesize, check)
    nb = name.encode() + b"\0"
    hdr = b"070701" + b"".join(b"%08X" % v for v in (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(nb), 0))
    out = hdr + nb
    out += b"\0" * (-len(out) % 4)
    return out + data + b"\0" * (-len(data) % 4)


src, dst = sys.argv[1], sys.argv[2]
with open(src, "rb") as f:
    body = entry("init", 0o100755, f.read(), 1) + entry("TRAILER!!!", 0, b"", 0)
with gzip.open(dst, "wb") as f:
    f.write(body)
