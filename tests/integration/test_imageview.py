#!/usr/bin/env python3
"""Snapshots as block images (docs/design.md P18; docs/snapshots.md,
"Snapshots as images"): MNT/.snapshot-images/NAME, "nextfs export" of a
mounted volume, and "nextfs export --since".

Run: test_imageview.py --flavour ext2|ext3|ext4|ext4-inline

One mounted volume per flavour carries a seeded workload (the snapshot
oracle's, test_snapshots.Workload) with eleven snapshots taken along it.
While it keeps changing:
  - the image directory is where the design says: found by lookup, in no
    listing of "/", of .snapshots or of a snapshot, listing exactly the
    snapshot names; nothing can be made or written there;
  - an image: size the volume's, st_blocks what SEEK_DATA reports; a
    SEEK_HOLE-based copy (cp --sparse=always, which asks lseek) holds no
    more than that; mounted by the kernel (loop, read-only, as root) it
    shows the tree of .snapshots/NAME; e2fsck -fn, dumpe2fs and debugfs -c
    read it clean;
  - "export --since" along the ten pairs of consecutive snapshots turns
    an export of the first one into the last one, writing about what
    differs between the images of each pair;
  - deleting a snapshot whose image is open makes the reader's next read
    fail with ESTALE, never return data.
Then, unmounted: the image copies, taken early (right after the take) and
late, are byte for byte "nextfs export" of the unmounted volume, and so
are "nextfs export" on the mount and the end of the --since chain; an
export that is not the one --since expects is refused and left as it
was; a half-done update is completed by running it again.
test_unprivileged (ext4 only: nothing in it depends on the flavour): a
user's own mount serves them their images.
"""

import errno
import json
import os
import shutil
import stat
import struct
import subprocess
import tempfile
import time

import nxharness as nx
import nxsnap
from nxharness import NOBODY_UID, NOGROUP_GID
from test_tool import ToolWorkload, nextfs

STEPS = 10
SB = 1024
S_MTIME = 0x2C
DUMPE2FS = nx.tool('DUMPE2FS', 'dumpe2fs', '/sbin/dumpe2fs',
                   '/usr/sbin/dumpe2fs')


def images_dir(m):
    return m.p('.snapshot-images')


def data_extents(path):
    """[(start, end)] byte ranges SEEK_DATA/SEEK_HOLE report."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size, off, out = os.fstat(fd).st_size, 0, []
        while off < size:
            try:
                d = os.lseek(fd, off, os.SEEK_DATA)
            except OSError as e:
                if e.errno != errno.ENXIO:
                    raise
                break
            h = os.lseek(fd, d, os.SEEK_HOLE)
            out.append((d, h))
            off = h
        return out
    finally:
        os.close(fd)


def data_blocks(path, bs):
    """{block: bytes} of every block SEEK_DATA reports."""
    out = {}
    with open(path, 'rb') as f:
        for s, e in data_extents(path):
            f.seek(s)
            buf = f.read(e - s)
            for i in range(0, len(buf), bs):
                out[(s + i) // bs] = buf[i:i + bs]
    return out


def differing(a, b, bs):
    """Blocks where images A and B ({block: bytes}) differ, and how many
    of them hold data (not zeros) in B."""
    zero = bytes(bs)
    diff = [k for k in set(a) | set(b) if a.get(k, zero) != b.get(k, zero)]
    return len(diff), sum(1 for k in diff if b.get(k, zero) != zero)


def patch_super(path, fn):
    """FN(bytearray superblock) on PATH, checksum kept right."""
    with open(path, 'r+b') as f:
        f.seek(SB)
        sb = bytearray(f.read(1024))
        fn(sb)
        ro = struct.unpack_from('<I', sb, nxsnap.RO_COMPAT_OFF)[0]
        if ro & nxsnap.RO_COMPAT_METADATA_CSUM:
            struct.pack_into('<I', sb, nxsnap.CHECKSUM_OFF,
                             nxsnap.crc32c_raw(bytes(sb[:nxsnap.CHECKSUM_OFF])))
        f.seek(SB)
        f.write(sb)


def loop_manifest(image_file, work):
    """The kernel's view of IMAGE_FILE (loop, read-only), or None where
    loop mounts are impossible."""
    if os.geteuid() != 0 or not shutil.which('mount') or \
            not os.path.exists('/dev/loop-control'):
        return None
    mnt = tempfile.mkdtemp(dir=work)
    try:
        p = subprocess.run(['mount', '-o', 'loop,ro', image_file, mnt],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise AssertionError('loop mount of %s: %s' %
                                 (image_file, p.stderr))
        try:
            man = nx.tree_state(mnt, skip_top=nxsnap.SKIP)
        finally:
            subprocess.run(['umount', mnt], check=True)
        man['.'].pop('mtime_ns', None)
        return man
    finally:
        os.rmdir(mnt)


class ImageViewTest(nx.NxTestCase):

    def setUp(self):
        super().setUp()
        if nx.backend() != 'nextfs':
            self.skipTest('nextfs snapshot images')

    def sparse_copy(self, m, name, tag):
        """cp --sparse=always of NAME's image; checks that it went by
        SEEK_DATA/SEEK_HOLE and stayed within the image's st_blocks."""
        src = os.path.join(images_dir(m), name)
        out = os.path.join(self.work, '%s.%s' % (name, tag))
        before = nx.opstats(m.path).get('lseek', 0)
        nx.run(['cp', '--sparse=always', src, out])
        self.assertGreater(nx.opstats(m.path).get('lseek', 0), before,
                           'cp did not ask SEEK_DATA/SEEK_HOLE')
        st, cst = os.stat(src), os.stat(out)
        self.assertEqual(cst.st_size, st.st_size)
        self.assertLessEqual(cst.st_blocks, st.st_blocks * 1.03 + 64,
                             'the copy holds more than the used blocks')
        return out

    def check_placement(self, m, names):
        """Where the images live, and that nothing else sees them."""
        self.assertNotIn('.snapshot-images', os.listdir(m.path))
        self.assertTrue(stat.S_ISDIR(os.stat(images_dir(m)).st_mode))
        self.assertEqual(os.listdir(nxsnap.snap_dir(m)), names)
        self.assertEqual(os.listdir(images_dir(m)), names)
        # in a snapshot: the volume's own entry of that name, not images
        for n in (names[0], names[-1]):
            inside = os.path.join(nxsnap.snap_dir(m, n), '.snapshot-images')
            self.assertEqual(os.listdir(inside), ['real'])
        # only root and whoever runs the daemon read images
        self.assertErrno(errno.EACCES, nx.run_as, NOBODY_UID, NOGROUP_GID,
                         read_head, os.path.join(images_dir(m), names[0]))
        self.assertEqual(nx.run_as(NOBODY_UID, NOGROUP_GID, os.listdir,
                                   images_dir(m)), names)
        self.assertErrno(errno.EEXIST, os.mkdir, images_dir(m))
        self.assertErrno(errno.EROFS, os.open,
                         os.path.join(images_dir(m), names[0]), os.O_WRONLY)
        self.assertErrno(errno.EROFS, os.open,
                         os.path.join(images_dir(m), 'new'),
                         os.O_WRONLY | os.O_CREAT)
        p = nextfs('snapshot', 'image', m.path, names[1], check=0)
        self.assertEqual(p.stdout.strip(),
                         os.path.join(images_dir(m), names[1]))
        nextfs('snapshot', 'image', m.path, 'nope', check=1)

    def check_image(self, m, name):
        """One image: attributes, kernel, e2fsprogs."""
        path = os.path.join(images_dir(m), name)
        st = os.stat(path)
        self.assertEqual(st.st_size, os.path.getsize(m.image))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o400)
        used = sum(e - s for s, e in data_extents(path))
        # (ST was taken before any open: the estimate, exact here)
        self.assertEqual(st.st_blocks * 512, used,
                         'st_blocks is not what SEEK_DATA reports')
        man = loop_manifest(path, self.work)
        if man is not None:
            self.assertTreesEqual(nxsnap.snap_manifest(m, name), man,
                                  'kernel loop mount of the image of %s' %
                                  name)
        rc, out = nx.fsck(path)
        self.assertEqual(rc, 0, 'e2fsck -fn on the image of %s:\n%s' %
                         (name, nx.tail(out, 30)))
        p = nx.run([DUMPE2FS, '-h', path])
        self.assertIn('clean', p.stdout)
        self.assertNotIn('has_snapshot', p.stdout)
        p = nx.run([nx.DEBUGFS, '-c', '-R', 'ls -l /', path])
        self.assertNotIn('.snapshots', p.stdout)

    def since_chain(self, m, names, out):
        """export --since along every pair: what it wrote against what
        differs between the two images."""
        nextfs('export', m.path, names[0], out, check=0)
        wrote = need = 0
        prev = data_blocks(os.path.join(images_dir(m), names[0]), self.bsize)
        for old, new in zip(names, names[1:]):
            cur = data_blocks(os.path.join(images_dir(m), new), self.bsize)
            ndiff, ndata = differing(prev, cur, self.bsize)
            p = nextfs('export', '--since', old, '--json', m.path, new, out,
                       check=0)
            r = json.loads(p.stdout)
            self.assertEqual(r['state'], 'updated')
            # every block with other data is written, and little else
            self.assertGreaterEqual(r['blocks_written'], ndata)
            self.assertLessEqual(r['blocks_written'], ndata * 1.1 + 8,
                                 '%s -> %s: %d blocks written, %d differ' %
                                 (old, new, r['blocks_written'], ndata))
            self.assertLessEqual(r['blocks_written'] + r['blocks_zeroed'],
                                 ndiff * 1.1 + 8)
            wrote += r['blocks_written']
            need += ndata
            prev = cur
        print('export --since: %d blocks written for %d that differ' %
              (wrote, need))

    def check_delete_while_open(self, m, name):
        """Reads after the delete: the data as it was until the kernel has
        dropped what it cached (it is told right after the rmdir), then
        ESTALE - never anything else."""
        path = os.path.join(images_dir(m), name)
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            offsets = (0, size // 2, size - 4096)
            before = {off: os.pread(fd, 4096, off) for off in offsets[:2]}
            os.rmdir(nxsnap.snap_dir(m, name))
            deadline = time.monotonic() + 10
            for off in offsets:
                while True:
                    try:
                        data = os.pread(fd, 4096, off)
                    except OSError as e:
                        self.assertEqual(e.errno, errno.ESTALE, e)
                        break
                    self.assertEqual(data, before.get(off),
                                     'read %d of a deleted image' % off)
                    self.assertLess(time.monotonic(), deadline,
                                    'the deleted image still reads')
                    time.sleep(0.01)
            self.assertErrno(errno.ESTALE, os.fstat, fd)
        finally:
            os.close(fd)
        self.assertFalse(os.path.exists(path))
        self.assertNotIn(name, os.listdir(images_dir(m)))

    def plant_real_entry(self, img):
        """A real directory named like the image directory, made before
        nextfs ever served the volume: the mount's name wins, as for
        .snapshots, and the snapshots keep the real one."""
        src = os.path.join(self.work, 'real.txt')
        nx.write_file(src, b'a file of the volume\n')
        cmds = os.path.join(self.work, 'debugfs.cmds')
        nx.write_file(cmds, ('mkdir .snapshot-images\ncd .snapshot-images\n'
                             'write %s real\n' % src).encode())
        nx.run([nx.DEBUGFS, '-w', '-f', cmds, img])

    def test_images(self):
        seed = self.seed()
        img = self.make_image('64M')
        self.plant_real_entry(img)
        names = ['s%02d' % i for i in range(STEPS + 1)]
        chain = os.path.join(self.work, 'chain.img')
        online = os.path.join(self.work, 'online.img')
        with self.mounted(img, check=False) as m:
            w = ToolWorkload(m.path, seed, self.bsize)
            w.run(60)
            early = None
            for i, n in enumerate(names):
                os.mkdir(nxsnap.snap_dir(m, n))
                if i == 0:      # read while the volume goes on changing
                    early = self.sparse_copy(m, n, 'early')
                w.run(25)
            self.check_placement(m, names)
            self.check_image(m, names[STEPS // 2])
            late = {n: self.sparse_copy(m, n, 'late')
                    for n in (names[0], names[-1])}
            nextfs('export', m.path, names[STEPS // 2], online, check=0)
            self.since_chain(m, names, chain)
            self.check_delete_while_open(m, names[3])
        rc, out = nxsnap.fsck_masked(img)
        self.assertEqual(rc, 0, 'e2fsck -fn (masked):\n' + nx.tail(out, 30))

        # unmounted: the same bytes from "nextfs export"
        def offline(name):
            out = os.path.join(self.work, name + '.offline')
            nextfs('export', img, name, out, check=0)
            return out
        exp = {n: offline(n) for n in (names[0], names[STEPS // 2],
                                       names[-1])}
        nx.run(['cmp', early, exp[names[0]]])
        for n, copy in late.items():
            nx.run(['cmp', copy, exp[n]])
        nx.run(['cmp', online, exp[names[STEPS // 2]]])
        nx.run(['cmp', chain, exp[names[-1]]])
        self.check_refusals(img, names, exp, chain)

    def check_refusals(self, img, names, exp, chain):
        """--since on targets that are not the export it expects."""
        last, mid, first = names[-1], names[STEPS // 2], names[0]
        before = nx.sha256_file(chain)
        p = nextfs('export', '--since', mid, '--json', img, last, chain,
                   check=0)
        self.assertEqual(json.loads(p.stdout)['state'], 'up to date')
        p = nextfs('export', '--since', mid, img, first, chain, check=1)
        self.assertIn('another snapshot', p.stdout)
        foreign = self.make_image('64M', name='foreign.img')
        fbefore = nx.sha256_file(foreign)
        p = nextfs('export', '--since', mid, img, first, foreign, check=1)
        self.assertIn('not an export of this volume', p.stdout)
        self.assertEqual(nx.sha256_file(foreign), fbefore)
        changed = os.path.join(self.work, 'changed.img')
        shutil.copyfile(chain, changed)
        patch_super(changed, lambda sb: struct.pack_into(
            '<I', sb, S_MTIME, struct.unpack_from('<I', sb, S_MTIME)[0] + 1))
        cbefore = nx.sha256_file(changed)
        p = nextfs('export', '--since', last, img, mid, changed, check=1)
        self.assertIn('was changed since', p.stdout)
        self.assertEqual(nx.sha256_file(changed), cbefore)
        self.assertEqual(nx.sha256_file(chain), before)
        self.check_interrupted(img, first, mid, last, exp)

    def check_interrupted(self, img, first, mid, last, exp):
        """An update cut short by a full disk: the target says so, other
        updates are refused, the same one completes it."""
        if os.geteuid() != 0 or not shutil.which('mount'):
            return
        need = os.stat(exp[last]).st_blocks - os.stat(exp[first]).st_blocks
        print('interrupted update: %d KiB to grow' % (need // 2))
        if need < 64:
            return              # too little growth to fill a disk with
        small = tempfile.mkdtemp(dir=self.work)
        size = (os.stat(exp[first]).st_blocks + need // 2) * 512 + 65536
        nx.run(['mount', '-t', 'tmpfs', '-o', 'size=%d' % size, 'nxtmp',
                small])
        try:
            out = os.path.join(small, 'x.img')
            nx.run(['cp', '--sparse=always', exp[first], out])
            p = nextfs('export', '--since', first, img, last, out, check=1)
            self.assertIn('No space left', p.stdout)
            self.assertIn('run the same command again', p.stdout)
            p = nx.run([DUMPE2FS, '-h', out], check=False)
            self.assertIn('not clean with errors', p.stdout)
            before = nx.sha256_file(out)
            p = nextfs('export', '--since', first, img, mid, out, check=1)
            self.assertIn('interrupted', p.stdout)
            self.assertEqual(nx.sha256_file(out), before)
            nx.run(['mount', '-o', 'remount,size=%d' % (4 * size), small])
            p = nextfs('export', '--since', first, '--json', img, last, out,
                       check=0)
            self.assertEqual(json.loads(p.stdout)['state'], 'resumed')
            nx.run(['cmp', out, exp[last]])
        finally:
            subprocess.run(['umount', small], check=True)
            os.rmdir(small)

    def test_unprivileged(self):
        """A user's own mount: the images are theirs to read, and to
        export from."""
        if self.flavour != 'ext4':
            self.skipTest('runs on ext4 only: nothing flavour-specific')
        self.need_root()
        self.need_fuse_daemon()
        fm = os.stat(nx.FUSERMOUNT)
        if not fm.st_mode & stat.S_ISUID or fm.st_uid != 0:
            self.skipTest('%s is not setuid root' % nx.FUSERMOUNT)
        try:
            nx.run_as(NOBODY_UID, NOGROUP_GID, open_dev_fuse)
        except OSError as e:
            self.skipTest('/dev/fuse is not usable by nobody (%s)' % e)
        img, udir = self.make_user_image(NOBODY_UID, NOGROUP_GID)
        user = (NOBODY_UID, NOGROUP_GID)
        out = os.path.join(udir, 'out.img')
        with self.mounted(img, user=user, workdir=udir, check=False) as m:
            seen = nx.run_as(NOBODY_UID, NOGROUP_GID, use_own_image, m.path,
                             out)
            self.assertEqual(seen['owner'], user)
            self.assertEqual(seen['mkdir'], errno.EEXIST)
            self.assertEqual(seen['image'], seen['export'])
        rc, text = nx.fsck(out)
        self.assertEqual(rc, 0, text)
        self.assertEqual(nx.sha256_file(out), seen['export'])
        nextfs('export', img, 's', os.path.join(self.work, 'root.img'),
               check=0)
        self.assertEqual(nx.sha256_file(os.path.join(self.work, 'root.img')),
                         seen['export'])


def read_head(path):
    with open(path, 'rb') as f:
        return f.read(4096)


def open_dev_fuse():
    os.close(os.open('/dev/fuse', os.O_RDWR))


def use_own_image(root, out):
    """As the user who mounted ROOT: a snapshot, its image, an export."""
    nx.write_file(os.path.join(root, 'f'), nx.pattern(300000, 3))
    os.mkdir(os.path.join(root, '.snapshots', 's'))
    path = os.path.join(root, '.snapshot-images', 's')
    st = os.stat(path)
    try:            # the name is taken, also where the volume has none
        os.mkdir(os.path.join(root, '.snapshot-images'))
        taken = 0
    except OSError as e:
        taken = e.errno
    subprocess.run([nx.tool_path(), 'export', root, 's', out], check=True,
                   capture_output=True)
    return {'owner': (st.st_uid, st.st_gid), 'image': nx.sha256_file(path),
            'export': nx.sha256_file(out), 'mkdir': taken}


if __name__ == '__main__':
    nx.main()
