"""Metadata reads per entry and mount time against volume size (issue 30
points 3 and 4).

One repetition:
- a tree of FILES files (100 directories, more for over 100000 files:
  about 1000 each; 1/3 empty, the rest a few hundred bytes) is put into a new ext4 image with mke2fs -d and its
  directories indexed (e2fsck -fD, as the kernel indexes growing
  directories), so that listings come in hash order and visit the inodes
  out of order;
- nextfs: mount, drop caches, time `find MNT -printf ...` (cold), read the
  daemon's device counters (NX_IOC_GET_OPSTATS "device.read_bytes") and
  its lookups, then time the same find again (warm);
- kernel: the same image on a loop device, mounted read-only without
  journal replay, the same cold and warm finds (root only);
- mount time: a 1 GiB and a 4 TiB sparse image (lazily initialised, as
  mke2fs makes large volumes), each mounted cold (caches dropped) REPS
  times by nextfs and by the kernel; the time from starting the mount
  to the mount point appearing (mounts.Mount.start).

Ratios: bytes read per entry (target <= 1024), cold find nextfs/kernel
time (target <= 1.5), warm/cold nextfs (target < 1), mount time 4 TiB
(target < 0.2 s) and 4 TiB/1 GiB for both.
"""

import os
import shutil
import subprocess
import time

from . import mounts, workloads
from .mounts import BenchError

GIB = 1 << 30
TIB = 1 << 40
FIND_ARGS = ['-printf', '%s %m %U %G %T@ %p\n']

BYTES_PER_ENTRY_MAX = 1024
COLD_VS_KERNEL_MAX = 1.5
MOUNT_4T_MAX = 0.2


def _make_tree(root, files):
    dirs = max(100, files // 1000)      # at most about 1000 per directory
    for d in range(dirs):
        p = os.path.join(root, 'd%03d' % d)
        os.mkdir(p)
        for f in range(files // dirs):
            with open(os.path.join(p, 'file-%06d.txt' % f), 'wb') as fh:
                if f % 3:
                    fh.write(b'x' * ((f * 37) % 900))


def make_find_image(params, workdir, files):
    """An ext4 image holding FILES files in indexed directories."""
    tree = os.path.join(workdir, 'metatree')
    img = os.path.join(workdir, 'meta.img')
    shutil.rmtree(tree, ignore_errors=True)
    os.mkdir(tree)
    _make_tree(tree, files)
    if os.path.exists(img):
        os.unlink(img)
    size = max(GIB, files * 16384)
    with open(img, 'wb') as f:
        f.truncate(size)
    mounts.run(['bash', params['mkimages'], 'ext4', img,
                '%dk' % (size // 1024), '-i', '8192', '-d', tree])
    mounts.run(['e2fsck', '-fyD', img], check=False, timeout=600)
    shutil.rmtree(tree, ignore_errors=True)
    return img


def _timed_find(path):
    t0 = time.perf_counter()
    p = subprocess.run(['find', path] + FIND_ARGS, stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0, p.stdout.count(b'\n')


def _find_nextfs(tracker, img, workdir, fuse_bin):
    out = {}
    mnt = os.path.join(workdir, 'metamnt')
    m = tracker.mount('nextfs', img, mnt, os.path.join(workdir, 'meta.log'),
                      fuse_bin)
    try:
        out['dropped_caches'] = mounts.drop_caches()
        dev0 = workloads.opstats(m.mnt, device=True) or {}
        ops0 = workloads.opstats(m.mnt) or {}
        out['cold_seconds'], entries = _timed_find(m.mnt)
        dev1 = workloads.opstats(m.mnt, device=True) or {}
        ops1 = workloads.opstats(m.mnt) or {}
        out['warm_seconds'], _ = _timed_find(m.mnt)
        dev2 = workloads.opstats(m.mnt, device=True) or {}
        out['entries'] = entries
        read = dev1.get('read_bytes', 0) - dev0.get('read_bytes', 0)
        out['cold_device_bytes'] = read
        out['cold_bytes_per_entry'] = read / entries if entries else None
        out['warm_device_bytes'] = (dev2.get('read_bytes', 0) -
                                    dev1.get('read_bytes', 0))
        out['cold_lookups'] = ops1.get('lookup', 0) - ops0.get('lookup', 0)
    finally:
        tracker.unmount(m)
    return out


def _find_kernel(img, workdir):
    """Cold and warm find on the kernel's ext4 (read-only, no replay, so
    that the image stays exactly as nextfs saw it)."""
    mnt = os.path.join(workdir, 'metakmnt')
    os.makedirs(mnt, exist_ok=True)
    mounts.run(['mount', '-o', 'loop,ro,noload', '-t', 'ext4', img, mnt])
    try:
        mounts.drop_caches()
        cold, entries = _timed_find(mnt)
        warm, _ = _timed_find(mnt)
    finally:
        mounts.run(['umount', mnt], check=False, timeout=120)
    return {'cold_seconds': cold, 'warm_seconds': warm, 'entries': entries}


def _mount_times(tracker, system, img, workdir, fuse_bin, reps):
    times = []
    for _ in range(reps):
        mounts.drop_caches()
        m = tracker.mount(system, img, os.path.join(workdir, 'metamnt'),
                          os.path.join(workdir, 'meta.log'), fuse_bin)
        times.append(m.mount_seconds)
        tracker.unmount(m)
    return times


def run_meta(tracker, params, workdir, fuse_bin, systems, log):
    """One repetition: {'find': {system: ...}, 'mount': {size: {system:
    [seconds]}}} or {'error'}."""
    res = {'find': {}, 'mount': {}}
    kernel = 'kernel' in systems and mounts.is_root()
    try:
        img = make_find_image(params, workdir, params['meta_files'])
        res['find']['nextfs'] = _find_nextfs(tracker, img, workdir,
                                             fuse_bin)
        if kernel:
            res['find']['kernel'] = _find_kernel(img, workdir)
        os.unlink(img)
        for label, size in (('1GiB', GIB), ('4TiB', 4 * TIB)):
            img = os.path.join(workdir, 'meta-%s.img' % label)
            mounts.make_image(params['mkimages'], img, size, lazy=True)
            res['mount'][label] = {'nextfs': _mount_times(
                tracker, 'nextfs', img, workdir, fuse_bin, 3)}
            if kernel:
                res['mount'][label]['kernel'] = _mount_times(
                    tracker, 'kernel', img, workdir, None, 3)
            os.unlink(img)
    except (BenchError, subprocess.CalledProcessError, OSError) as e:
        res['error'] = str(e)
    s = summarize([res])
    log('    find: %s B/entry, cold %s s (kernel %s), warm %s s; mount '
        '4 TiB %s s (1 GiB %s s)' % (
            _fmt(s.get('bytes_per_entry')), _fmt(s.get('cold_nextfs')),
            _fmt(s.get('cold_kernel')), _fmt(s.get('warm_nextfs')),
            _fmt(s.get('mount_4TiB_nextfs')),
            _fmt(s.get('mount_1GiB_nextfs'))))
    return res


def _median(v):
    v = sorted(x for x in v if x is not None)
    if not v:
        return None
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def _ratio(a, b):
    return a / b if a is not None and b else None


def summarize(reps):
    """Medians over the repetitions and the ratios of issue 30."""
    s = {}
    for sysname in ('nextfs', 'kernel'):
        for key in ('cold', 'warm'):
            s['%s_%s' % (key, sysname)] = _median(
                [r.get('find', {}).get(sysname, {}).get(key + '_seconds')
                 for r in reps])
        for label in ('1GiB', '4TiB'):
            s['mount_%s_%s' % (label, sysname)] = _median(
                [t for r in reps for t in
                 r.get('mount', {}).get(label, {}).get(sysname, [])])
    s['bytes_per_entry'] = _median(
        [r.get('find', {}).get('nextfs', {}).get('cold_bytes_per_entry')
         for r in reps])
    s['cold_vs_kernel'] = _ratio(s['cold_nextfs'], s['cold_kernel'])
    s['warm_vs_kernel'] = _ratio(s['warm_nextfs'], s['warm_kernel'])
    s['warm_vs_cold'] = _ratio(s['warm_nextfs'], s['cold_nextfs'])
    for sysname in ('nextfs', 'kernel'):
        s['mount_4TiB_vs_1GiB_' + sysname] = _ratio(
            s['mount_4TiB_' + sysname], s['mount_1GiB_' + sysname])
    s['mount_4TiB_vs_kernel'] = _ratio(s['mount_4TiB_nextfs'],
                                       s['mount_4TiB_kernel'])
    return s


def _fmt(v, digits=2):
    if v is None:
        return '-'
    return '%.*f' % (digits, v) if v < 100 else '%.0f' % v


def _verdict(v, maximum):
    if v is None:
        return ''
    return 'ok' if v <= maximum else 'MISS'


def print_table(res, out):
    reps = [r for r in res.get('meta_reads', []) if r]
    if not reps:
        return
    s = summarize(reps)
    w = out.write
    entries = _median([r.get('find', {}).get('nextfs', {}).get('entries')
                       for r in reps])
    w('\nmetadata reads and mount time (issue 30; medians of %d '
      'repetition(s), seconds: lower is better)\n' % len(reps))
    w('  find -printf over %s entries: daemon reads %s bytes/entry from '
      'the device (<= %d: %s)\n' % (
          _fmt(entries, 0), _fmt(s['bytes_per_entry'], 0),
          BYTES_PER_ENTRY_MAX,
          _verdict(s['bytes_per_entry'], BYTES_PER_ENTRY_MAX)))
    w('  cold find: nextfs %s, kernel %s, nextfs/kernel %s (<= %.1f: %s)\n'
      % (_fmt(s['cold_nextfs']), _fmt(s['cold_kernel']),
         _fmt(s['cold_vs_kernel']), COLD_VS_KERNEL_MAX,
         _verdict(s['cold_vs_kernel'], COLD_VS_KERNEL_MAX)))
    w('  warm find: nextfs %s, kernel %s, nextfs/kernel %s; nextfs '
      'warm/cold %s (< 1: %s)\n' % (
          _fmt(s['warm_nextfs']), _fmt(s['warm_kernel']),
          _fmt(s['warm_vs_kernel']), _fmt(s['warm_vs_cold']),
          _verdict(s['warm_vs_cold'], 0.999)))
    w('  mount, cold: 1 GiB nextfs %s kernel %s; 4 TiB nextfs %s '
      '(< %.1f: %s) kernel %s;\n    4 TiB/1 GiB nextfs %s kernel %s; '
      '4 TiB nextfs/kernel %s\n' % (
          _fmt(s['mount_1GiB_nextfs'], 3), _fmt(s['mount_1GiB_kernel'], 3),
          _fmt(s['mount_4TiB_nextfs'], 3), MOUNT_4T_MAX,
          _verdict(s['mount_4TiB_nextfs'], MOUNT_4T_MAX),
          _fmt(s['mount_4TiB_kernel'], 3),
          _fmt(s['mount_4TiB_vs_1GiB_nextfs']),
          _fmt(s['mount_4TiB_vs_1GiB_kernel']),
          _fmt(s['mount_4TiB_vs_kernel'])))
    for r in reps:
        if r.get('error'):
            w('  error: %s\n' % r['error'][:300])
