"""Interleaved wall-clock timing of commands, for gpu-guard's benchmark scripts.

Each round runs every variant once, in turn, so drift on a shared machine
hits all variants alike; medians are reported. Timing wraps fork+exec+wait
of the command as a whole (posix_spawn from Python), so it includes process
start-up, which is what a container start pays.
"""
import os
import statistics
import subprocess
import sys
import time


def run_once(argv, stdin=None, cwd=None, env=None):
    t0 = time.perf_counter_ns()
    p = subprocess.run(argv, input=stdin, cwd=cwd, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t1 = time.perf_counter_ns()
    if p.returncode != 0:
        sys.exit(f"benchmark command failed ({p.returncode}): {argv}\n{p.stderr.decode(errors='replace')}")
    return (t1 - t0) / 1e6


def interleave(variants, rounds, warmup=3, between=None):
    """variants: {name: dict(argv=..., stdin=..., cwd=..., env=...)} -> {name: [ms]}"""
    for _ in range(warmup):
        for v in variants.values():
            run_once(**v)
            if between:
                between()
    out = {k: [] for k in variants}
    for _ in range(rounds):
        for k, v in variants.items():
            out[k].append(run_once(**v))
            if between:
                between()
    return out


def median(xs):
    return statistics.median(xs)


def peak_rss_kib(argv, stdin=None, runs=10):
    """Peak RSS (KiB) over several runs, from GNU time's %M."""
    peak = 0
    for _ in range(runs):
        p = subprocess.run(["/usr/bin/time", "-f", "%M"] + argv, input=stdin,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        last = p.stderr.decode().strip().splitlines()[-1]
        peak = max(peak, int(last))
    return peak
