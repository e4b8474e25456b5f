#!/usr/bin/env python3
"""Checks the README's flag tables against the programs' --help.

usage: readme_flags.py BIN_DIR README.md
       readme_flags.py --references SOURCE_DIR README.md

For each program, the flags its --help lists (rows starting "  --NAME" or
"  --[no-]NAME" in a "flags:" block) must equal the flags of its tables in the
README: every table whose header starts with "| flag" in the section that
starts at the heading naming the program (see PROGRAMS), up to the next "## "
heading. A row may name several flags ("`--tls-cert F` / `--tls-key F`"):
every --name in the row's first cell before a "(" counts (what follows in
parentheses says which commands take it).

baton has commands and subcommands: the checker walks them from `baton --help`
(the "commands:" block), each command's help (its usage lines "baton CMD SUB"
and "a|b|c" lists, and its indented "SUB  description" rows when it has no
flags of its own), and every "'baton ... --help'" hint in a help text (such as
`baton generate --edge ADDR --help`, run with placeholders filled in). A flag of
any command counts as documented when one of the CLI section's tables lists
it (once, with the commands that take it).

--help and --version are every program's and are not listed in the tables.
Exit 0 when every table matches; else 1 with one line per flag: where it is
missing and where it was found (which --help, or which README table).

--references: the README must name no file outside the repository (a path
starting "../" or "/work/") and every repository path it names in backticks or
a link (starting with a top-level folder of the repository) must exist.
"""

import concurrent.futures
import glob
import os
import re
import subprocess
import sys

# (program, the README heading that starts its section)
PROGRAMS = [
    ("baton-prefill", "## The cloud service: `baton-prefill`"),
    ("baton-edge", "## The edge agent: `baton-edge`"),
    ("baton", "## The CLI: `baton`"),
]
UNIVERSAL = {"help", "version"}
FLAG_ROW = re.compile(r"^  --(?:\[no-\])?([a-z0-9][a-z0-9-]*)")
PLACEHOLDERS = {"ADDR": "127.0.0.1:1", "FILE": "/dev/null", "ID": "x", "N": "1"}


def run_help(bin_dir, argv):
    """stdout + stderr of BIN/argv[0] argv[1:] --help (never fails)."""
    try:
        done = subprocess.run([f"{bin_dir}/{argv[0]}", *argv[1:], "--help"], capture_output=True, text=True,
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"(could not run: {error})"
    return done.stdout + done.stderr


def help_flags(text):
    return {m.group(1) for line in text.splitlines() if (m := FLAG_ROW.match(line))} - UNIVERSAL


def subcommands(command, text):
    """Subcommands a command's help names: usage "baton CMD SUB", "a|b|c" lists,
    and (without flags of its own) indented "SUB  description" rows."""
    found = []
    for m in re.finditer(rf"baton {re.escape(command)} ([a-z][a-z0-9|-]*)", text):
        found += m.group(1).split("|")
    if not help_flags(text):
        found += [m.group(1) for line in text.splitlines() if (m := re.match(r"^  ([a-z][a-z0-9-]*)\s", line))]
    return [word for word in dict.fromkeys(found) if word != command]


def help_hints(text):
    """Argument lists of the "'baton ... --help'" hints in a help text, with
    ADDR/FILE placeholders filled in; hints with other placeholders (COMMAND,
    ACTION: covered by the subcommand walk) are left out."""
    hints = []
    for m in re.finditer(r"'baton ([^']*?) --help'", text):
        words = m.group(1).split()
        if any(w.isupper() and w not in PLACEHOLDERS for w in words):
            continue
        hints.append([PLACEHOLDERS.get(w, w) for w in words])
    return hints


def cli_flags(bin_dir):
    """{flag: [the 'baton ...' help that lists it]} over every command. The
    help texts of one level run at once (a start of baton maps large shared
    libraries: seconds each on a busy machine)."""
    top = run_help(bin_dir, ["baton"])
    commands = re.search(r"commands:\n((?:  .*\n|\s+.*\n)+)", top + "\n")
    if not commands:
        sys.exit("readme_flags: no 'commands:' block in 'baton --help'")
    level = [[m.group(1)] for line in commands.group(1).splitlines() if (m := re.match(r"^  ([a-z][a-z0-9-]*)\s", line))]
    flags = {}
    seen = set()
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        for _ in range(4):  # command, action, and the hints of either
            level = [argv for argv in level if " ".join(argv) not in seen]
            seen.update(" ".join(argv) for argv in level)
            texts = list(pool.map(lambda argv: run_help(bin_dir, ["baton", *argv]), level))
            next_level = []
            for argv, text in zip(level, texts):
                for flag in help_flags(text):
                    flags.setdefault(flag, []).append("baton " + " ".join(argv))
                next_level += help_hints(text)
                if len(argv) == 1:
                    next_level += [[argv[0], sub] for sub in subcommands(argv[0], text)]
            level = next_level
    return flags


def readme_table_flags(readme, heading):
    """The flags of every "| flag ..." table in the section that starts at
    `heading` (up to the next "## " heading), or None when it has none. Only
    the part of a row's first cell before a "(" counts, so a cell such as
    "`--ca F` (every `--edge` command)" names --ca alone."""
    start = readme.find(heading + "\n")
    if start < 0:
        return None
    flags = set()
    tables = 0
    in_table = False
    for line in readme[start + len(heading):].splitlines():
        if line.startswith("## "):
            break
        if not line.startswith("|"):
            in_table = False
            continue
        if not in_table:
            in_table = line.startswith("| flag")
            tables += in_table
            continue
        first_cell = line.split("|")[1].split("(")[0]
        flags |= set(re.findall(r"--(?:\[no-\])?([a-z0-9][a-z0-9-]*)", first_cell))
    return flags - UNIVERSAL if tables else None


def check_references(source_dir, readme):
    """Problems with the paths the README names (see --references)."""
    problems = []
    tops = tuple(f"{entry}/" for entry in os.listdir(source_dir)
                 if os.path.isdir(os.path.join(source_dir, entry)) and not entry.startswith(".") and entry != "build")
    for m in re.finditer(r"`([^`\s]+)`|\]\(([^)\s]+)\)", readme):
        path = m.group(1) or m.group(2)
        if path.startswith(("../", "/work/")):
            problems.append(f"'{path}' is outside the repository (a reader of the repository does not have it)")
        elif path.startswith(tops) and not glob.glob(os.path.join(source_dir, path)):
            problems.append(f"'{path}' does not exist in the repository")
    return problems


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--references":
        problems = check_references(sys.argv[2], open(sys.argv[3], encoding="utf-8").read())
        for problem in problems:
            print("README:", problem)
        return 1 if problems else 0
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    bin_dir, readme_path = sys.argv[1], sys.argv[2]
    readme = open(readme_path, encoding="utf-8").read()
    problems = []
    for program, heading in PROGRAMS:
        table = readme_table_flags(readme, heading)
        if table is None:
            problems.append(f"{program}: no flag table (a '| flag ...' header) under '{heading}' in the README")
            continue
        if program == "baton":
            in_help = cli_flags(bin_dir)
        else:
            in_help = {flag: [program] for flag in help_flags(run_help(bin_dir, [program]))}
        if not in_help:
            problems.append(f"{program}: --help lists no flags (is {bin_dir}/{program} built?)")
            continue
        for flag in sorted(set(in_help) - table):
            where = ", ".join(f"'{h} --help'" for h in in_help[flag][:3])
            problems.append(f"{program}: --{flag} (in {where}) is missing from the README's table under '{heading}'")
        for flag in sorted(table - set(in_help)):
            problems.append(f"{program}: --{flag} is in the README's table under '{heading}' but in no --help "
                            f"of {program} (a removed or renamed flag?)")
        print(f"{program}: {len(in_help)} flags in --help, {len(table)} in the README table")
    for problem in problems:
        print("MISMATCH:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
