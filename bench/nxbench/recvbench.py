"""Receive costs (nextfs only).

"nextfs receive" of the benchmark's tree against "cp -a" of the same tree
into a fresh mount (issue 26).  The stream is what "btrfs send" writes
for that tree (unpacked into a loop-mounted btrfs), so this measures the
receiver alone; it needs root and btrfs, and is skipped with the reason
otherwise.  Three fresh images of the same size, page cache warm for
the sources (the stream file, the btrfs tree):

  receive_image_seconds   nextfs receive -f STREAM IMAGE (offline: the
                          tool opens, applies, takes, closes)
  receive_mount_seconds   nextfs receive -f STREAM MNT, then nextfs
                          umount (the daemon applies; the unmount writes
                          everything back)
  cp_mount_seconds        cp -a TREE/. MNT, then nextfs umount

Every receive is verified: the received snapshot exists, and e2fsck of
the image (HAS_SNAPSHOT masked by the CLI's check) is left to the tests.
"""

import json
import os
import shutil
import tempfile
import time

from . import mounts
from .mounts import BenchError


def btrfs_unusable():
    if not mounts.is_root():
        return 'needs root (a loop-mounted btrfs makes the stream)'
    for prog in ('mkfs.btrfs', 'btrfs'):
        if not shutil.which(prog):
            return '%s is not installed (btrfs-progs)' % prog
    return None


class _Btrfs:
    """A loop-mounted btrfs holding TARBALL unpacked in a read-only
    snapshot, and the full send stream of it."""

    def __init__(self, workdir, tarball, size):
        self.dir = tempfile.mkdtemp(prefix='btrfs.', dir=workdir)
        self.image = os.path.join(self.dir, 'btrfs.img')
        self.mnt = os.path.join(self.dir, 'mnt')
        self.stream = os.path.join(self.dir, 'tree.stream')
        self.tarball = tarball
        self.size = size
        self.mounted = False

    def __enter__(self):
        os.mkdir(self.mnt)
        with open(self.image, 'wb') as f:
            f.truncate(self.size)
        mounts.run(['mkfs.btrfs', '-q', '-f', self.image])
        mounts.run(['mount', '-o', 'loop', self.image, self.mnt])
        self.mounted = True
        vol = os.path.join(self.mnt, 'vol')
        mounts.run(['btrfs', '-q', 'subvolume', 'create', vol])
        mounts.run(['tar', '-C', vol, '-xf', self.tarball])
        self.snap = os.path.join(self.mnt, 'tree')
        mounts.run(['btrfs', '-q', 'subvolume', 'snapshot', '-r', vol,
                    self.snap])
        mounts.run(['btrfs', '-q', 'send', '-f', self.stream, self.snap])
        return self

    def __exit__(self, *exc):
        if self.mounted:
            mounts.run(['umount', self.mnt], check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


def _fresh(params, workdir, name):
    img = os.path.join(workdir, name)
    mounts.make_image(params['mkimages'], img, params['image_size'])
    return img


def _received(cli, img, timeout):
    p = mounts.run([cli, 'snapshot', 'list', '--json', img], check=False,
                   timeout=timeout)
    try:
        names = [s['name'] for s in json.loads(p.stdout)]
    except ValueError:
        names = []
    if 'tree' not in names:
        raise BenchError('no snapshot "tree" after the receive: %s' %
                         p.stdout[-300:])


def run_receive(tracker, params, workdir, fuse_bin, cli, log):
    """The three times above, in a dict (or {'skipped': why})."""
    why = btrfs_unusable()
    if why:
        return {'skipped': why}
    tree = params['tree']
    timeout = params['timeout']
    res = {'entries': tree['entries'], 'tar_bytes': tree['tar_bytes']}
    try:
        with _Btrfs(workdir, tree['tarball'],
                    max(256 << 20, 3 * tree['tar_bytes'])) as b:
            res['stream_bytes'] = os.path.getsize(b.stream)
            log('  receive into an image')
            img = _fresh(params, workdir, 'recv-image.img')
            t0 = time.perf_counter()
            mounts.run([cli, 'receive', '-f', b.stream, img],
                       timeout=timeout)
            res['receive_image_seconds'] = time.perf_counter() - t0
            _received(cli, img, timeout)
            os.unlink(img)
            for how in ('receive', 'cp'):
                log('  %s into a mount' % how)
                img = _fresh(params, workdir, '%s-mount.img' % how)
                mnt = tempfile.mkdtemp(prefix='mnt.', dir=workdir)
                m = tracker.mount('nextfs', img, mnt,
                                  os.path.join(workdir, 'repl.log'),
                                  fuse_bin)
                try:
                    t0 = time.perf_counter()
                    if how == 'receive':
                        mounts.run([cli, 'receive', '-f', b.stream, mnt],
                                   timeout=timeout)
                    else:
                        mounts.run(['cp', '-a', b.snap + '/.', mnt],
                                   timeout=timeout)
                    problems = tracker.unmount(m)
                    m = None
                    res['%s_mount_seconds' % how] = \
                        time.perf_counter() - t0
                    if problems:
                        raise BenchError('; '.join(problems))
                finally:
                    if m is not None:
                        tracker.abort(m)
                    os.rmdir(mnt)
                if how == 'receive':
                    _received(cli, img, timeout)
                os.unlink(img)
    except BenchError as e:
        res['error'] = str(e)
    if res.get('cp_mount_seconds') and res.get('receive_mount_seconds'):
        res['receive_vs_cp'] = res['receive_mount_seconds'] / \
            res['cp_mount_seconds']
    return res


def print_table(res, out, fmt):
    """The receive lines of the report (FMT: the report's number format)."""
    runs = res.get('receive') or []
    if not runs:
        return
    out.write('\nnextfs receive vs cp -a of the same tree (btrfs send '
              'stream; fresh images)\n')
    for r in runs:
        if r.get('skipped') or r.get('error'):
            out.write('  not measured: %s\n' % (r.get('skipped') or
                                                r.get('error')))
            continue
        out.write('  %d entries, stream %.1f MiB: receive into an image '
                  '%s s, into a mount %s s (+ umount), cp -a into a mount '
                  '%s s (+ umount): receive/cp %s\n' % (
                      r['entries'], r['stream_bytes'] / (1 << 20),
                      fmt(r.get('receive_image_seconds')),
                      fmt(r.get('receive_mount_seconds')),
                      fmt(r.get('cp_mount_seconds')),
                      fmt(r.get('receive_vs_cp'))))
