#!/usr/bin/env python3
"""The folders' arrows run one way: launcher -> agent -> proto, and
worker -> proto. Every #include "..." in a folder's C, CUDA and header
files must name a header of that folder or of one below it. Prints each
include that points upward (or sideways) and exits 1 if there is any.

Usage: check_layers.py SOURCE_DIR
"""
import os
import re
import sys

# folder -> the folders it may include from (itself first)
ALLOWED = {
    "proto": ["proto"],
    "agent": ["agent", "proto"],
    "worker": ["worker", "proto"],
    "launcher": ["launcher", "agent", "proto"],
}
SUFFIXES = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def headers(root):
    """header base name -> the set of top folders that have it"""
    where = {}
    for top in ALLOWED:
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if f.endswith((".h", ".cuh")):
                    where.setdefault(f, set()).add(top)
    return where


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    where = headers(root)
    bad = []
    n_files = n_includes = 0
    for top, allowed in ALLOWED.items():
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith(SUFFIXES):
                    continue
                n_files += 1
                path = os.path.join(d, f)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for lineno, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        n_includes += 1
                        name = os.path.basename(m.group(1))
                        # a header next to the file is its own folder's
                        if os.path.exists(os.path.join(d, m.group(1))):
                            continue
                        homes = where.get(name)
                        if homes is None:
                            continue  # generated, or a system header in quotes
                        if not homes & set(allowed):
                            rel = os.path.relpath(path, root)
                            bad.append(f"{rel}:{lineno}: {top}/ includes "
                                       f"\"{m.group(1)}\" of "
                                       f"{', '.join(sorted(homes))}/, above it")
    for b in bad:
        print(b)
    print(f"check_layers: {n_includes} includes in {n_files} files, "
          f"{len(bad)} against the layering")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
