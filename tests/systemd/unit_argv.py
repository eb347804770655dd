#!/usr/bin/env python3
"""Prints, NUL-separated, the command line systemd would run for the
ExecStart= of a unit file: continuation lines joined, ${VAR} substituted
within its word and a lone $VAR split on white space (systemd.service
"Command lines"), with the variables of the EnvironmentFile= and %d
(credentials directory), %L (logs directory), %S (state directory) and
%% expanded.

  unit_argv.py UNIT ENV_FILE CREDENTIALS_DIR LOGS_DIR [VAR=VALUE...]

VAR=VALUE pairs override the environment file. Exits 1 with one line on
stderr for what it cannot expand (an unknown variable or specifier)."""
import re
import shlex
import sys


def die(msg):
    print("unit_argv: " + msg, file=sys.stderr)
    sys.exit(1)


def exec_start(path):
    text = open(path, encoding="utf-8").read().replace("\\\n", " ")
    section, found = None, []
    for line in text.split("\n"):
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and line.startswith("ExecStart="):
            found.append(line[len("ExecStart="):])
    if len(found) != 1:
        die("%s: %d ExecStart= lines in [Service], expected 1" %
            (path, len(found)))
    return found[0]


def env_file(path):
    env = {}
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        key, eq, value = line.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            die("%s:%d: not VAR=VALUE: %r" % (path, n, line))
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        env[key] = value
    return env


def main(argv):
    if len(argv) < 6:
        die("usage: unit_argv.py UNIT ENV_FILE CREDENTIALS_DIR LOGS_DIR "
            "STATE_DIR [VAR=VALUE...]")
    env = env_file(argv[2])
    for pair in argv[6:]:
        key, _, value = pair.partition("=")
        env[key] = value
    spec = {"d": argv[3], "L": argv[4], "S": argv[5], "%": "%"}

    def specifier(m):
        if m.group(1) not in spec:
            die("specifier %%%s is not one this test knows" % m.group(1))
        return spec[m.group(1)]

    def var(name):
        if name not in env:
            die("$%s is not set by the environment file" % name)
        return env[name]

    out = []
    for word in shlex.split(exec_start(argv[1])):
        word = re.sub(r"%(.)", specifier, word)
        lone = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if lone:
            out.extend(var(lone.group(1)).split())
            continue
        out.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}",
                          lambda m: var(m.group(1)), word))
    sys.stdout.write("".join(w + "\0" for w in out))


if __name__ == "__main__":
    main(sys.argv)
