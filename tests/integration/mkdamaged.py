#!/usr/bin/env python3
"""mkdamaged.py - make a corpus of damaged ext2/3/4 images (issue 16, P13).

    mkdamaged.py OUTDIR
        Makes its own base images with images/mkimages.sh (ext4 with
        metadata_csum, ext3, ext2) and writes OUTDIR/NAME.img, one per kind
        of damage, plus OUTDIR/manifest.json: for each image what nextfs
        must say (a regular expression of its refusal), whether -o ro must
        still serve it, and which repair the refusal advises.

    mkdamaged.py --same-size BASE.img OUTDIR
        Damages copies of BASE.img with every kind that keeps the image's
        size (a file cut short becomes a superblock claiming more blocks
        than the file has): seeds for the fuzzer (fuzz/mkseeds.sh).

Each kind is what the kernel refuses at mount (ext4_fill_super and what
it calls): truncation, a wrong superblock or group descriptor checksum,
superblock fields out of range, a descriptor pointing outside the volume
or over other metadata, wrong bitmap and inode checksums, a corrupt
journal superblock, an orphan list that loops or starts outside the inode
table, an orphan whose block map cannot be read, unknown features, the
error state - and the damage of the snapshot metadata the engine checks
before it writes (on a base with three snapshots): snapshot maps (extent
header magic, depth, entries, leaves), the list (a loop, a link to an
unused inode, out of id order, a member without the snapshot flag), ids
(zero, shared), the superblock's fields (last id, reserve, active
snapshot, has_snapshot cleared).  Structured edits go through debugfs
(which keeps checksums valid), checksum damage is a flipped byte.
Standard library only; needs debugfs, mkimages.sh (NEXTFS_MKIMAGES) and,
for the snapshot base, the nextfs tool (NEXTFS).
"""

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

import nxsnap

HERE = os.path.dirname(os.path.abspath(__file__))
SRCROOT = os.path.dirname(os.path.dirname(HERE))

SB_OFF = 1024
METADATA_CSUM = 0x400       # RO_COMPAT
RO_COMPAT_HAS_SNAPSHOT = 0x80
INCOMPAT_EXTENTS = 0x40
INCOMPAT_64BIT = 0x80
INCOMPAT_FLEX_BG = 0x200
INCOMPAT_CSUM_SEED = 0x2000
COMPAT_HAS_JOURNAL = 0x4


def debugfs_path():
    return os.environ.get('DEBUGFS') or shutil.which('debugfs') or \
        '/sbin/debugfs'


def mkimages_path():
    return os.environ.get('NEXTFS_MKIMAGES') or \
        os.path.join(SRCROOT, 'images', 'mkimages.sh')


# ------------------------------------------------------------ raw access

class Image:
    """Geometry of an image, read from its superblock and descriptors."""

    def __init__(self, path):
        self.path = path
        sb = self.read(SB_OFF, 1024)
        (self.inodes_count, self.blocks_count) = struct.unpack_from(
            '<II', sb, 0)
        self.first_data_block, self.log_bs = struct.unpack_from(
            '<II', sb, 20)
        self.bs = 1024 << self.log_bs
        self.blocks_per_group, = struct.unpack_from('<I', sb, 32)
        self.inodes_per_group, = struct.unpack_from('<I', sb, 40)
        self.compat, self.incompat, self.ro_compat = struct.unpack_from(
            '<III', sb, 92)
        self.inode_size, = struct.unpack_from('<H', sb, 88)
        self.desc_size = struct.unpack_from('<H', sb, 0xFE)[0] \
            if self.incompat & INCOMPAT_64BIT else 32
        self.csum = bool(self.ro_compat & METADATA_CSUM)
        self.journal = bool(self.compat & COMPAT_HAS_JOURNAL)
        self.gdt = (self.first_data_block + 1) * self.bs

    def read(self, off, n):
        with open(self.path, 'rb') as f:
            f.seek(off)
            return f.read(n)

    def write(self, off, data):
        with open(self.path, 'r+b') as f:
            f.seek(off)
            f.write(data)

    def flip(self, off, mask=0x01):
        b = self.read(off, 1)[0]
        self.write(off, bytes([b ^ mask]))

    def desc(self, g, field):
        """Block of FIELD (0 block bitmap, 4 inode bitmap, 8 inode table)."""
        off = self.gdt + g * self.desc_size
        lo, = struct.unpack_from('<I', self.read(off + field, 4))
        hi = 0
        if self.desc_size >= 64:
            hi, = struct.unpack_from('<I', self.read(off + 0x20 + field, 4))
        return lo | (hi << 32)

    def set_super(self, off, fmt, value):
        """Change a superblock field and keep its checksum right."""
        self.write(SB_OFF + off, struct.pack(fmt, value))
        if self.csum:
            sb = self.read(SB_OFF, 1024)
            self.write(SB_OFF + 0x3FC,
                       struct.pack('<I', nxsnap.crc32c_raw(sb[:0x3FC])))

    def inode_offset(self, ino):
        g, i = divmod(ino - 1, self.inodes_per_group)
        return self.desc(g, 8) * self.bs + i * self.inode_size


def debugfs(path, *requests):
    """Run debugfs -w REQUESTS on PATH; fail on any complaint."""
    p = subprocess.run([debugfs_path(), '-w', '-f', '-', path],
                       input='\n'.join(requests) + '\n', text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    # It echoes each request as "debugfs: ..."; anything else is a complaint.
    bad = [l for l in p.stdout.splitlines()
           if l and not l.startswith('debugfs')]
    if p.returncode or bad:
        raise RuntimeError('debugfs %s: %s' % (requests, p.stdout))


def two_files(path):
    """Inode numbers of two regular files in the root directory."""
    p = subprocess.run([debugfs_path(), '-R', 'ls -l /', path],
                       text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL)
    found = [int(m.group(1)) for m in
             re.finditer(r'^\s*(\d+)\s+100\d{3}\s', p.stdout, re.M)]
    if len(found) < 2:
        raise RuntimeError('%s: fewer than two files in /' % path)
    return found[:2]


def journal_block(path):
    p = subprocess.run([debugfs_path(), '-R', 'bmap <8> 0', path],
                       text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL)
    return int(p.stdout.strip())


# ------------------------------------------------------------ the damages
#
# Each: name, whether it applies to an image, how to make it, and what
# nextfs must do: 'say' (regexp of the refusal), 'ro' (True: -o ro serves
# it; False: refused for reading too), 'fix' (what the refusal advises:
# 'e2fsck', 'nextfs' (check --repair), 'truncate', or None where no repair
# is advised).  same_size: usable as a fuzz seed (the image keeps its
# size).

DAMAGES = []
DAMAGES_BY_NAME = {}


def damage(name, say, ro=True, fix='e2fsck', applies=lambda im: True,
           same_size=True, snaps_ro=None):
    """SNAPS_RO: for damage of the snapshot metadata (made on the 'snap'
    base), how many snapshots -o ro still shows (0: it reads the live
    tree without them)."""
    def reg(fn):
        DAMAGES.append(dict(name=name, say=say, ro=ro, fix=fix,
                            applies=applies, make=fn, same_size=same_size,
                            snaps_ro=snaps_ro))
        DAMAGES_BY_NAME[name] = fn
        return fn
    return reg


def csum(im):
    return im.csum


@damage('truncated', r'the device is .* but the file system on it needs',
        fix='truncate', same_size=False)
def _truncated(im):
    # The tail is lost (a copy cut short), every group's metadata is kept:
    # cut half way between the last inode table's end and the end.
    groups = -(-(im.blocks_count - im.first_data_block) //
               im.blocks_per_group)
    itable = -(-im.inodes_per_group * im.inode_size // im.bs)
    meta_end = max(im.desc(g, 8) + itable for g in range(groups))
    cut = (meta_end + im.blocks_count) // 2 * im.bs
    os.truncate(im.path, cut - cut % 4096)


@damage('blocks-beyond-end', r'the device is .* but the file system on it '
        r'needs', fix='truncate')
def _beyond(im):
    # The same-size form of a truncated image: the superblock claims more
    # blocks than the image has (staying inside the last group).
    im.set_super(4, '<I', im.blocks_count + 8)


@damage('empty', r'is empty \(0 bytes\)', ro=False, fix=None,
        same_size=False)
def _empty(im):
    os.truncate(im.path, 0)


@damage('super-csum', r"the superblock's checksum is wrong", applies=csum)
def _super_csum(im):
    im.flip(SB_OFF + 120)           # s_volume_name[0]


@damage('super-inodes-count', r'corrupt superblock: \d+ inodes, but',
        ro=False)
def _inodes_count(im):
    im.set_super(0, '<I', im.inodes_count + 8)


@damage('super-block-size', r'corrupt superblock: block size', ro=False)
def _block_size(im):
    im.set_super(24, '<I', 9)


@damage('desc-csum', r"group descriptor 0's checksum is wrong",
        applies=csum)
def _desc_csum(im):
    im.flip(im.gdt + 12)            # bg_free_blocks_count_lo


@damage('desc-outside', r"group 0's inode table \(block \d+\) lies outside",
        ro=False)
def _desc_outside(im):
    debugfs(im.path, 'set_bg 0 inode_table %d' % (im.blocks_count + 1000))


@damage('desc-overlap', r"group 0's (block bitmap|inode table) \(block "
        r'\d+\) overlaps other metadata', ro=False)
def _desc_overlap(im):
    debugfs(im.path, 'set_bg 0 block_bitmap %d' % im.desc(0, 8))


@damage('block-bitmap-csum', r"group 0's block bitmap has a wrong checksum",
        applies=csum)
def _bbitmap_csum(im):
    # The last bit of group 0's bitmap: a block that is free (or past the
    # end); flipping it changes the checksum, not the meaning much.
    im.flip(im.desc(0, 0) * im.bs + im.blocks_per_group // 8 - 1, 0x80)


@damage('inode-bitmap-csum', r"group 0's inode bitmap has a wrong checksum",
        applies=csum)
def _ibitmap_csum(im):
    im.flip(im.desc(0, 4) * im.bs + im.inodes_per_group // 8 - 1, 0x80)


@damage('bitmap-frees-metadata', r'the block bitmap shows metadata of group '
        r'0 as free')
def _frees_metadata(im):
    debugfs(im.path, 'freeb %d' % im.desc(0, 8))


@damage('root-inode-csum', r"the root directory's inode has a wrong "
        r'checksum', ro=False, applies=csum)  # the kernel refuses it too
def _root_csum(im):
    im.flip(im.inode_offset(2) + 8)     # i_atime


@damage('journal-super', r'the journal superblock is corrupt',
        applies=lambda im: im.journal)
def _journal_super(im):
    im.flip(journal_block(im.path) * im.bs, 0xff)   # the magic


@damage('orphan-loop', r'the orphan list loops')
def _orphan_loop(im):
    a, b = two_files(im.path)
    debugfs(im.path, 'sif <%d> dtime %d' % (a, b),
            'sif <%d> dtime %d' % (b, a), 'ssv last_orphan %d' % a)


@damage('orphan-outside', r'the orphan list starts at inode \d+, outside')
def _orphan_outside(im):
    im.set_super(232, '<I', im.inodes_count + 100)


@damage('feature-incompat', r'unsupported incompatible feature', ro=False,
        fix=None)
def _feature_incompat(im):
    im.set_super(96, '<I', im.incompat | 0x40000000)


@damage('feature-ro-compat', r'cannot write a volume with feature', fix=None)
def _feature_ro_compat(im):
    im.set_super(100, '<I', im.ro_compat | 0x40000000)


@damage('error-state', r'marked as having errors')
def _error_state(im):
    im.set_super(58, '<H', 0x0003)      # valid | error


@damage('orphan-map', r"orphan inode \d+'s block map is corrupt: its "
        r'extent tree\'s root has a bad magic number',
        applies=lambda im: im.incompat & INCOMPAT_EXTENTS)
def _orphan_map(im):
    # An orphan the mount would free, whose extent tree cannot be read:
    # found before the first write, not half way through freeing it.
    a, _ = two_files(im.path)
    root = struct.unpack_from('<I', im.read(im.inode_offset(a) + 0x28, 4))[0]
    debugfs(im.path, 'sif <%d> links_count 0' % a,
            'sif <%d> block[0] 0x%x' % (a, root ^ 0x1),
            'ssv last_orphan %d' % a)


# ---------------------------------------------- snapshot metadata damage
#
# Made on the 'snap' base: three snapshots taken offline (s1, s2, s3: s3
# is active, each map has an extent block below its root) and a fourth
# taken and deleted (the last id issued, 4, is above s3's).  The engine
# checks all of it before it writes (docs/lifecycle.md): each is refused
# for writing with the advice 'nextfs check --repair', which repairs it.

S_INUM, S_ID, S_RBLOCKS, S_LIST = 0x180, 0x184, 0x188, 0x190


def has_snapshots(im):
    return bool(im.ro_compat & RO_COMPAT_HAS_SNAPSHOT) and \
        len(snapshots(im)) >= 3


def snapshots(im):
    """Snapshot inodes on the list, newest first (stops at a bad link)."""
    ino, out = struct.unpack_from('<I', im.read(SB_OFF + S_LIST, 4))[0], []
    while 0 < ino <= im.inodes_count and ino not in out and len(out) < 16:
        out.append(ino)
        ino = struct.unpack_from('<I', im.read(im.inode_offset(ino) +
                                               0x24, 4))[0]
    return out


def i_block(im, ino, i):
    return struct.unpack_from('<I', im.read(im.inode_offset(ino) + 0x28 +
                                            4 * i, 4))[0]


def snap_debugfs(im, *requests):
    """debugfs -w on a volume with snapshots (it refuses HAS_SNAPSHOT:
    masked while it runs)."""
    im.set_super(100, '<I', im.ro_compat & ~RO_COMPAT_HAS_SNAPSHOT)
    try:
        debugfs(im.path, *requests)
    finally:
        im.set_super(100, '<I', im.ro_compat)


def leaf_block(im, ino):
    """The extent block below a depth-1 root (its first index entry)."""
    return i_block(im, ino, 4) | (i_block(im, ino, 5) & 0xffff) << 32


def rewrite_leaf(im, ino, fn):
    """Change the extent block of INO with FN(bytearray), checksum kept."""
    blk = leaf_block(im, ino)
    data = bytearray(im.read(blk * im.bs, im.bs))
    fn(data)
    if im.csum:
        sb = im.read(SB_OFF, 1024)
        seed = struct.unpack_from('<I', sb, 0x270)[0] \
            if im.incompat & INCOMPAT_CSUM_SEED else \
            nxsnap.crc32c_raw(sb[0x68:0x78])
        gen = im.read(im.inode_offset(ino) + 0x64, 4)
        crc = nxsnap.crc32c_raw(struct.pack('<I', ino), seed)
        crc = nxsnap.crc32c_raw(gen, crc)
        tail = 12 + 12 * struct.unpack_from('<H', data, 4)[0]
        struct.pack_into('<I', data, tail, nxsnap.crc32c_raw(data[:tail],
                                                              crc))
    im.write(blk * im.bs, bytes(data))


def snap_damage(name, say, views=True):
    """VIEWS: -o ro serves the live tree without the snapshots (the
    damage is to what views read, or the superblock says there are none);
    else with all three."""
    return damage(name, say, fix='nextfs', applies=has_snapshots,
                  snaps_ro=0 if views else 3)


@snap_damage('map-magic', r'snapshot inode \d+ \(id 3\) has a corrupt '
             r"block map: its extent tree's root has a bad magic number")
def _snap_map_magic(im):
    s3 = snapshots(im)[0]
    snap_debugfs(im, 'sif <%d> block[0] 0x%x' % (s3, i_block(im, s3, 0) ^ 1))


@snap_damage('map-depth', r'snapshot inode \d+ \(id 3\) has a corrupt '
             r"block map: its extent tree's root has depth 7 \(at most 5\)")
def _snap_map_depth(im):
    s3 = snapshots(im)[0]       # the active snapshot, as in the report
    snap_debugfs(im, 'sif <%d> block[1] 0x00070004' % s3)


@snap_damage('map-entries', r'snapshot inode \d+ \(id 3\) has a '
             r"corrupt block map: its extent tree's root has 5 entries but "
             r'room for 4')
def _snap_map_entries(im):
    s3 = snapshots(im)[0]
    snap_debugfs(im, 'sif <%d> block[0] 0x%x' %
                 (s3, (i_block(im, s3, 0) & 0xffff) | 5 << 16))


@snap_damage('leaf-outside', r'snapshot inode \d+ \(id 1\) has a '
             r'corrupt block map: it maps logical block \d+ to block \d+, '
             r'outside the volume')
def _snap_leaf_outside(im):
    def fn(data):   # the first extent's start, far beyond the end
        struct.pack_into('<I', data, 12 + 8, im.blocks_count + 1000)
    rewrite_leaf(im, snapshots(im)[2], fn)


@snap_damage('leaf-csum', r'snapshot inode \d+ \(id 1\) has a corrupt '
             r'block map: its extent block \d+ has a wrong checksum')
def _snap_leaf_csum(im):
    s1 = snapshots(im)[2]
    im.flip(leaf_block(im, s1) * im.bs + 12 + 4)     # first ee_len


@snap_damage('list-loop', r'the snapshot list loops \(inode \d+ comes '
             r'back\)')
def _snap_list_loop(im):
    s3, _, s1 = snapshots(im)[:3]
    snap_debugfs(im, 'sif <%d> version %d' % (s1, s3))


@snap_damage('list-dangling', r'the snapshot list points at inode \d+, '
             r'which is not a snapshot file \(mode 0, 0 links')
def _snap_list_dangling(im):
    s2 = snapshots(im)[1]
    snap_debugfs(im, 'sif <%d> version %d' % (s2, im.inodes_count - 1))


@snap_damage('list-order', r'the snapshot list is out of id order: '
             r'inode \d+ \(id 3\) is listed as older than inode \d+ '
             r'\(id 2\)')
def _snap_list_order(im):
    # s2 -> s3 -> s1: every link points at a snapshot, the ids say
    # otherwise (take and the checker's relinking go by ids)
    s3, s2, s1 = snapshots(im)[:3]
    snap_debugfs(im, 'sif <%d> version %d' % (s2, s3),
                 'sif <%d> version %d' % (s3, s1))
    im.set_super(S_LIST, '<I', s2)
    im.set_super(S_INUM, '<I', s2)


@snap_damage('id-zero', r'snapshot inode \d+ has id 0')
def _snap_id_zero(im):
    snap_debugfs(im, 'sif <%d> generation 0' % snapshots(im)[1])


@snap_damage('id-duplicate', r'snapshot inodes \d+ and \d+ share id 1')
def _snap_id_duplicate(im):
    snap_debugfs(im, 'sif <%d> generation 1' % snapshots(im)[1])


@snap_damage('last-id', r'the last snapshot id issued \(1\) is below '
             r"the newest snapshot's \(3\)", views=False)
def _snap_last_id(im):
    # take would issue id 2 again: a duplicate in the making
    im.set_super(S_ID, '<I', 1)


@snap_damage('reserve', r'the copy-on-write reserve \(\d+ blocks\) is '
             r'more than an eighth of the volume', views=False)
def _snap_reserve(im):
    im.set_super(S_RBLOCKS, '<Q', im.blocks_count * 2)


@snap_damage('active-not-newest', r"the superblock's active snapshot "
             r'is inode \d+, not the newest snapshot', views=False)
def _snap_active(im):
    im.set_super(S_INUM, '<I', snapshots(im)[1])


@snap_damage('flag', r'the snapshot list points at inode \d+, which '
             r'is not a snapshot file \(.*without the snapshot flag\)')
def _snap_flag(im):
    s2 = snapshots(im)[1]
    flags = struct.unpack_from('<I', im.read(im.inode_offset(s2) + 0x20,
                                             4))[0]
    snap_debugfs(im, 'sif <%d> flags 0x%x' % (s2, flags & ~0x01000000))


@snap_damage('feature-cleared', r'the superblock names snapshot inode '
             r'\d+ but has_snapshot is not set')
def _snap_feature(im):
    # (nothing would copy-on-write for the snapshots it still lists)
    im.set_super(100, '<I', im.ro_compat & ~RO_COMPAT_HAS_SNAPSHOT)


# ------------------------------------------------------------ bases

def make_base(path, flavour, size, extra=()):
    """An image of FLAVOUR with /a, /b and a few more files."""
    with tempfile.TemporaryDirectory() as d:
        for name, n in (('a', 100), ('b', 5000), ('c', 70000)):
            with open(os.path.join(d, name), 'wb') as f:
                f.write(os.urandom(n))
        os.mkdir(os.path.join(d, 'dir'))
        with open(os.path.join(d, 'dir', 'd'), 'w') as f:
            f.write('hello\n')
        subprocess.run(['bash', mkimages_path(), flavour, path, size,
                        '-d', d] + list(extra), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return path


# Which base each damage is made on in the corpus: checksum damage needs
# ext4 (metadata_csum), the rest is also made on ext3 (journal, no
# checksums) and ext2 (1 KiB blocks, no journal) where it applies.  Two
# groups of the usual size each, so that there is a backup superblock
# where e2fsck looks for one when the primary is broken (as on any real
# volume).  Sparse: a few MiB on disk each.
# The 'snap' base (ext4 with snapshots, see above) carries the damage of
# the snapshot metadata, and only that.
BASES = (('ext4', 'ext4', '136M', ()),
         ('ext3', 'ext3', '136M', ()),
         ('ext2', 'ext2', '12M', ()),
         ('snap', 'ext4', '136M', ()))


def copy(src, dst):
    """A sparse copy: the images are mostly holes."""
    subprocess.run(['cp', '--sparse=always', src, dst], check=True)
ALSO_ON_OLDER = ('truncated', 'desc-outside', 'orphan-loop',
                 'bitmap-frees-metadata', 'journal-super')


def nextfs_path():
    return os.environ.get('NEXTFS') or \
        os.path.join(SRCROOT, 'build', 'src', 'cli', 'nextfs')


def take_snapshots(path):
    """s1, s2, s3 and one more taken and deleted, offline (see above)."""
    for args in (('take', 's1'), ('take', 's2'), ('take', 's3'),
                 ('take', 'gone'), ('delete', 'gone')):
        subprocess.run([nextfs_path(), 'snapshot', args[0], path, args[1]],
                       check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return path


def bases_for(d):
    if d['snaps_ro'] is not None:
        return ('snap',)
    if d['name'] in ALSO_ON_OLDER:
        return ('ext4', 'ext3', 'ext2')
    return ('ext4',)


def make_corpus(outdir):
    os.makedirs(outdir, exist_ok=True)
    manifest = {}
    bases = {}
    for key, flavour, size, extra in BASES:
        bases[key] = make_base(os.path.join(outdir, '.base-%s' % key),
                               flavour, size, extra)
    take_snapshots(bases['snap'])
    for d in DAMAGES:
        for key in bases_for(d):
            if not d['applies'](Image(bases[key])):
                continue
            name = '%s-%s' % (key, d['name'])
            path = os.path.join(outdir, name + '.img')
            copy(bases[key], path)
            d['make'](Image(path))
            manifest[name] = dict(say=d['say'], ro=d['ro'], fix=d['fix'],
                                  flavour=key, snaps_ro=d['snaps_ro'])
    for path in bases.values():
        os.unlink(path)
    with open(os.path.join(outdir, 'manifest.json'), 'w') as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    return manifest


def make_seeds(base, outdir):
    """Same-size damages of BASE (those that apply), for the fuzzer."""
    os.makedirs(outdir, exist_ok=True)
    made = []
    stem = os.path.splitext(os.path.basename(base))[0]
    for d in DAMAGES:
        if not d['same_size'] or not d['applies'](Image(base)):
            continue
        path = os.path.join(outdir, '%s-%s.img' % (stem, d['name']))
        copy(base, path)
        try:
            d['make'](Image(path))
        except RuntimeError:
            os.unlink(path)     # e.g. no /a and /b in this base
            continue
        made.append(path)
    return made


def main(argv):
    if len(argv) == 2:
        for name in sorted(make_corpus(argv[1])):
            print(name)
        return 0
    if len(argv) == 4 and argv[1] == '--same-size':
        for path in make_seeds(argv[2], argv[3]):
            print(path)
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
