#!/usr/bin/env python3
"""Recompiles the CUDA-side translation units of a configured x86-64 CUDA build for an aarch64
host (tools/cross_aarch64_cuda.sh): every .cu file and every C++ file with CUDA-only sections.

Usage: cross_compile_commands.py COMPILE_COMMANDS_JSON OUT_DIR [CROSS_CXX]

nvcc keeps its device compilation and gets the cross compiler as host compiler (-ccbin); C++
files (host-only .cu files included) are compiled by the cross compiler directly. Header-only
dependencies installed for the host (GoogleTest, nlohmann-json, CLI11 in /usr/include) are
searched after the cross compiler's own system headers. Objects go to OUT_DIR (one per unit);
nothing links. Prints a line per unit, with the compiler's first lines where it failed or
warned; exits 1 if any unit failed.
"""
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys


def wanted(entry):
    path = entry["file"]
    if "/googletest/" in path or "/nanobind/" in path or "/_deps/" in path:
        return False
    if path.endswith(".cu"):
        return True
    if not path.endswith(".cpp"):
        return False
    with open(path, encoding="utf-8", errors="replace") as f:
        return "H3RT_HAVE_CUDA" in f.read()


def cross_command(entry, obj, cross):
    argv = shlex.split(entry["command"])
    out = []
    skip = 0
    for i, a in enumerate(argv):
        if skip:
            skip -= 1
            continue
        if a == "-o":
            out += ["-o", obj]
            skip = 1
        elif a == "-include" and i + 1 < len(argv) and argv[i + 1].endswith("cmake_pch.hxx"):
            skip = 1  # the precompiled header was made for the host compiler
        elif a == "-Winvalid-pch":
            continue
        else:
            out.append(a)
    if os.path.basename(out[0]) == "nvcc":
        # With a cross host compiler nvcc looks for the aarch64 toolkit's headers (targets/
        # sbsa-linux); the x86-64 toolkit's stand in for them.
        return [out[0], "-ccbin", cross, "--target-directory", "x86_64-linux",
                "-Xcompiler=-idirafter,/usr/include"] + out[1:]
    return [cross, "-idirafter", "/usr/include"] + out[1:]


def compile_one(job):
    entry, obj, cross = job
    cmd = cross_command(entry, obj, cross)
    r = subprocess.run(cmd, cwd=entry["directory"], capture_output=True, text=True)
    return entry["file"], r.returncode, r.stderr


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    commands, out_dir = sys.argv[1], sys.argv[2]
    cross = sys.argv[3] if len(sys.argv) > 3 else "aarch64-linux-gnu-g++"
    os.makedirs(out_dir, exist_ok=True)
    with open(commands, encoding="utf-8") as f:
        entries = [e for e in json.load(f) if wanted(e)]
    jobs = [(e, os.path.join(out_dir, f"{i:03d}.o"), cross) for i, e in enumerate(entries)]
    failed = warned = 0
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        for n, (path, rc, err) in enumerate(pool.map(compile_one, jobs), 1):
            warnings = err.count("warning:")
            status = "FAILED" if rc else f"ok, {warnings} warnings" if warnings else "ok"
            print(f"[{n}/{len(jobs)}] {status} {path}", flush=True)
            failed += rc != 0
            warned += rc == 0 and warnings > 0
            if rc or warnings:
                print("\n".join(err.splitlines()[:20]), flush=True)
    print(f"{len(jobs) - failed} of {len(jobs)} units compiled for aarch64 ({warned} with warnings)",
          flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
