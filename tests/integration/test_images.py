#!/usr/bin/env python3
"""images/mkimages.sh makes exactly the feature sets the tests rely on,
whatever the host's /etc/mke2fs.conf says, and a clean demo image.
No FUSE mount needed.
"""

import os
import re
import subprocess

import nxharness as nx

BASE = {'ext_attr', 'resize_inode', 'dir_index', 'filetype',
        'sparse_super', 'large_file'}
EXT4 = BASE | {'has_journal', 'extent', 'huge_file', 'flex_bg',
               'metadata_csum', '64bit', 'dir_nlink', 'extra_isize'}
EXPECT = {
    'ext2': (BASE, 1024),
    'ext3': (BASE | {'has_journal'}, 4096),
    'ext4': (EXT4, 4096),
    'ext4-inline': (EXT4 | {'inline_data'}, 4096),
}

# A host configuration that would change everything if it leaked through.
HOSTILE_CONF = """[defaults]
	base_features = sparse_super,large_file,filetype,ext_attr,orphan_file
	default_mntopts = nodelalloc
	blocksize = 1024
	inode_size = 128
	inode_ratio = 65536
	hash_alg = tea
[fs_types]
	ext3 = {
		features = has_journal,quota
	}
	ext4 = {
		features = has_journal,extent,bigalloc,quota,project,encrypt
		inode_size = 1024
	}
"""


def superblock(img):
    out = nx.run(['dumpe2fs', '-h', img], stderr=subprocess.DEVNULL).stdout
    sb = {}
    for line in out.splitlines():
        if ':' in line:
            k, v = line.split(':', 1)
            sb[k.strip()] = v.strip()
    return sb


class ImagesTest(nx.NxTestCase):

    def check_flavour(self, flavour, env=None):
        img = os.path.join(self.work, flavour + '.img')
        nx.run(['bash', nx.mkimages_path(), flavour, img, '64M'], env=env)
        sb = superblock(img)
        features, bsize = EXPECT[flavour]
        self.assertEqual(set(sb['Filesystem features'].split()), features,
                         flavour)
        self.assertEqual(int(sb['Block size']), bsize)
        self.assertEqual(int(sb['Inode size']), 256)
        self.assertEqual(int(sb['Inode count']), 64 * 1024 * 1024 // 4096)
        self.assertEqual(sb['Default directory hash'], 'half_md4')
        listed = nx.run(['bash', nx.mkimages_path(), '--features',
                         flavour]).stdout.strip()
        self.assertEqual(set(listed.split(',')), features)
        rc, out = nx.fsck(img)
        self.assertEqual(rc, 0, out)
        os.unlink(img)

    def test_flavours(self):
        for flavour in nx.FLAVOURS:
            self.check_flavour(flavour)

    def test_independent_of_host_config(self):
        conf = os.path.join(self.work, 'mke2fs.conf')
        with open(conf, 'w') as f:
            f.write(HOSTILE_CONF)
        env = dict(os.environ, MKE2FS_CONFIG=conf)
        for flavour in nx.FLAVOURS:
            self.check_flavour(flavour, env)

    def test_extra_mke2fs_arguments(self):
        img = os.path.join(self.work, 'x.img')
        nx.run(['bash', nx.mkimages_path(), 'ext2', img, '8M', '-N', '64',
                '-L', 'extra'])
        sb = superblock(img)
        self.assertEqual(sb['Filesystem volume name'], 'extra')
        self.assertLess(int(sb['Inode count']), 200)

    def test_demo_image(self):
        img = os.path.join(self.work, 'demo.img')
        nx.run(['bash', nx.mkimages_path(), 'demo', img])
        self.assertEqual(os.stat(img).st_size, 64 * 1024 * 1024)
        sb = superblock(img)
        self.assertEqual(set(sb['Filesystem features'].split()), EXT4)
        rc, out = nx.fsck(img)
        self.assertEqual(rc, 0, out)
        listing = nx.debugfs(img, 'ls -l /')
        for name in ('README.txt', 'docs', 'src', 'photos', 'many',
                     'sparse.bin', 'latest-chapter'):
            self.assertTrue(re.search(r'\s%s\s*$' % re.escape(name),
                                      listing, re.M), name)
        self.assertIn(b'Welcome to nextfs',
                      nx.debugfs_cat(img, '/README.txt'))
        root = nx.debugfs(img, 'stat /')
        self.assertIn('User: %5d' % os.getuid(), root)

    def root_owner(self, img):
        m = re.search(r'User:\s*(\d+)\s+Group:\s*(\d+)',
                      nx.debugfs(img, 'stat /'))
        return (int(m.group(1)), int(m.group(2)))

    def test_root_directory_belongs_to_the_caller(self):
        """What README's unprivileged use needs: a normal user's image has
        that user as the owner of "/", in every flavour."""
        self.need_root()
        uid, gid = nx.NOBODY_UID, nx.NOGROUP_GID
        udir = os.path.join(self.work, 'user')
        os.mkdir(udir)
        os.chown(udir, uid, gid)

        def mkimage(name, *args):
            img = os.path.join(udir, name)
            nx.run(nx.as_user_argv(uid, gid) +
                   ['bash', nx.mkimages_path()] + [a.format(img=img)
                                                  for a in args])
            return img

        for flavour in nx.FLAVOURS:
            img = mkimage(flavour + '.img', flavour, '{img}', '16M')
            self.assertEqual(self.root_owner(img), (uid, gid), flavour)
        self.assertEqual(self.root_owner(mkimage('demo.img', 'demo',
                                                 '{img}')), (uid, gid))
        # an -E of the caller's is merged, not lost (mke2fs keeps the last)
        img = mkimage('e.img', 'ext4', '{img}', '16M', '-E',
                      'lazy_itable_init=1')
        self.assertEqual(self.root_owner(img), (uid, gid))
        img = mkimage('e2.img', 'ext2', '{img}', '16M', '-Elazy_itable_init=1')
        self.assertEqual(self.root_owner(img), (uid, gid))
        # ... and an explicit root_owner wins
        img = mkimage('o.img', 'ext4', '{img}', '16M', '-E',
                      'root_owner=7:8')
        self.assertEqual(self.root_owner(img), (7, 8))
        for f in os.listdir(udir):
            rc, out = nx.fsck(os.path.join(udir, f))
            self.assertEqual(rc, 0, out)


if __name__ == '__main__':
    nx.main(require_fuse=False)
