"""tensorcompute-server --help: every flag of server/main.cc (as Abseil's --helpfull lists them),
once, in a named group, with its default; exit 0."""

import os
import re
import subprocess
import unittest

GROUPS = ("Listeners and shutdown", "Limits", "Batching and the CPU", "Devices", "Security",
          "Tables", "Sharding", "Logging")


def run_server(*args):
    return subprocess.run([os.environ["TC_SERVER_BINARY"], *args], capture_output=True,
                          text=True, timeout=30)


def main_cc_flags():
    """{name: default} of the flags Abseil's --helpfull lists under server/main.cc."""
    text = run_server("--helpfull").stdout
    section = re.search(r"Flags from \S*server/main\.cc:\n(.*?)(?:\n\n|\Z)", text, re.S)
    assert section, text
    flags = {}
    for entry in re.split(r"\n    (?=--)", "\n" + section.group(1)):
        match = re.match(r"\s*--(\w+) .*default: (.*);\s*$", entry, re.S)
        if match:
            flags[match.group(1)] = match.group(2).strip().strip('"')
    return flags


class ServerHelpTest(unittest.TestCase):
    def test_help_lists_every_flag_once_in_a_named_group_with_its_default(self):
        expected = main_cc_flags()
        self.assertGreater(len(expected), 40)
        result = run_server("--help")
        self.assertEqual(result.returncode, 0, result.stderr)
        out = result.stdout
        self.assertNotIn("No flags matched", out)
        self.assertNotIn("(no such flag)", out)
        self.assertNotIn("\nOther:\n", out)  # every flag is in a named group
        for title in GROUPS:
            self.assertRegex(out, rf"\n{re.escape(title)}[^\n]*:\n", title)
        listed = re.findall(r"^  --(\w+) \(default: (.*)\)$", out, re.M)
        self.assertEqual(sorted(name for name, _ in listed), sorted(expected))
        for name, default in listed:
            self.assertEqual(default.strip('"'), expected[name], name)

    def test_help_is_the_same_short_or_long_and_starts_nothing(self):
        # "-help" as Abseil accepts it; neither listens nor logs.
        long, short = run_server("--help"), run_server("-help")
        self.assertEqual(long.stdout, short.stdout)
        self.assertEqual(short.returncode, 0)
        self.assertEqual(long.stderr, "")


if __name__ == "__main__":
    unittest.main()
