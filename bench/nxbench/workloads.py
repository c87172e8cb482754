"""The workload suite, run the same way on every system.

One Session is one fresh image mounted by one system.  Workloads that
read do so cold: the image is unmounted (for FUSE: the daemon writes
everything back and exits), the page cache is dropped (which also drops
the host's cache of the image file) and the image is mounted again.

Every result is a rate (higher is better) so that nextfs/other ratios
read the same way for every workload; the raw seconds stay in the JSON.
"""

import fcntl
import json
import mmap
import os
import subprocess
import sys
import time

from . import mounts
from .mounts import BenchError

MIB = 1 << 20
IO_OPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'io_ops.py')

# name, unit, what it measures (the order is the table's)
WORKLOADS = (
    ('seq_write', 'MiB/s', 'sequential write, 1 MiB I/O, incl. fsync+sync'),
    ('seq_read', 'MiB/s', 'sequential read, 1 MiB I/O, cold'),
    ('rand_write', 'IOPS', 'fio 4 KiB random write, O_DIRECT, end fsync'),
    ('rand_read', 'IOPS', 'fio 4 KiB random read, O_DIRECT, cold, verified'),
    ('rand_read_4j', 'IOPS', 'the same with 4 concurrent readers'),
    ('rand_write_4j', 'IOPS', 'the same with 4 writers, a file each'),
    ('untar', 'entries/s', 'tar -x of a source tree, incl. sync'),
    ('find_stat', 'entries/s', 'find -printf (lstat of all), cold'),
    ('rm_rf', 'entries/s', 'rm -rf of the tree, incl. sync'),
    ('fsync_creates', 'files/s', 'create+write 4 KiB+fsync each file'),
)


class Session:
    """One image mounted by one system, with the helpers the workloads
    need.  The mount object changes at every remount."""

    def __init__(self, tracker, system, image, mnt, log_path, fuse_bin,
                 timeout):
        self.tracker = tracker
        self.system = system
        self.image = image
        self.mnt_path = mnt
        self.log_path = log_path
        self.fuse_bin = fuse_bin
        self.timeout = timeout
        self.m = None
        self.problems = []
        self.dropped_caches = True

    def mount(self):
        self.m = self.tracker.mount(self.system, self.image, self.mnt_path,
                                    self.log_path, self.fuse_bin)
        return self.m

    def unmount(self):
        if self.m is not None:
            self.problems += self.tracker.unmount(self.m)
            self.m = None

    def remount(self):
        """Cold start: unmount, drop caches, mount."""
        self.unmount()
        if not mounts.drop_caches():
            self.dropped_caches = False
        self.mount()

    def abort(self):
        if self.m is not None:
            self.tracker.abort(self.m)
            self.m = None

    def p(self, *parts):
        return os.path.join(self.m.mnt, *parts)

    def io(self, *args):
        """Run one io_ops operation in a child with a timeout."""
        argv = [sys.executable, IO_OPS] + [str(a) for a in args]
        try:
            p = subprocess.run(argv, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise BenchError('%s timed out after %d s' %
                             (args[0], self.timeout))
        if p.returncode != 0:
            raise BenchError('%s failed: %s' %
                             (args[0], p.stderr.strip()[-600:]))
        return json.loads(p.stdout)

    def timed(self, argv, sync=True):
        """Run ARGV (then sync()) and return the elapsed seconds."""
        t0 = time.perf_counter()
        try:
            p = subprocess.run(argv, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True,
                               timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise BenchError('%s timed out' % argv[0])
        if p.returncode != 0:
            raise BenchError('%s failed: %s' % (' '.join(argv[:2]),
                                                p.stderr.strip()[-600:]))
        if sync:
            os.sync()
        return time.perf_counter() - t0


# ------------------------------------------------------------------- fio

def odirect_works(path):
    """Whether O_DIRECT reads and writes work on PATH's file system.
    (libfuse's passthrough_ll, for one, splices written data into its
    file, which an O_DIRECT file refuses with EINVAL.)"""
    with open(path, 'wb') as f:
        f.write(b'\0' * 8192)
    buf = mmap.mmap(-1, 4096)       # page aligned, as O_DIRECT wants
    try:
        fd = os.open(path, os.O_RDWR | os.O_DIRECT)
    except OSError:
        return False
    try:
        os.preadv(fd, [buf], 0)
        os.pwritev(fd, [buf], 4096)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
        buf.close()
        os.unlink(path)


def _fio_json(text):
    start = text.find('{')
    if start < 0:
        raise BenchError('fio printed no JSON')
    return json.loads(text[start:])


def fio(session, name, path, rw, size, io_size, direct, extra=()):
    """Run one fio job; return its parsed job result.

    Data verification: every job writes crc32c-checked blocks (verified
    after the write phase) or checks them on read.  A verification error
    makes fio fail, and so the workload.  (verify_state_save=0: fio
    would otherwise leave a *-verify.state file in the current
    directory.)
    """
    argv = ['fio', '--name=' + name] + \
        ([] if any(x.startswith('--filename_format=') for x in extra)
         else ['--filename=' + path]) + [
            '--rw=' + rw, '--size=%d' % size, '--io_size=%d' % io_size,
            '--ioengine=psync', '--direct=%d' % int(direct),
            '--fallocate=none', '--randrepeat=1', '--verify=crc32c',
            '--verify_fatal=1', '--verify_state_save=0',
            '--output-format=json'] + list(extra)
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           timeout=session.timeout)
    except subprocess.TimeoutExpired:
        raise BenchError('fio %s timed out' % name)
    if p.returncode != 0:
        raise BenchError('fio %s failed (verify?): %s' %
                         (name, (p.stderr or p.stdout).strip()[-600:]))
    job = _fio_json(p.stdout)['jobs'][0]
    if job.get('error'):
        raise BenchError('fio %s: error %s' % (name, job['error']))
    return job


def fio_prep(session, path, size):
    """Lay out PATH sequentially with a verify header every 4 KiB, so
    that a later 4 KiB random reader can check every block."""
    fio(session, 'prep', path, 'write', size, size, False,
        ['--bs=1M', '--verify_interval=4096', '--do_verify=0'])


def _fio_stats(d):
    clat = d.get('clat_ns', {})
    pct = clat.get('percentile', {})
    return {'iops': d['iops'], 'bw_bytes': d['bw_bytes'],
            'io_bytes': d['io_bytes'], 'runtime_ms': d['runtime'],
            'clat_mean_us': clat.get('mean', 0) / 1000.0,
            'clat_p99_us': pct.get('99.000000', 0) / 1000.0}


def fio_randwrite(session, path, size, io_size, direct):
    # end_fsync: the time (and so the IOPS) includes making the data
    # durable, as for seq_write; O_DIRECT alone does not promise that
    # (a FUSE daemon or the loop file may still cache it).
    job = fio(session, 'randwrite', path, 'randwrite', size, io_size,
              direct, ['--bs=4k', '--do_verify=1', '--end_fsync=1'])
    res = _fio_stats(job['write'])
    res['verified_bytes'] = job['read']['io_bytes']
    return res


def fio_randwrite_jobs(session, directory, size, io_size, direct, jobs):
    """JOBS writers at once, each in a file of its own in DIRECTORY (laid
    out and written back first, untimed), reported as one.  Own files:
    the kernel serializes writes to one file (its inode lock), so only
    writers of different files can reach the daemon together and show
    whether it runs them in parallel."""
    for j in range(jobs):
        fio_prep(session, os.path.join(directory, 'rw%dj.%d' % (jobs, j)),
                 size)
    os.sync()
    job = fio(session, 'randwrite%dj' % jobs,
              os.path.join(directory, 'rw%dj.0' % jobs), 'randwrite', size,
              io_size, direct,
              ['--bs=4k', '--do_verify=1', '--end_fsync=1',
               '--numjobs=%d' % jobs, '--group_reporting',
               '--filename_format=rw%dj.$jobnum' % jobs,
               '--directory=' + directory])
    res = _fio_stats(job['write'])
    res['verified_bytes'] = job['read']['io_bytes']
    res['jobs'] = jobs
    return res


def fio_randread(session, path, size, io_size, direct, jobs=1):
    # JOBS readers at once (each reads IO_SIZE / JOBS), reported as one:
    # what a daemon that serializes its reads cannot overlap.
    extra = ['--bs=4k']
    if jobs > 1:
        extra += ['--numjobs=%d' % jobs, '--group_reporting']
    job = fio(session, 'randread', path, 'randread', size, io_size // jobs,
              direct, extra)
    res = _fio_stats(job['read'])
    res['verified_bytes'] = res['io_bytes']
    res['jobs'] = jobs
    return res


# ------------------------------------------------------- request counts

# NX_IOC_GET_OPSTATS (include/nextfs/nxioctl.h): _IOR('N', 0xE4, 4096)
NX_OPSTATS_SIZE = 4096
NX_IOC_GET_OPSTATS = (2 << 30) | (NX_OPSTATS_SIZE << 16) | \
    (ord('N') << 8) | 0xE4


def opstats(path, device=False):
    """nextfs-fuse's request counters {operation: count}, or None where
    the file system does not have them.  DEVICE: its device counters
    instead ({read_bytes, read_calls, cache_hits, written_bytes}: the
    "device." lines)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        buf = bytearray(NX_OPSTATS_SIZE)
        fcntl.ioctl(fd, NX_IOC_GET_OPSTATS, buf, True)
    except OSError:
        return None
    finally:
        os.close(fd)
    out = {}
    for line in buf.rstrip(b'\0').decode().splitlines():
        name, n = line.split()
        if name.startswith('device.') == device:
            out[name[len('device.'):] if device else name] = int(n)
    return out


class DaemonCost:
    """What a timed section cost a FUSE daemon: its requests (nextfs
    only: its counters) and its CPU time, per entry.  The CPU time is
    less at the mercy of a busy machine than the elapsed time; for the
    floor it includes the kernel ext4 work done in its system calls (not
    the loop device's write-back)."""

    def __init__(self, session, entries):
        self.s = session
        self.entries = entries
        self.ops = opstats(session.p())
        self.cpu = self._cpu()

    def _cpu(self):
        m = self.s.m
        return mounts.proc_cpu_seconds(m.pid) if m and m.pid else None

    def result(self):
        r = requests_between(self.ops, opstats(self.s.p()), self.entries)
        cpu = self._cpu()
        if cpu is not None and self.cpu is not None and self.entries:
            r['daemon_cpu_seconds'] = cpu - self.cpu
            r['daemon_cpu_us_per_entry'] = (cpu - self.cpu) * 1e6 / \
                self.entries
        return r


def requests_between(before, after, entries):
    """The requests a workload cost (minus the reading itself): by
    operation, in total and per entry."""
    if before is None or after is None:
        return {}
    ops = {k: v - before.get(k, 0) for k, v in after.items()}
    ops['ioctl'] = ops.get('ioctl', 0) - 1
    ops = {k: v for k, v in ops.items() if v}
    total = sum(ops.values())
    return {'requests': ops, 'requests_total': total,
            'requests_per_entry': total / entries if entries else None}


# ------------------------------------------------------------- the suite

def _rate(n, seconds):
    return n / seconds if seconds > 0 else None


def _step(results, name, fn, log):
    """Run one workload, record its result or its error."""
    try:
        r = fn()
    except BenchError as e:
        r = {'error': str(e)}
    results[name] = r
    if 'error' in r:
        log('    %-14s ERROR %s' % (name, r['error']))
    else:
        log('    %-14s %10.1f %s' % (name, r['value'], r['unit']))
    return r


def run_suite(tracker, system, params, workdir, fuse_bin, log):
    """All workloads on one fresh image with SYSTEM.  Returns a dict:
    workload -> {'value', 'unit', raw numbers...} or {'error'}."""
    image = os.path.join(workdir, '%s.img' % system)
    mounts.make_image(params['mkimages'], image, params['image_size'])
    if system == 'floor':
        fuse_bin = params['floor_bin']
    s = Session(tracker, system, image, os.path.join(workdir, 'mnt'),
                os.path.join(workdir, '%s.log' % system), fuse_bin,
                params['timeout'])
    res = {}
    meta = {}
    t0 = time.perf_counter()
    try:
        s.mount()
        direct = odirect_works(s.p('odirect.probe'))
        meta['o_direct'] = direct
        _run_workloads(s, params, direct, res, log)
        s.unmount()
        clean, out = mounts.fsck(image)
        meta['fsck_clean'] = clean
        if not clean:
            meta['fsck_output'] = out
            log('    e2fsck -fn: NOT CLEAN')
    except BenchError as e:
        meta['error'] = str(e)
        log('    aborted: %s' % e)
    finally:
        s.abort()
        meta['problems'] = s.problems
        meta['dropped_caches'] = s.dropped_caches
        meta['wall_seconds'] = time.perf_counter() - t0
        if os.path.exists(image):
            os.unlink(image)
    return res, meta


def _run_workloads(s, params, direct, res, log):
    size = params['seq_size']
    rsize, rio = params['rand_file'], params['rand_io']
    tree = params['tree']

    def seq_write():
        r = s.io('write', s.p('big'), size, 1)
        return dict(r, value=r['bytes'] / MIB / r['seconds'], unit='MiB/s')

    def seq_read():
        s.remount()
        r = s.io('read', s.p('big'))
        c = s.io('check', s.p('big'), size, 1)
        if not c['ok']:
            raise BenchError('read back wrong data: %s' % c)
        return dict(r, value=r['bytes'] / MIB / r['seconds'], unit='MiB/s')

    def rand_write():
        fio_prep(s, s.p('rand.dat'), rsize)
        # Untimed: the layout's write-back belongs to the layout, not to
        # the random writes (their end_fsync would otherwise flush it).
        os.sync()
        r = fio_randwrite(s, s.p('rand.dat'), rsize, rio, direct)
        return dict(r, value=r['iops'], unit='IOPS', direct=direct)

    def rand_read():
        s.remount()
        r = fio_randread(s, s.p('rand.dat'), rsize, rio, direct)
        return dict(r, value=r['iops'], unit='IOPS', direct=direct)

    def rand_read_4j():
        s.remount()
        r = fio_randread(s, s.p('rand.dat'), rsize, rio, direct, jobs=4)
        return dict(r, value=r['iops'], unit='IOPS', direct=direct)

    def rand_write_4j():
        os.mkdir(s.p('rw4j'))
        r = fio_randwrite_jobs(s, s.p('rw4j'), rsize // 4, rio // 4,
                               direct, 4)
        return dict(r, value=r['iops'], unit='IOPS', direct=direct)

    def untar():
        os.mkdir(s.p('tree'))
        cost = DaemonCost(s, tree['entries'])
        t = s.timed(['tar', '-C', s.p('tree'), '-xf', tree['tarball']])
        return dict(cost.result(), seconds=t, entries=tree['entries'],
                    value=_rate(tree['entries'], t), unit='entries/s')

    def find_stat():
        s.remount()
        cost = DaemonCost(s, tree['entries'])
        t0 = time.perf_counter()
        p = subprocess.run(['find', s.p('tree'), '-printf',
                            '%s %m %U %G %T@ %p\n'],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=s.timeout)
        t = time.perf_counter() - t0
        if p.returncode != 0:
            raise BenchError('find failed: %s' % p.stderr[-300:])
        n = p.stdout.count(b'\n')
        return dict(cost.result(), seconds=t, entries=n, value=_rate(n, t),
                    unit='entries/s')

    def rm_rf():
        cost = DaemonCost(s, tree['entries'])
        t = s.timed(['rm', '-rf', s.p('tree')])
        return dict(cost.result(), seconds=t, entries=tree['entries'],
                    value=_rate(tree['entries'], t), unit='entries/s')

    def fsync_creates():
        cost = DaemonCost(s, params['creates'])
        r = s.io('creates', s.p('small'), params['creates'], 4096)
        return dict(r, value=_rate(r['files'], r['seconds']),
                    unit='files/s', **cost.result())

    steps = [('seq_write', seq_write), ('seq_read', seq_read),
             ('rand_write', rand_write), ('rand_read', rand_read),
             ('rand_read_4j', rand_read_4j), ('rand_write_4j', rand_write_4j),
             ('untar', untar), ('find_stat', find_stat), ('rm_rf', rm_rf),
             ('fsync_creates', fsync_creates)]
    for name, fn in steps:
        if name not in params['workloads']:
            continue
        _step(res, name, fn, log)
        if s.m is None or not s.m.alive():
            raise BenchError('%s: daemon died during %s: %s' %
                             (s.system, name,
                              s.m.log_tail(5) if s.m else 'not mounted'))
