#!/usr/bin/env python3
"""The folders' arrows run one way. At the top: launcher -> agent -> proto,
and worker -> proto. Inside them, each folder is a product or a library,
and its files may include headers of the folders listed for it below (its
own first), never of a folder above it or beside it: no product of the
launcher includes another (only cli/, the ddprun command that hands over to
them, uses them all), and what several share sits below them.

Every #include "..." in a folder's C, CUDA and header files must name a
header of an allowed folder. Prints each include that does not and exits 1
if there is any. A folder not listed takes the rule of the nearest listed
folder above it (worker/train/gpu is worker/train's).

Usage: check_layers.py SOURCE_DIR
"""
import os
import re
import sys

PROTO = ["proto", "proto/os", "proto/log", "proto/plan"]
# folder -> the folders whose headers its files may include (itself first)
ALLOWED = {
    "proto": ["proto", "proto/os"],
    "proto/os": ["proto/os", "proto"],
    "proto/log": ["proto/log", "proto/os", "proto"],
    "proto/plan": ["proto/plan", "proto"],
    "agent": ["agent"] + PROTO,
    "worker/comm": ["worker/comm"] + PROTO,
    "worker/nn": ["worker/nn"] + PROTO,
    "worker/reducer": ["worker/reducer", "worker/comm", "worker/nn"] + PROTO,
    "worker/ckpt": ["worker/ckpt"] + PROTO,
    "worker/train": ["worker/train", "worker/train/gpu", "worker/reducer",
                     "worker/ckpt", "worker/comm", "worker/nn"] + PROTO,
    "launcher": ["launcher"] + PROTO,
    "launcher/server": ["launcher/server", "launcher"] + PROTO,
    "launcher/diagnose/read": ["launcher/diagnose/read",
                               "launcher/diagnose"] + PROTO,
    "launcher/diagnose/analysis": ["launcher/diagnose/analysis",
                                   "launcher/diagnose"] + PROTO,
    "launcher/diagnose": ["launcher/diagnose", "launcher/diagnose/read",
                          "launcher/diagnose/analysis", "launcher"] + PROTO,
    "launcher/status": ["launcher/status", "launcher", "agent"] + PROTO,
    "launcher/plan": ["launcher/plan", "launcher"] + PROTO,
    "launcher/cli": ["launcher/cli", "launcher/server", "launcher/diagnose",
                     "launcher/status", "launcher/plan", "launcher",
                     "agent"] + PROTO,
}
TOPS = ["proto", "agent", "worker", "launcher"]
SUFFIXES = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def rule_of(rel_dir):
    """The listed folder whose rule applies to rel_dir, or None."""
    d = rel_dir
    while d and d not in ALLOWED:
        d = os.path.dirname(d)
    return d or None


def sources(root):
    for top in TOPS:
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if f.endswith(SUFFIXES):
                    yield os.path.relpath(d, root), f


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    where = {}  # header base name -> the folders that have it
    for d, f in sources(root):
        if f.endswith((".h", ".cuh")):
            where.setdefault(f, set()).add(d)
    bad = []
    n_files = n_includes = 0
    for d, f in sources(root):
        n_files += 1
        rule = rule_of(d)
        path = os.path.join(root, d, f)
        if rule is None:
            bad.append(f"{d}/{f}: in a folder no rule covers; add it to "
                       f"ALLOWED in {os.path.relpath(__file__, root)}")
            continue
        allowed = set(ALLOWED[rule])
        if rule == "worker/train":  # its GPU module is part of it
            allowed.add("worker/train/gpu")
        with open(path, encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                n_includes += 1
                name = os.path.basename(m.group(1))
                # a header next to the file is its own folder's
                if os.path.exists(os.path.join(root, d, m.group(1))):
                    continue
                homes = where.get(name)
                if homes is None:
                    continue  # generated, or a system header in quotes
                if not homes & allowed:
                    bad.append(f"{d}/{f}:{lineno}: {rule}/ includes "
                               f"\"{m.group(1)}\" of "
                               f"{', '.join(sorted(homes))}/, which it may "
                               f"not (above it or beside it)")
    for b in bad:
        print(b)
    print(f"check_layers: {n_includes} includes in {n_files} files, "
          f"{len(bad)} against the layering")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
