#!/usr/bin/env python3
"""The CPU backend's object files built for different instruction sets
(*_avx2.cpp, *_avx512bw.cpp, *_avx512.cpp and the rest) must not share an
out-of-line definition: a weak symbol (an inline function or template not
inlined everywhere) defined in two of them is kept once by the linker, which
may then hand AVX-512 code to the AVX2 or portable path (an illegal
instruction on a CPU without AVX-512). Reads `nm` of the objects given
(an argument may hold several, separated by ';', as CMake's
$<TARGET_OBJECTS:...> passes them).

  check_isa_symbols.py OBJECT...
"""
import os
import re
import subprocess
import sys


def isa_of(path):
    m = re.search(r"_(avx2|avx512bw|avx512)\.cpp\.o(bj)?$", os.path.basename(path))
    return m.group(1) if m else "base"


def main(objects):
    if not objects:
        sys.exit("no object files given")
    owners = {}  # symbol -> {isa: object}
    for obj in objects:
        out = subprocess.run(["nm", "--defined-only", obj], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"nm failed on {obj}: {out.stderr.strip()}")
        for line in out.stdout.splitlines():
            parts = line.split()
            if len(parts) != 3 or parts[1] not in ("W", "V", "u"):
                continue
            # loom's own code (the standard library's inline functions, left
            # out of line in a debug build, are beyond its reach).
            if not re.match(r"_Z[ZNK]*4loom", parts[2]):
                continue
            owners.setdefault(parts[2], {})[isa_of(obj)] = obj
    shared = {s: o for s, o in owners.items() if len(o) > 1}
    if shared:
        for s, o in sorted(shared.items()):
            demangled = subprocess.run(["c++filt", s], capture_output=True, text=True).stdout.strip()
            print(f"{demangled}: defined in {', '.join(sorted(os.path.basename(p) for p in o.values()))}")
        sys.exit(f"{len(shared)} weak symbol(s) shared by files built for different instruction sets")
    print(f"ok: {len(objects)} objects, no weak symbol shared across instruction sets")


if __name__ == "__main__":
    main([p for arg in sys.argv[1:] for p in arg.split(";") if p])
