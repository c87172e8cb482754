"""What changed between snapshots (nextfs only): "nextfs diff" on the
mountpoint (the daemon classifies with the block maps of its open views
and hands the delta over) against the same diff of the unmounted image.

The tree (FILES small files, 1000 per directory) is made on the host and
put into a fresh image with mke2fs -d (creating it through FUSE would
dominate the run); snapshot "a" is taken offline, 1% of the files are
then changed through the mount (rewritten, renamed, created, removed),
snapshot "b" is taken with mkdir, and both diffs are timed (median of
REPS runs, warm: the question is the daemon's path, not the disk's).
"""

import os
import random
import shutil
import statistics
import subprocess
import time

from .mounts import BenchError
from .workloads import Session

MIB = 1 << 20


def _make_tree(root, files):
    per_dir = 1000
    for i in range(files):
        d = os.path.join(root, 'd%04d' % (i // per_dir))
        if i % per_dir == 0:
            os.makedirs(d)
        with open(os.path.join(d, 'f%06d' % i), 'wb') as f:
            f.write(b'%08d' % i * 16)


def _run(argv, timeout, want_out=False):
    t0 = time.perf_counter()
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout)
    t = time.perf_counter() - t0
    if p.returncode != 0:
        raise BenchError('%s failed: %s' % (' '.join(argv[:3]),
                                            p.stderr.decode()[-400:]))
    return (t, p.stdout) if want_out else t


def _run_into_pipe(argv, timeout):
    """ARGV writing into a pipe that wc -c empties: (seconds, bytes).  A
    reader in C: Python reading 370 MiB from a pipe takes about a second
    by itself on the 2-core VM, as long as what it would measure."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wc = subprocess.Popen(['wc', '-c'], stdin=p.stdout,
                          stdout=subprocess.PIPE)
    p.stdout.close()
    try:
        out, _ = wc.communicate(timeout=timeout)
        err = p.stderr.read()
        p.wait(timeout)
    finally:
        for q in (p, wc):
            if q.poll() is None:
                q.kill()
                q.wait()
        p.stderr.close()
    t = time.perf_counter() - t0
    if p.returncode != 0 or wc.returncode != 0:
        raise BenchError('%s failed: %s' % (' '.join(argv[:3]),
                                            err.decode()[-400:]))
    return t, int(out)


def _change(mnt, files, log):
    """Change 1% of the files: a quarter rewritten, renamed, created and
    removed each."""
    n = max(4, files // 100)
    step = max(1, files // n)
    changed = 0
    for k, i in enumerate(range(0, files, step)):
        p = os.path.join(mnt, 'd%04d' % (i // 1000), 'f%06d' % i)
        how = k % 4
        if how == 0:
            with open(p, 'r+b') as f:
                f.write(b'changed!')
        elif how == 1:
            os.rename(p, p + '.renamed')
        elif how == 2:
            with open(p + '.new', 'wb') as f:
                f.write(b'new file')
        else:
            os.unlink(p)
        changed += 1
    return changed


def run_diff(tracker, params, workdir, fuse_bin, cli, log):
    files = params['diff_files']
    reps = params.get('diff_reps', 3)
    timeout = params['timeout']
    out = {'files': files}
    tree = os.path.join(workdir, 'difftree')
    image = os.path.join(workdir, 'diff.img')
    shutil.rmtree(tree, ignore_errors=True)
    t0 = time.perf_counter()
    _make_tree(tree, files)
    size_mib = max(256, files * 8 // 1024)
    _run(['mke2fs', '-q', '-F', '-t', 'ext4', '-N', str(files + files // 4 +
                                                     10000),
          '-d', tree, image, '%dM' % size_mib], timeout)
    shutil.rmtree(tree, ignore_errors=True)
    out['make_seconds'] = time.perf_counter() - t0
    _run([cli, 'snapshot', 'take', image, 'a'], timeout)
    mnt = os.path.join(workdir, 'diffmnt')
    os.makedirs(mnt, exist_ok=True)
    s = Session(tracker, 'nextfs', image, mnt,
                os.path.join(workdir, 'diff-nextfs.log'), fuse_bin, timeout)
    s.mount()
    try:
        out['changed'] = _change(s.m.mnt, files, log)
        os.mkdir(os.path.join(s.m.mnt, '.snapshots', 'b'))
        mounted = []
        for _ in range(reps):
            t, text = _run([cli, 'diff', s.m.mnt, 'a', 'b'], timeout, True)
            mounted.append(t)
        out['lines'] = text.count(b'\n')
        out['mounted_seconds'] = mounted
    finally:
        s.unmount()
    offline = []
    for _ in range(reps):
        t, text2 = _run([cli, 'diff', image, 'a', 'b'], timeout, True)
        offline.append(t)
    out['offline_seconds'] = offline
    out['same_output'] = text == text2
    out['mounted'] = statistics.median(mounted)
    out['offline'] = statistics.median(offline)
    out['mounted_vs_offline'] = out['mounted'] / max(out['offline'], 1e-9)
    log('diff of %d files, %d changed: mounted %.3f s, offline %.3f s '
        '(%.2fx)' % (files, out['changed'], out['mounted'], out['offline'],
                     out['mounted_vs_offline']))
    os.unlink(image)
    return out


def _make_data_tree(root, files, seed):
    """FILES files of 4 KiB to 256 KiB (about 64 KiB each), 100 per
    directory, with content that does not compress."""
    rnd = random.Random(seed)
    block = os.urandom(1 << 20)
    total = 0
    for i in range(files):
        d = os.path.join(root, 'd%03d' % (i // 100))
        if i % 100 == 0:
            os.makedirs(d)
        size = rnd.choice([4096, 16384, 65536, 131072, 262144])
        off = rnd.randrange(len(block) - size)
        with open(os.path.join(d, 'f%05d' % i), 'wb') as f:
            f.write(block[off:off + size])
        total += size
    return total


def _change_data(mnt, files, seed):
    """Rewrite one 4 KiB block in 1% of the files (and add one file of
    as much): what changed, in bytes."""
    rnd = random.Random(seed)
    n = max(1, files // 100)
    changed = 0
    for i in rnd.sample(range(files), n):
        p = os.path.join(mnt, 'd%03d' % (i // 100), 'f%05d' % i)
        with open(p, 'r+b') as f:
            f.write(os.urandom(4096))
        changed += 4096
    return changed


def run_send(tracker, params, workdir, fuse_bin, cli, log):
    """Full send vs tar -c of the same snapshot through the mount, both
    cold and into a pipe that wc -c reads; incremental send of a 1%
    change vs the full send."""
    files = params['send_files']
    timeout = params['timeout']
    out = {'files': files}
    tree = os.path.join(workdir, 'sendtree')
    image = os.path.join(workdir, 'send.img')
    shutil.rmtree(tree, ignore_errors=True)
    out['tree_bytes'] = _make_data_tree(tree, files, 1)
    size_mib = max(256, out['tree_bytes'] * 2 // MIB + 64)
    _run(['mke2fs', '-q', '-F', '-t', 'ext4', '-d', tree, image,
          '%dM' % size_mib], timeout)
    shutil.rmtree(tree, ignore_errors=True)
    _run([cli, 'snapshot', 'take', image, 'a'], timeout)
    mnt = os.path.join(workdir, 'sendmnt')
    os.makedirs(mnt, exist_ok=True)
    s = Session(tracker, 'nextfs', image, mnt,
                os.path.join(workdir, 'send-nextfs.log'), fuse_bin, timeout)
    s.mount()
    try:
        m = s.m.mnt
        snap = os.path.join(m, '.snapshots', 'a')
        s.remount()             # both read cold, from a fresh mount
        m = s.m.mnt
        out['tar_seconds'], out['tar_bytes'] = _run_into_pipe(
            ['tar', '-C', snap, '-cf', '-', '.'], timeout)
        s.remount()
        m = s.m.mnt
        out['full_seconds'], out['full_bytes'] = _run_into_pipe(
            [cli, 'send', m, 'a'], timeout)
        out['changed_bytes'] = _change_data(m, files, 2)
        os.mkdir(os.path.join(m, '.snapshots', 'b'))
        out['inc_seconds'], out['inc_bytes'] = _run_into_pipe(
            [cli, 'send', '-p', 'a', m, 'b'], timeout)
    finally:
        s.unmount()
    os.unlink(image)
    out['full_vs_tar'] = out['tar_seconds'] / max(out['full_seconds'], 1e-9)
    out['inc_time_share'] = out['inc_seconds'] / max(out['full_seconds'],
                                                    1e-9)
    out['inc_size_vs_changed'] = out['inc_bytes'] / max(
        out['changed_bytes'], 1)
    log('send of %d files (%.0f MiB): full %.2f s (tar -c %.2f s, %.2fx), '
        '1%% incremental %.3f s (%.1f%% of full), %d bytes for %d changed '
        '(%.2fx)' % (files, out['tree_bytes'] / MIB, out['full_seconds'],
                     out['tar_seconds'], out['full_vs_tar'],
                     out['inc_seconds'], 100 * out['inc_time_share'],
                     out['inc_bytes'], out['changed_bytes'],
                     out['inc_size_vs_changed']))
    return out


def run_repl(tracker, params, workdir, fuse_bin, cli, log):
    """The diff and send numbers of one repetition, or the error."""
    try:
        return {'diff': run_diff(tracker, params, workdir, fuse_bin, cli,
                                 log),
                'send': run_send(tracker, params, workdir, fuse_bin, cli,
                                 log)}
    except (BenchError, OSError, subprocess.SubprocessError) as e:
        return {'error': str(e)}
