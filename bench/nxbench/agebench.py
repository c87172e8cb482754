"""Write throughput on an aged volume against a fresh one (issue 31).

An aged volume has its free space in short runs; an allocator that
searches them badly (or, as nextfs did before issue 31, forever) shows
here.  Every system writes the same file into a fresh image and into an
aged one of the same size; the aged image is the fresh one after
nxage (tests/integration/nxage.c, built with the tests) has cut its free
space into AGED_PATTERN.  The write is timed as seq_write (1 MiB writes,
fsync and sync() included), its content checked afterwards, the image
checked with e2fsck -fn after the unmount.
"""

import os
import time

from . import mounts, workloads
from .mounts import BenchError

MIB = 1 << 20

# 32 KiB free, 32 KiB in use, in turn: half the volume free, none of it
# in a run longer than 8 blocks; the volume's last block in use.
AGED_PATTERN = 'runs:8:8'
AGED_SYSTEMS = ('nextfs', 'fuse2fs', 'kernel')


def nxage_path(build):
    return os.path.join(build, 'tests', 'integration', 'nxage')


def _write_once(tracker, system, params, workdir, fuse_bin, nxage, kind):
    image = os.path.join(workdir, '%s-%s.img' % (system, kind))
    mounts.make_image(params['mkimages'], image, params['image_size'])
    s = workloads.Session(tracker, system, image,
                          os.path.join(workdir, 'mnt'),
                          os.path.join(workdir, '%s.log' % system),
                          fuse_bin, params['timeout'])
    size = params['aged_write']
    try:
        if kind == 'aged':
            mounts.run([nxage, image, AGED_PATTERN])
        s.mount()
        cpu0 = mounts.proc_cpu_seconds(s.m.pid) if s.m.pid else None
        w = s.io('write', s.p('aged.dat'), size, 31)
        cpu1 = mounts.proc_cpu_seconds(s.m.pid) if s.m.pid else None
        c = s.io('check', s.p('aged.dat'), size, 31)
        if not c['ok']:
            raise BenchError('read back wrong data: %s' % c)
        r = dict(w, value=w['bytes'] / MIB / w['seconds'], unit='MiB/s')
        if cpu0 is not None and cpu1 is not None:
            r['daemon_cpu_seconds'] = cpu1 - cpu0
        s.unmount()
        r['fsck_clean'], out = mounts.fsck(image)
        if not r['fsck_clean']:
            r['fsck_output'] = out
    except BenchError as e:
        r = {'error': str(e)}
    finally:
        s.abort()
        if os.path.exists(image):
            os.unlink(image)
    if s.problems:
        r['problems'] = s.problems
    return r


def run_aged(tracker, params, workdir, fuse_bin, build, systems, log):
    """One repetition: each system writes into a fresh, then an aged
    image.  Returns {system: {'fresh': result, 'aged': result}, ...}."""
    out = {'pattern': AGED_PATTERN, 'bytes': params['aged_write']}
    nxage = nxage_path(build)
    if not os.access(nxage, os.X_OK):
        out['error'] = ('%s not built (meson setup with -Dtests=true)' %
                        nxage)
        return out
    t0 = time.perf_counter()
    for sysname in systems:
        if sysname not in AGED_SYSTEMS:
            continue
        for kind in ('fresh', 'aged'):
            r = _write_once(tracker, sysname, params, workdir, fuse_bin,
                            nxage, kind)
            out.setdefault(sysname, {})[kind] = r
            if 'error' in r:
                log('    %-8s %-6s ERROR %s' % (sysname, kind, r['error']))
            else:
                log('    %-8s %-6s %8.1f MiB/s' % (sysname, kind,
                                                   r['value']))
    out['wall_seconds'] = time.perf_counter() - t0
    return out
