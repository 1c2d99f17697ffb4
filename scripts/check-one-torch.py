#!/usr/bin/env python3
"""One torch per binary: every binary and shared library mutwo builds loads
libtorch's libraries from the torch it was configured with, and no other.

  scripts/check-one-torch.py --torch-lib DIR [--quiet] PATH...

DIR is the configured torch's lib folder (CMakeLists.txt's MUTWO_TORCH_LIB,
the wheel's torch/lib). Each PATH is a file, or a folder searched for ELF
executables and shared libraries (CMake's own CMakeFiles/ left out). For each,
`ldd` lists what the dynamic linker resolves; a library of torch's
(libc10*, libtorch*, libshm*, libcaffe2*, libkineto*) must resolve to a file
in DIR, and each such library must be loaded under one name only (not
libc10.so beside libc10.so.1.13). Run after each link of a target that links
libtorch (a failure fails the build) and as CTest `one_torch` over the build
folder. Exits 1 listing every file that mixes, 2 on bad arguments;
--quiet prints nothing when all is well.
"""
import argparse
import os
import re
import subprocess
import sys

TORCH_LIB = re.compile(r"^lib(c10|torch|shm|caffe2|kineto)[A-Za-z0-9_]*\.so")
# Linker lines: "libc10.so => /path/libc10.so (0x...)", "libc10.so.1.13 => not found".
LDD_LINE = re.compile(r"^\s*(\S+)\s+=>\s+(.*?)\s*(\(0x[0-9a-f]+\))?$")


def is_linked_elf(path: str) -> bool:
    """An ELF executable or shared library (e_type 2 or 3), not an object file."""
    try:
        with open(path, "rb") as f:
            head = f.read(18)
    except OSError:
        return False
    return len(head) == 18 and head[:4] == b"\x7fELF" and int.from_bytes(head[16:18], "little") in (2, 3)


def binaries(paths: list[str]) -> list[str]:
    found = []
    for path in paths:
        if os.path.isfile(path):
            found.append(path)
            continue
        for root, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if d != "CMakeFiles"]
            found += [os.path.join(root, f) for f in sorted(files)
                      if not f.endswith((".o", ".a")) and is_linked_elf(os.path.join(root, f))]
    return found


def torch_libraries(binary: str) -> list[tuple[str, str]]:
    """(name, resolved path or 'not found') of each of torch's libraries ldd lists for `binary`."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=False).stdout
    libs = []
    for line in out.splitlines():
        m = LDD_LINE.match(line)
        if m and TORCH_LIB.match(m.group(1)):
            libs.append((m.group(1), m.group(2)))
    return libs


def problems(binary: str, torch_lib: str) -> list[str]:
    found = []
    stems: dict[str, set[str]] = {}
    for name, resolved in torch_libraries(binary):
        stems.setdefault(name.split(".so")[0], set()).add(name)
        if resolved == "not found":
            found.append(f"{name} is not found (a library of another torch, linked by name?)")
        elif os.path.dirname(os.path.realpath(resolved)) != torch_lib:
            found.append(f"{name} resolves to {resolved}, outside {torch_lib}")
    for stem, names in sorted(stems.items()):
        if len(names) > 1:
            found.append(f"{stem} is loaded under {len(names)} names: {', '.join(sorted(names))}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-lib", required=True, help="the configured torch's lib folder")
    parser.add_argument("--quiet", action="store_true", help="print nothing when all is well")
    parser.add_argument("paths", nargs="+", help="binaries, shared libraries, or folders holding them")
    args = parser.parse_args()
    torch_lib = os.path.realpath(args.torch_lib)
    if not os.path.isdir(torch_lib):
        print(f"check-one-torch: {args.torch_lib} is not a folder", file=sys.stderr)
        return 2
    checked = binaries(args.paths)
    if not checked:
        print(f"check-one-torch: no binary or shared library under {' '.join(args.paths)}", file=sys.stderr)
        return 2
    bad = 0
    for binary in checked:
        for p in problems(binary, torch_lib):
            print(f"{binary}: {p}", file=sys.stderr)
            bad += 1
    if bad:
        print(f"check-one-torch: {bad} problems: these binaries mix another libtorch with the one the build was "
              f"configured for ({torch_lib}): a library of another torch (Debian's libtorch-dev in /usr/lib, say) was "
              "linked by name, or pulled in by a library linked from outside the wheel. Link the configured torch's "
              "libraries by their full paths (cmake/one_torch.cmake; docs/testing.md, 'One torch per binary')",
              file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"check-one-torch: {len(checked)} binaries and shared libraries load torch from {torch_lib} only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
