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
table, unknown features, the error state.  Structured edits go through
debugfs (which keeps checksums valid), checksum damage is a flipped byte.
Standard library only; needs debugfs and mkimages.sh (NEXTFS_MKIMAGES).
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
INCOMPAT_64BIT = 0x80
INCOMPAT_FLEX_BG = 0x200
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
# 'e2fsck', 'truncate', or None where no repair is advised).  same_size:
# usable as a fuzz seed (the image keeps its size).

DAMAGES = []
DAMAGES_BY_NAME = {}


def damage(name, say, ro=True, fix='e2fsck', applies=lambda im: True,
           same_size=True):
    def reg(fn):
        DAMAGES.append(dict(name=name, say=say, ro=ro, fix=fix,
                            applies=applies, make=fn, same_size=same_size))
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
BASES = (('ext4', 'ext4', '136M', ()),
         ('ext3', 'ext3', '136M', ()),
         ('ext2', 'ext2', '12M', ()))


def copy(src, dst):
    """A sparse copy: the images are mostly holes."""
    subprocess.run(['cp', '--sparse=always', src, dst], check=True)
ALSO_ON_OLDER = ('truncated', 'desc-outside', 'orphan-loop',
                 'bitmap-frees-metadata', 'journal-super')


def make_corpus(outdir):
    os.makedirs(outdir, exist_ok=True)
    manifest = {}
    bases = {}
    for key, flavour, size, extra in BASES:
        bases[key] = make_base(os.path.join(outdir, '.base-%s' % key),
                               flavour, size, extra)
    for d in DAMAGES:
        for key, _, _, _ in BASES:
            if key != 'ext4' and d['name'] not in ALSO_ON_OLDER:
                continue
            if not d['applies'](Image(bases[key])):
                continue
            name = '%s-%s' % (key, d['name'])
            path = os.path.join(outdir, name + '.img')
            copy(bases[key], path)
            d['make'](Image(path))
            manifest[name] = dict(say=d['say'], ro=d['ro'], fix=d['fix'],
                                  flavour=key)
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
