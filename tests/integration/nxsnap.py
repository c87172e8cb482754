"""nxsnap - snapshot helpers for the integration tests.

fsck_masked(): stock e2fsck refuses RO_COMPAT_HAS_SNAPSHOT, so while
snapshots exist the oracle is "e2fsck -fn" on a sparse copy of the image
with that bit cleared (and the superblock checksum recomputed).
"""

import os
import shutil
import struct
import subprocess
import tempfile

import nxharness as nx

SB_OFFSET = 1024
RO_COMPAT_OFF = 0x64
RO_COMPAT_HAS_SNAPSHOT = 0x0080
RO_COMPAT_METADATA_CSUM = 0x0400
CHECKSUM_OFF = 0x3FC


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c_raw(data, crc=0xFFFFFFFF):
    """ext4's crc32c: no final inversion (ext2fs_crc32c_le(~0, ...))."""
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


def has_snapshot_flag(image):
    with open(image, 'rb') as f:
        f.seek(SB_OFFSET)
        sb = f.read(1024)
    return bool(struct.unpack_from('<I', sb, RO_COMPAT_OFF)[0] &
                RO_COMPAT_HAS_SNAPSHOT)


def masked_copy(image, dest):
    subprocess.run(['cp', '--sparse=always', image, dest], check=True)
    with open(dest, 'r+b') as f:
        f.seek(SB_OFFSET)
        sb = bytearray(f.read(1024))
        ro = struct.unpack_from('<I', sb, RO_COMPAT_OFF)[0]
        struct.pack_into('<I', sb, RO_COMPAT_OFF, ro & ~RO_COMPAT_HAS_SNAPSHOT)
        if ro & RO_COMPAT_METADATA_CSUM:
            struct.pack_into('<I', sb, CHECKSUM_OFF,
                             crc32c_raw(bytes(sb[:CHECKSUM_OFF])))
        f.seek(SB_OFFSET)
        f.write(sb)


def fsck_masked(image):
    """(exit status, output) of e2fsck -fn on a masked copy of IMAGE."""
    d = tempfile.mkdtemp(prefix='masked.', dir=os.path.dirname(image))
    try:
        copy = os.path.join(d, 'masked.img')
        masked_copy(image, copy)
        return nx.fsck(copy)
    finally:
        shutil.rmtree(d, True)


def snap_dir(m, name=None):
    return m.p('.snapshots', name) if name else m.p('.snapshots')


# What manifests of a mounted tree leave out: not file system content.
SKIP = ('lost+found', '.snapshots')


def snap_manifest(m, name):
    """Manifest of a snapshot, minus the root's mtime.

    .snapshots/NAME shows the take time as its mtime (so that ls -lt
    sorts snapshots); the snapshot tests check that separately.
    """
    man = nx.tree_state(snap_dir(m, name), skip_top=SKIP)
    man['.'].pop('mtime_ns', None)
    return man


def without_root_mtime(man):
    man = dict(man)
    man['.'] = dict(man['.'])
    man['.'].pop('mtime_ns', None)
    return man
