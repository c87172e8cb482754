#!/usr/bin/env python3
"""One version everywhere: "nextfs --version", "nextfs version", "nextfs
-V", "nextfs-fuse -V" and "--version", the installed man pages and the
top entry of debian/changelog all name meson's project version
(NEXTFS_PROJECT_VERSION, set by meson from project(version: ...)).
No FUSE mount needed.
"""

import os
import re
import subprocess

import nxharness as nx


def project_version():
    return os.environ.get('NEXTFS_PROJECT_VERSION')


def first_line(argv):
    out = nx.run(argv).stdout
    return out.splitlines()[0] if out else ''


def changelog_version(path):
    """Version of the top entry: "nextfs (VERSION) DIST; urgency=..."."""
    with open(path) as f:
        m = re.match(r'^(\S+) \(([^)]+)\) ', f.readline())
    return m and (m.group(1), m.group(2))


class VersionTest(nx.NxTestCase):

    def setUp(self):
        super().setUp()
        self.version = project_version()
        if not self.version:
            self.skipTest('NEXTFS_PROJECT_VERSION not set (run through '
                          'meson test)')

    def test_commands_print_the_project_version(self):
        tool, daemon = nx.tool_path(), nx.daemon_path()
        want = {
            'nextfs --version': 'nextfs ' + self.version,
            'nextfs version': 'nextfs ' + self.version,
            'nextfs -V': 'nextfs ' + self.version,
            'nextfs-fuse -V': 'nextfs-fuse ' + self.version,
            'nextfs-fuse --version': 'nextfs-fuse ' + self.version,
        }
        got = {
            'nextfs --version': first_line([tool, '--version']),
            'nextfs version': first_line([tool, 'version']),
            'nextfs -V': first_line([tool, '-V']),
            'nextfs-fuse -V': first_line([daemon, '-V']),
            'nextfs-fuse --version': first_line([daemon, '--version']),
        }
        self.assertEqual(got, want)

    def test_help_lists_the_version_command(self):
        out = nx.run([nx.tool_path(), '--help']).stdout
        self.assertRegex(out, r'(?m)^  version\b')

    def test_debian_changelog_agrees(self):
        """dpkg-buildpackage takes the package version from here."""
        got = changelog_version(os.path.join(nx.SRCROOT, 'debian',
                                             'changelog'))
        if got and '-' in got[1]:       # a Debian revision: not ours
            got = (got[0], got[1].rsplit('-', 1)[0])
        self.assertEqual(got, ('nextfs', self.version),
                         'the top entry of debian/changelog must be '
                         '"nextfs (%s) ..." (native package: the version is '
                         "meson's project version)" % self.version)

    def test_man_pages_name_the_version(self):
        build = os.environ.get('NEXTFS_BUILD_ROOT')
        if not build:
            self.skipTest('NEXTFS_BUILD_ROOT not set (run through meson '
                          'test)')
        for page in ('nextfs.1', 'nextfs-fuse.1'):
            with open(os.path.join(build, 'docs', page)) as f:
                th = [line for line in f if line.startswith('.TH ')]
            self.assertEqual(len(th), 1, page)
            self.assertIn('"nextfs %s"' % self.version, th[0], page)


if __name__ == '__main__':
    nx.main(require_fuse=False)
