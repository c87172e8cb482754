#!/usr/bin/env python3
"""Metadata reads that do not grow per entry; volumes far larger than
their content (issue 30 points 3 and 4).

test_find_reads_little_per_entry: find -printf over 3000 files in
indexed (htree) directories, listed in hash order, so that the inodes
are visited out of order: the daemon reads at most 1 KiB from the device
per entry (counted by its own device counters, NX_IOC_GET_OPSTATS), a
second find reads almost nothing, and the kernel asks no lookup per
entry (readdirplus).  The listing equals the tree the image was made
from.  Before the block cache it read 11 KB per entry.

test_sparse_volume_written_and_snapshotted: a 256 GiB sparse volume with
lazily initialised groups (its bitmaps loaded without touching the
uninitialised groups: nx_bitmaps_read) is written in many groups, a
snapshot taken and overwritten; the snapshot keeps its content across a
remount, e2fsck finds nothing (masked while the snapshot exists, plain
after its delete).

Runs once (not per flavour): both concern the block layer under every
flavour alike.
"""

import os
import subprocess

import nxharness as nx
import nxsnap

FILES_PER_DIR = 1000
DIRS = 3


def make_tree(root):
    """{relative path: size} of the tree made under ROOT."""
    want = {}
    for d in range(DIRS):
        os.mkdir(os.path.join(root, 'dir%d' % d))
        want['dir%d' % d] = None
        for f in range(FILES_PER_DIR):
            rel = 'dir%d/file-%05d' % (d, f)
            size = (f * 37) % 700 if f % 3 else 0
            with open(os.path.join(root, rel), 'wb') as fh:
                fh.write(b'%d' % f * size)
            want[rel] = size * len(b'%d' % f)
    return want


def find(path):
    """{relative path: size (None for directories)} listed by find."""
    out = subprocess.run(['find', path, '-mindepth', '1', '-printf',
                          '%y %s %P\\n'], check=True,
                         capture_output=True).stdout.decode()
    got = {}
    for line in out.splitlines():
        kind, size, rel = line.split(' ', 2)
        got[rel] = int(size) if kind == 'f' else None
    got.pop('lost+found', None)
    return got


def device_reads(m):
    """(bytes the daemon has read from the device, its lookups)."""
    st = nx.opstats(m.path)
    return st['device.read_bytes'], st.get('lookup', 0)


class ScaleTest(nx.NxTestCase):

    def test_find_reads_little_per_entry(self):
        tree = os.path.join(self.work, 'tree')
        os.mkdir(tree)
        want = make_tree(tree)
        img = self.make_image('128M', extra=['-d', tree])
        # Index the directories, as the kernel does once they grow.
        nx.run([nx.E2FSCK, '-fyD', img], check=False)
        with self.mounted(img) as m:
            b0, l0 = device_reads(m)
            got = find(m.path)
            b1, l1 = device_reads(m)
            self.assertEqual(got, want)
            entries = len(got)
            per_entry = (b1 - b0) / entries
            print('cold find: %d entries, %.0f bytes read per entry, '
                  '%d lookups' % (entries, per_entry, l1 - l0))
            self.assertLess(per_entry, 1024)
            self.assertLess(l1 - l0, entries / 10)
            self.assertEqual(find(m.path), got)
            b2, _ = device_reads(m)
            print('warm find: %d bytes read' % (b2 - b1))
            self.assertLessEqual(b2 - b1, (b1 - b0) / 10)

    def test_sparse_volume_written_and_snapshotted(self):
        img = self.make_image('256G', extra=[
            '-E', 'lazy_itable_init=1,lazy_journal_init=1'])
        files = {}
        with self.mounted(img, check=False) as m:
            # Directories spread over the groups (Orlov): inodes and
            # blocks in groups that were never initialised.
            for d in range(40):
                os.mkdir(m.p('d%d' % d))
                data = nx.pattern(65536 + d * 4096, seed=d)
                nx.write_file(m.p('d%d' % d, 'f'), data)
                files['d%d/f' % d] = data
            nx.write_file(m.p('big'), nx.pattern(8 << 20, seed=99))
            os.sync()
            os.mkdir(nxsnap.snap_dir(m, 's1'))
            before = nxsnap.snap_manifest(m, 's1')
            for d in range(0, 40, 2):
                nx.write_file(m.p('d%d' % d, 'f'), nx.pattern(70000, 500 + d))
                os.mkdir(m.p('d%d' % d, 'more'))
            nx.write_file(m.p('big'), nx.pattern(8 << 20, seed=98))
            self.assertEqual(nxsnap.snap_manifest(m, 's1'), before)
        rc, out = nxsnap.fsck_masked(img)
        self.assertEqual(rc, 0, out)
        with self.mounted(img) as m:
            self.assertEqual(nxsnap.snap_manifest(m, 's1'), before)
            for rel, data in files.items():
                self.assertEqual(nx.read_file(nxsnap.snap_dir(m, 's1') +
                                              '/' + rel), data)
            os.rmdir(nxsnap.snap_dir(m, 's1'))
            nx.write_file(m.p('after'), nx.pattern(1 << 20, seed=7))


if __name__ == '__main__':
    nx.main()
