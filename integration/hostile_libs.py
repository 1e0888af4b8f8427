"""Hostile root filesystems for the libraries scan's budgets
(integration/bench-libraries-hostile.sh).

- `chain ROOT N [--descending]`: N GPU libraries `libcuNNNNN.so` in
  /usr/local/lib (listed in /etc/ld.so.conf), each an ELF shared object whose
  one DT_NEEDED entry is the next; the last needs nothing. Each is a GPU
  library, so each is a candidate root of the scan. `--descending`: the chain
  runs from the highest number down (path order is then the chain reversed).
- `selfinclude ROOT N`: /etc/ld.so.conf is N lines `include ld.so.conf` (cut
  at 64 KiB, as the scan reads it) and one GPU library needing libc.
- `globlinks ROOT K`: K symlinks to `/` at the root and an /etc/ld.so.conf of
  `include /*/*/*/*/*/*/*/*`, which matches the file itself through them.
- `globwide ROOT K`: K symlinks to `/`, a directory of 20,000 files, and an
  /etc/ld.so.conf of 100 lines `include /*/*`: each matches the file itself
  and the 20,000 others.
"""
import os
import struct
import sys


def elf_needing(names):
    """A minimal x86-64 ELF shared object with DT_NEEDED `names`."""
    strtab = b"\0"
    offs = []
    for n in names:
        offs.append(len(strtab))
        strtab += n.encode() + b"\0"
    str_off = 64 + 2 * 56
    dyn_off = (str_off + len(strtab) + 7) // 8 * 8
    dyns = [(1, o) for o in offs] + [(5, str_off), (10, len(strtab)), (0, 0)]
    total = dyn_off + len(dyns) * 16
    out = bytearray(total)
    out[0:4] = b"\x7fELF"
    out[4], out[5], out[6] = 2, 1, 1
    out[16] = 3  # ET_DYN
    out[18] = 62  # EM_X86_64
    out[20] = 1
    out[0x20:0x28] = struct.pack("<Q", 64)
    out[0x36] = 56
    out[0x38] = 2

    def ph(kind, off, size):
        return struct.pack("<IIQQQQQQ", kind, 0, off, off, 0, size, size, 0)

    out[64:120] = ph(1, 0, total)
    out[120:176] = ph(2, dyn_off, len(dyns) * 16)
    out[str_off:str_off + len(strtab)] = strtab
    for k, (t, v) in enumerate(dyns):
        out[dyn_off + k * 16:dyn_off + k * 16 + 16] = struct.pack("<QQ", t, v)
    return bytes(out)


def base(root):
    os.makedirs(f"{root}/etc", exist_ok=True)
    os.makedirs(f"{root}/usr/local/lib", exist_ok=True)
    with open(f"{root}/etc/debian_version", "w") as f:
        f.write("12.0\n")


def chain(root, n, descending):
    base(root)
    with open(f"{root}/etc/ld.so.conf", "w") as f:
        f.write("/usr/local/lib\n")
    order = list(range(n))
    if descending:
        order.reverse()
    for k, i in enumerate(order):
        needs = [f"libcu{order[k + 1]:05d}.so"] if k + 1 < n else []
        with open(f"{root}/usr/local/lib/libcu{i:05d}.so", "wb") as f:
            f.write(elf_needing(needs))


def selfinclude(root, n):
    base(root)
    text = "include ld.so.conf\n" * n
    with open(f"{root}/etc/ld.so.conf", "w") as f:
        f.write(text[: 64 << 10])
    with open(f"{root}/usr/local/lib/libcuself.so", "wb") as f:
        f.write(elf_needing([]))


def globlinks(root, k):
    base(root)
    with open(f"{root}/etc/ld.so.conf", "w") as f:
        f.write("include /*/*/*/*/*/*/*/*\n")
    for i in range(k):
        os.symlink("/", f"{root}/l{i}")
    with open(f"{root}/usr/local/lib/libcuglob.so", "wb") as f:
        f.write(elf_needing([]))


def globwide(root, k):
    base(root)
    with open(f"{root}/etc/ld.so.conf", "w") as f:
        f.write("include /*/*\n" * 100)
    for i in range(k):
        os.symlink("/", f"{root}/l{i}")
    os.makedirs(f"{root}/w", exist_ok=True)
    for i in range(20000):
        open(f"{root}/w/{i}", "w").close()
    with open(f"{root}/usr/local/lib/libcuglob.so", "wb") as f:
        f.write(elf_needing([]))


def main(argv):
    kind, root, n = argv[1], argv[2], int(argv[3])
    if kind == "chain":
        chain(root, n, "--descending" in argv)
    elif kind == "selfinclude":
        selfinclude(root, n)
    elif kind == "globlinks":
        globlinks(root, n)
    elif kind == "globwide":
        globwide(root, n)
    else:
        sys.exit(f"unknown layout {kind}")


if __name__ == "__main__":
    main(sys.argv)
