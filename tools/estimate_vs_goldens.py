#!/usr/bin/env python3
"""The wafer estimate, kernel by kernel, against the simulated times the goldens hold.

Every golden under tests/cli/golden that ran a wafer scenario (`tessera run ...` with a kernel table)
holds each kernel's simulated time. This runs `tessera validate -v` with the same arguments (compile
and estimate only, no simulation: seconds for all of them) and compares its predictions with those
simulated times, next to the predictions the golden recorded. Use it before and after a change to
mapper/wafer/estimate.cpp (which does not change the simulation, so the goldens' simulated column
stays the truth) -- then regenerate the goldens (TESSERA_UPDATE_GOLDEN=1 ctest).

  python3 tools/estimate_vs_goldens.py [--build build/release] [--list N]

Prints the kernel count, MAPE and kernels beyond 10% and 5% for the goldens' predictions ("old")
and this build's ("new"), the goldens whose figures moved, and the N worst kernels of this build.
"""
import argparse
import glob
import json
import os
import re
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROW = re.compile(r'^(\S.{28,29})\s+([\d.]+) us\s+([\d.]+) us\s+([+-][\d.]+)%')
PRED = re.compile(r'^kernel \d+ .*: predicted ([\d.]+) us', re.M)


def one(tessera, f):
    lines = open(f).read().splitlines()
    if not lines or not lines[0].startswith('$ tessera run') or not any('weights ready' in l for l in lines):
        return None
    args = shlex.split(lines[0][2:].replace('<SRC>', ROOT))[2:]
    if '--out' in args:
        i = args.index('--out')
        del args[i:i + 2]
    sim = []
    for l in lines:
        if l.startswith('kernel ') or l.startswith('total'):
            continue
        m = ROW.match(l)
        if m:
            sim.append((float(m.group(2)), float(m.group(3))))
    if not sim:
        return None
    env = dict(os.environ, TESSERA_HOME=ROOT)
    r = subprocess.run([tessera, 'validate'] + args + ['-v'], cwd=ROOT, capture_output=True, text=True, env=env)
    new = [float(x) for x in PRED.findall(r.stdout + r.stderr)]
    if len(new) != len(sim):
        return (os.path.basename(f), None)
    return (os.path.basename(f), [(old, n, s) for (old, s), n in zip(sim, new)])


def stats(ks, i):
    e = [abs(k[i] - k[2]) / k[2] * 100 for k in ks if k[2] > 0]
    return len(e), sum(e) / max(1, len(e)), sum(x > 10 for x in e), sum(x > 5 for x in e)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default=os.path.join(ROOT, 'build', 'release'))
    ap.add_argument('--list', type=int, default=15)
    ap.add_argument('--json', default='', help='write per golden [old, new, simulated] us per kernel here')
    a = ap.parse_args()
    tessera = os.path.join(a.build, 'tools', 'tessera')
    files = sorted(glob.glob(os.path.join(ROOT, 'tests', 'cli', 'golden', '*.out')))
    with ThreadPoolExecutor(2) as ex:
        res = [r for r in ex.map(lambda f: one(tessera, f), files) if r]
    per, allk = {}, []
    for name, ks in res:
        if ks is None:
            print('kernel counts differ (the golden is stale, or validate failed):', name)
            continue
        per[name] = ks
        allk += [(name, i) + k for i, k in enumerate(ks)]
    flat = [k[2:] for k in allk]
    n, mo, o10, o5 = stats(flat, 0)
    _, mn, n10, n5 = stats(flat, 1)
    print(f'{n} kernels in {len(per)} goldens')
    print(f'  goldens\' predictions: MAPE {mo:.3f}%, beyond 10% {o10}, beyond 5% {o5}')
    print(f'  this build\'s:          MAPE {mn:.3f}%, beyond 10% {n10}, beyond 5% {n5}')
    for name, ks in per.items():
        o, nw = stats(ks, 0), stats(ks, 1)
        if abs(o[1] - nw[1]) > 0.05 or o[2] != nw[2]:
            print(f'  {name:55s} {o[1]:.2f}% ({o[2]} beyond 10%) -> {nw[1]:.2f}% ({nw[2]})')
    worst = sorted(allk, key=lambda k: -abs(k[3] - k[4]) / k[4] if k[4] > 0 else 0)[:a.list]
    if worst:
        print('worst kernels of this build (golden, kernel #, predicted, simulated us, error):')
    for name, i, _, new, sim in worst:
        print(f'  {name:55s} {i:4d} {new:10.3f} {sim:10.3f} {100 * (new - sim) / sim:+.1f}%')
    if a.json:
        json.dump(per, open(a.json, 'w'))


if __name__ == '__main__':
    main()
