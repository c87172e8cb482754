#!/usr/bin/env python3
"""nextfs defrag on a mount: a file fragmented by overwrites under two
snapshots is rewritten into fewer extents while its content and every
snapshot's copy stay byte for byte what they were (checksums taken at
take time), on an extent-mapped (ext4) and an indirect-mapped (ext2)
volume; the extents are counted independently with debugfs on the
unmounted image, which nextfs check --views and e2fsck -fn (on a copy
without the snapshot flag) find clean.  The refusals write nothing:
a symbolic link, a path inside .snapshots, a directory without -r, a
FIFO, an immutable file, another user's file on an allow_other mount,
free space too fragmented to improve the file.  The ext4 file is defragmented on a mount (the
daemon's ioctl), the ext2 one in the unmounted image (--image).  Runs
once (both flavours in one invocation).
"""

import hashlib
import json
import os
import random
import subprocess

import nxharness as nx
import nxsnap

A = (65534, 65534)          # nobody: owns a file
B = (4242, 4242)            # a user who may not write it
FILE_MIB = 2
FS_IMMUTABLE_FL = 0x00000010


def tool(*args, user=None, check=True):
    argv = [nx.tool_path()] + list(args)
    if user:
        argv = nx.as_user_argv(*user) + argv
    return nx.run(argv, check=check, stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE)


def overwrite(path, rng, count, bs):
    """COUNT random one-block overwrites: under a snapshot each moves."""
    blocks = os.path.getsize(path) // bs
    fd = os.open(path, os.O_RDWR)
    try:
        for _ in range(count):
            os.pwrite(fd, rng.randbytes(bs), rng.randrange(blocks) * bs)
        os.fsync(fd)
    finally:
        os.close(fd)


def debugfs_runs(image, path, nblocks):
    """Runs of data blocks of PATH in IMAGE that follow each other in the
    file and on disk, as filefrag counts extents: debugfs's bmap of every
    logical block (its "blocks" lists tree and indirect blocks too)."""
    d = os.path.dirname(image)
    copy = os.path.join(d, 'runs.img')
    cmds = os.path.join(d, 'runs.cmd')
    nxsnap.masked_copy(image, copy)
    with open(cmds, 'w') as f:
        f.writelines('bmap "%s" %d\n' % (path, i) for i in range(nblocks))
    try:
        out = nx.run([nx.DEBUGFS, '-f', cmds, copy], check=False,
                     stdout=subprocess.PIPE,
                     stderr=subprocess.DEVNULL).stdout
    finally:
        os.unlink(copy)
        os.unlink(cmds)
    blocks = [int(x) for x in out.split('\n') if x.strip().isdigit()]
    assert len(blocks) == nblocks and all(blocks), out[-500:]
    return 1 + sum(1 for a, b in zip(blocks, blocks[1:]) if b != a + 1)


def entry(out, suffix):
    doc = json.loads(out)
    for e in doc['files']:
        if e['path'].endswith(suffix):
            return doc, e
    raise AssertionError('%s not in %s' % (suffix, out))


def bfree(path):
    return os.statvfs(path).f_bfree


class DefragTest(nx.NxTestCase):

    def fragment(self, img, flavour, rng):
        """Fragment data/f under snapshots s1 and s2; checksums of both."""
        bs = nx.BLOCK_SIZE[flavour]
        sums = {}
        with self.mounted(img, check=False) as m:
            os.mkdir(m.p('data'))
            nx.write_file(m.p('data', 'f'), rng.randbytes(FILE_MIB << 20))
            nx.write_file(m.p('data', 'small'), b'x' * 100)
            tool('snapshot', 'take', m.path, 's1')
            overwrite(m.p('data', 'f'), rng, 120, bs)
            tool('snapshot', 'take', m.path, 's2')
            overwrite(m.p('data', 'f'), rng, 120, bs)
            for s in ('s1', 's2'):
                sums[s] = nx.sha256_file(m.p('.snapshots', s, 'data', 'f'))
            sums['live'] = nx.sha256_file(m.p('data', 'f'))
        return sums

    def check_clean(self, img):
        p = tool('check', '--views', img, check=False)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        rc, out = nxsnap.fsck_masked(img)
        self.assertEqual(rc, 0, out)

    def defrag_under_snapshots(self, flavour, offline):
        img = self.make_image('64M', flavour=flavour, name=flavour + '.img')
        rng = random.Random(self.seed())
        sums = self.fragment(img, flavour, rng)
        nblocks = (FILE_MIB << 20) // nx.BLOCK_SIZE[flavour]
        before = debugfs_runs(img, '/data/f', nblocks)
        self.assertGreater(before, 20, 'the overwrites fragment the file')
        if offline:
            out = tool('defrag', '--image', img, '--json', '-r',
                       '/data').stdout
            self.offline_refusals(img)
        with self.mounted(img, opts=('allow_other',), check=False) as m:
            if not offline:
                out = tool('defrag', '--json', '-r', m.p('data')).stdout
            doc, e = entry(out, '/data/f')
            self.assertEqual(e['status'], 'defragmented', out)
            self.assertEqual(e['extents_before'], before, out)
            self.assertLess(e['extents_after'], before, out)
            self.assertGreater(e['blocks_kept_by_snapshot'], 0,
                               'blocks the snapshots need go to them')
            self.assertEqual(entry(out, '/data/small')[1]['status'],
                             'contiguous')
            self.assertEqual(doc['total']['files'], 2)
            after = e['extents_after']
            self.assertEqual(nx.sha256_file(m.p('data', 'f')),
                             sums['live'])
            for s in ('s1', 's2'):
                self.assertEqual(
                    nx.sha256_file(m.p('.snapshots', s, 'data', 'f')),
                    sums[s], 'snapshot %s reads what it read before' % s)
            if not offline:
                self.refusals(m)
        self.assertEqual(debugfs_runs(img, '/data/f', nblocks), after)
        self.check_clean(img)

    def offline_refusals(self, img):
        """--image: the same refusals, and the image stays as it was."""
        with open(img, 'rb') as f:
            want = hashlib.sha256(f.read()).hexdigest()
        for path, words in (('/.snapshots/s1', 'inside .snapshots'),
                            ('/data', 'directory'),
                            ('/data/../data/f', "'..'")):
            p = tool('defrag', '--image', img, path, check=False)
            self.assertEqual((p.returncode, p.stdout), (1, ''), p.stderr)
            self.assertIn(words, p.stderr)
        with open(img, 'rb') as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), want)

    def refuse(self, m, path, words, user=None):
        """defrag PATH fails with one line saying WORDS; nothing changes."""
        free = bfree(m.path)
        p = tool('defrag', path, user=user, check=False)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertEqual(p.stdout, '')
        lines = p.stderr.splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertIn(words, lines[0])
        self.assertEqual(bfree(m.path), free, 'a refusal writes nothing')

    def refusals(self, m):
        os.symlink('f', m.p('data', 'link'))
        self.refuse(m, m.p('data', 'link'), 'symbolic link')
        self.refuse(m, m.p('.snapshots', 's1', 'data', 'f'),
                    'inside .snapshots')
        self.refuse(m, m.p('data'), 'directory')
        os.mkfifo(m.p('data', 'fifo'))
        self.refuse(m, m.p('data', 'fifo'), 'not a regular file')
        small = m.p('data', 'small')
        flags = nx.get_inode_flags(small)
        nx.set_inode_flags(small, flags | FS_IMMUTABLE_FL)
        self.refuse(m, small, 'immutable')
        nx.set_inode_flags(small, flags)
        # Another user's file: only who may write it may defragment it.
        theirs = m.p('data', 'theirs')
        nx.write_file(theirs, b'a' * 8192)
        nx.write_file(m.p('data', 'spacer'), b's' * 4096)
        with open(theirs, 'ab') as f:
            f.write(b'b' * 65536)
        os.chown(theirs, *A)
        os.chmod(theirs, 0o644)
        self.refuse(m, theirs, 'permission denied', user=B)
        p = tool('defrag', '--json', theirs, user=A)
        self.assertIn(json.loads(p.stdout)['files'][0]['status'],
                      ('defragmented', 'contiguous'))

    def test_ext4_extents_on_a_mount(self):
        self.defrag_under_snapshots('ext4', offline=False)

    def test_ext2_indirect_offline(self):
        self.defrag_under_snapshots('ext2', offline=True)

    def test_fragmented_free_space(self):
        """Free space in single blocks cannot hold a two-extent file in
        one run: refused, nothing written."""
        img = self.make_image('16M', flavour='ext4', name='full.img')
        bs = 4096
        with self.mounted(img) as m:
            frag = m.p('frag')
            nx.write_file(frag, b'1' * (100 * bs))
            nx.write_file(m.p('spacer'), b's' * bs)
            with open(frag, 'ab') as f:
                f.write(b'2' * (100 * bs))
                os.fsync(f.fileno())
            want = nx.sha256_file(frag)
            fd = os.open(m.p('filler'), os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                chunk = b'f' * (1 << 20)
                while True:
                    try:
                        os.write(fd, chunk)
                    except OSError:
                        break
                os.fsync(fd)
                blocks = os.fstat(fd).st_size // bs
                for b in range(0, blocks, 2):
                    nx.fallocate(fd, 3, b * bs, bs)     # PUNCH|KEEP_SIZE
                os.fsync(fd)
            finally:
                os.close(fd)
            p = tool('defrag', '--json', frag, check=False)
            e = entry(p.stdout, '/frag')[1]
            self.assertGreaterEqual(e['extents_before'], 2, p.stdout)
            self.assertEqual(p.returncode, 1)
            self.refuse(m, frag, 'free space is too fragmented')
            self.assertEqual(nx.sha256_file(frag), want)


if __name__ == '__main__':
    nx.main()
