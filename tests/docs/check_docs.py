#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The manual against the code (python3, standard library only).

  a. every key of the configuration table in src/config/config_keys.c (section,
     key, default) is in doc/configuration.md and in doc/spoa-ratelimit.ini.5
     with the same default, and neither documents a key the code lacks;
  b. every option of the agent's command line (the option table in
     src/main.c, and `--help` when a built agent is at hand) is in
     doc/spoa-ratelimit.8, and every option of spoa-sim and spoa-bench in
     their pages;
  c. every relative link of every Markdown file in the tree resolves to a
     file, and every #anchor to a heading of its page (GitHub's slugs);
  d. the Redis scripts: no Lua helper (`local function NAME`, `local NAME =
     function` or `= setmetatable`) is defined in two tracked .lua files (the
     scripts share them through lua/lib/, included at build time by
     lua/assemble.sh), every script of the registry lua/scripts.am has its
     source lua/src/NAME.lua and a row in lua/README.md's table, and neither
     lists one the registry lacks.

Exit 0 when all hold; else one line per problem on stderr, then exit 1.
Usage: check_docs.py [SRCDIR] [AGENT]  (default: the tree this file is in;
AGENT, or $AGENT, or src/spoa-ratelimit under the current directory when it
exists: its --help is checked too)."""
import os
import re
import subprocess
import sys

TOP = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                      os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SECTIONS = {"AGENT": "agent", "REDIS": "redis", "LEASE": "lease", "FALLBACK": "fallback",
            "RULES": "rules", "GLOBAL": "global", "RULE": "rule"}
problems = []


def fail(msg):
    problems.append(msg)


def read(rel):
    with open(os.path.join(TOP, rel), encoding="utf-8") as f:
        return f.read()


def src_files(ext):
    for d, dirs, files in os.walk(os.path.join(TOP, "src")):
        for name in files:
            if name.endswith(ext):
                yield os.path.join(d, name)


def macros():
    """Every object-like #define of src/ with a number or string value."""
    out = {}
    for path in list(src_files(".h")) + list(src_files(".c")):
        with open(path, encoding="utf-8", errors="replace") as f:
            for m in re.finditer(r'(?m)^#define (\w+) ("[^"]*"|[0-9][0-9.]*[uUlL]*)\b', f.read()):
                out[m.group(1)] = m.group(2)
    return out


# ---- a. configuration keys and defaults ------------------------------------------

def duration(ms):
    for unit, n in (("d", 86400000), ("h", 3600000), ("m", 60000), ("s", 1000)):
        if ms >= n and ms % n == 0:
            return "%d%s" % (ms // n, unit)
    return "%dms" % ms


def code_keys():
    """[(section, key, type, field)] from key_defs, and {(section, key): [defaults]}:
    the spellings a document may use for the default, or None when the
    default is not a constant (the CPUs, a rule's rate ...)."""
    text = read("src/config/config_load.c")
    table = read("src/config/config_keys.c").split("key_defs[] = {", 1)[1].split("\n};", 1)[0]
    keys = []
    for m in re.finditer(r'\{SEC_(\w+), "(\w+)", (T_\w+), (?:([CR])F\((\w+)\))?', table):
        keys.append((SECTIONS[m.group(1)], m.group(2), m.group(3), m.group(4), m.group(5)))
    if len(keys) < 30:
        fail("src/config/config_keys.c: key_defs not found or too short (%d keys)" % len(keys))
    defs = macros()
    assigned = {}
    body = text.split("static struct config *config_new(", 1)[1].split("\n}\n", 1)[0]
    for m in re.finditer(r'cfg->(\w+) = (?:strdup\()?([^;]+?)\)?;', body):
        assigned[("C", m.group(1))] = m.group(2).strip()
    cidrs = {}
    for m in re.finditer(r'net_cidr_parse\("([^"]+)", &cfg->(\w+)\[', body):
        cidrs.setdefault(m.group(2), []).append(m.group(1))
    for m in re.finditer(r'(?m)^\s+r->(\w+) = ([A-Z_0-9]+|\d+);', text):
        assigned[("R", m.group(1))] = m.group(2)

    def value(kind, expr):
        if expr == "CFG_SHARE_AUTO":
            return ["auto"]
        expr = defs.get(expr, expr)
        expr = re.sub(r"[uUlL]+$", "", expr)
        if expr.startswith('"'):
            return [expr.strip('"')]
        if kind == "T_BOOL":
            return ["no", "off"] if expr == "0" else ["yes", "on"] if expr == "1" else None
        if kind == "T_DUR" and re.fullmatch(r"\d+", expr):
            return [duration(int(expr))]
        if re.fullmatch(r"[0-9][0-9.]*", expr):
            return [expr]
        m = re.fullmatch(r"(?:LOG_LVL|DOWN|ALGO|BUCKET|SCOPE)_(\w+)", expr)
        if m:
            return [m.group(1).lower().replace("_", "-")]
        return None

    defaults = {}
    for sec, key, kind, where, field in keys:
        d = None
        if field and field in cidrs:
            d = [", ".join(cidrs[field])]
        elif field and (where, field) in assigned:
            d = value(kind, assigned[(where, field)])
        elif kind == "T_BOOL":
            d = ["no", "off"]  # calloc'd
        defaults[(sec, key)] = d
    return keys, defaults


def norm(s):
    """A default as written in a doc: no markup, no thousands separators."""
    s = s.replace("\\-", "-").replace("\\fB", "").replace("\\fR", "").replace("\\fI", "")
    s = s.replace("`", "").replace("*", "")
    return re.sub(r"(?<=\d),(?=\d{3}\b)", "", s)


def has_default(text, choices):
    t = norm(text)
    return any(re.search(r"(?<![\w.:/-])" + re.escape(c) + r"(?![\w/])", t) for c in choices)


def md_keys():
    """{(section, key): default cell} from doc/configuration.md's key tables."""
    out = {}
    sec = None
    fence = False
    for n, line in enumerate(read("doc/configuration.md").splitlines(), 1):
        if line.startswith("```"):
            fence = not fence
        if fence:
            continue
        m = re.match(r"#+ .*`\[(\w+)(?::NAME)?\]`", line)
        if m:
            sec = m.group(1)
            continue
        if line.startswith("#"):
            sec = None
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if sec in SECTIONS.values() and len(cells) >= 3 and cells[0].startswith("`"):
            for key in re.findall(r"`(\w+)`", cells[0]):
                if (sec, key) in out:
                    fail("doc/configuration.md:%d: [%s] %s documented twice" % (n, sec, key))
                out[(sec, key)] = cells[1]
    return out


def man_keys():
    """{(section, key): entry text} from doc/spoa-ratelimit.ini.5."""
    out = {}
    sec = None
    lines = read("doc/spoa-ratelimit.ini.5").splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"\.SH \[(\w+)(?::NAME)?\]", line)
        if m:
            sec = m.group(1)
        elif line.startswith(".SH"):
            sec = None
        elif line == ".TP" and sec and i + 1 < len(lines):
            head = lines[i + 1]
            body = []
            j = i + 2
            while j < len(lines) and not re.match(r"\.(TP|SH|PP)\b", lines[j]):
                body.append(lines[j])
                j += 1
            keys = re.findall(r"[a-z_]+", re.sub(r'^\.B[RI]? ', "", head).replace('", "', " "))
            for key in keys:
                out[(sec, key)] = " ".join(body)
        i += 1
    return out


def check_config():
    keys, defaults = code_keys()
    md, man = md_keys(), man_keys()
    for where, docs in (("doc/configuration.md", md), ("doc/spoa-ratelimit.ini.5", man)):
        for sec, key, *_ in keys:
            if (sec, key) not in docs:
                fail("%s: [%s] %s is a key of src/config/config_keys.c, not documented" %
                     (where, sec, key))
                continue
            want = defaults[(sec, key)]
            if want is None:
                continue
            text = docs[(sec, key)]
            if where.endswith(".5"):
                m = re.search(r"Default:?\s+(.*?)(?:\.\s|\.$|;|$)", text)
                text = m.group(1) if m else ""
            if not has_default(text, want):
                fail("%s: [%s] %s: the default should be %s (src/config/config_load.c), "
                     "the doc says %r" % (where, sec, key, " or ".join(want), text[:80]))
        code = {(s, k) for s, k, *_ in keys}
        for sec, key in sorted(set(docs) - code):
            fail("%s: [%s] %s is documented, but src/config/config_load.c has no such key" %
                 (where, sec, key))


# ---- b. command-line options ------------------------------------------------------

def check_options():
    opts = set()
    table = read("src/main.c").split("struct option opts[] = {", 1)[1].split("};", 1)[0]
    for m in re.finditer(r'\{"([\w-]+)", \w+, NULL, \'(\w)\'\}', table):
        opts.add("--" + m.group(1))
        opts.add("-" + m.group(2))
    if len(opts) < 4:
        fail("src/main.c: option table not found")
    agent = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("AGENT", "src/spoa-ratelimit")
    if os.access(agent, os.X_OK):
        out = subprocess.run([agent, "--help"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, universal_newlines=True).stdout
        found = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", out))
        if not found:
            fail("%s --help printed no option" % agent)
        opts |= found
    in_man("doc/spoa-ratelimit.8", opts, "src/main.c or --help")
    # the tools: spoa-sim's long options, spoa-bench's getopt letters
    sim = read("src/tools/sim.c").split("struct option opts[] = {", 1)[1].split("};", 1)[0]
    opts = {"--" + m for m in re.findall(r'\{"([\w-]+)", [01], 0, ', sim)}
    if len(opts) < 20:
        fail("src/tools/sim.c: option table not found")
    in_man("doc/spoa-sim.1", opts, "src/tools/sim.c")
    # spoa-sim's defaults for the settings it shares with the agent
    _, defaults = code_keys()
    shared = {"interval": ("lease", "interval"), "ttl": ("lease", "ttl"),
              "max_fraction": ("lease", "max_fraction"),
              "rate_leases": ("lease", "rate_leases"), "timeout": ("redis", "timeout")}
    for field, value in re.findall(r'\.(\w+) = "([^"]*)"', read("src/tools/sim.c")):
        want = defaults.get(shared.get(field))
        if field in shared and want and value not in want:
            fail("src/tools/sim.c: spoa-sim's default %s = %s, the agent's [%s] %s is %s" %
                 (field, value, shared[field][0], shared[field][1], " or ".join(want)))
    m = re.search(r'getopt_long\(argc, argv, "([\w:]+)"', read("src/tools/bench.c"))
    if not m:
        fail("src/tools/bench.c: getopt string not found")
    else:
        in_man("doc/spoa-bench.1", {"-" + c for c in m.group(1).replace(":", "")},
               "src/tools/bench.c")


def in_man(page, opts, source):
    man = read(page).replace("\\-", "-").replace("\\fR", " ").replace("\\fP", " ")
    man = re.sub(r'"', " ", man)
    for opt in sorted(opts):
        if not re.search(r"(?<![\w-])" + re.escape(opt) + r"(?![\w-])", man):
            fail("%s: option %s (%s) is not documented" % (page, opt, source))


# ---- c. relative links ------------------------------------------------------------

def markdown_files():
    try:
        out = subprocess.run(["git", "-C", TOP, "ls-files", "*.md"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, universal_newlines=True)
        if out.returncode == 0 and out.stdout.strip():
            return sorted(set(out.stdout.split()) | set(
                os.path.relpath(os.path.join(d, f), TOP)
                for d in (os.path.join(TOP, "doc"),) if os.path.isdir(d)
                for f in os.listdir(d) if f.endswith(".md")))
    except OSError:
        pass
    found = []
    for d, dirs, files in os.walk(TOP):
        dirs[:] = [x for x in dirs if not x.startswith(".") and x not in ("build", "debian")]
        found += [os.path.relpath(os.path.join(d, f), TOP) for f in files if f.endswith(".md")]
    return sorted(found)


def strip_code(text):
    """The text without fenced blocks and inline code (links in them are not links)."""
    text = re.sub(r"(?ms)^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text)
    return re.sub(r"`[^`\n]*`", "", text)


def slugs(path):
    """GitHub's anchors for the headings of a Markdown file."""
    seen = {}
    out = set()
    text = re.sub(r"(?ms)^```.*?^```", "", read(path))
    for m in re.finditer(r"(?m)^#{1,6} +(.+?) *#*$", text):
        h = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))
        s = re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-")
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else "%s-%d" % (s, n))
    for m in re.finditer(r'<a (?:name|id)="([^"]+)"', text):
        out.add(m.group(1))
    return out


def check_links():
    files = markdown_files()
    if "README.md" not in files:
        fail("README.md not found")
    for rel in files:
        text = strip_code(read(rel))
        for m in re.finditer(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text):
            target = m.group(1)
            line = text.count("\n", 0, m.start()) + 1
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(rel), path)) if path else rel
            if path and not os.path.exists(os.path.join(TOP, dest)):
                fail("%s:%d: link to %s: no such file" % (rel, line, target))
                continue
            if anchor and dest.endswith(".md") and anchor not in slugs(dest):
                fail("%s:%d: link to %s: %s has no heading #%s" % (rel, line, target, dest,
                                                                 anchor))


def lua_files():
    """The tracked .lua files (git ls-files; outside a git tree, lua/src/,
    lua/lib/ and the lua/*.lua files that are not assembled ones)."""
    try:
        out = subprocess.run(["git", "-C", TOP, "ls-files", "*.lua"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, universal_newlines=True)
        if out.returncode == 0 and out.stdout.strip():
            return sorted(out.stdout.split())
    except OSError:
        pass
    built = set(registry()) | {"batch", "library"}
    found = []
    for sub in ("lua", "lua/src", "lua/lib"):
        d = os.path.join(TOP, sub)
        found += [sub + "/" + f for f in sorted(os.listdir(d)) if f.endswith(".lua") and
                  not (sub == "lua" and f[:-4] in built)]
    return found


def registry():
    """The script names of lua/scripts.am, in its order."""
    return re.findall(r"(?m)^\s+lua/(\w+)\b", read("lua/scripts.am"))


HELPER = re.compile(r"(?m)^\s*local\s+(?:function\s+(\w+)|(\w+)\s*=\s*(?:function|setmetatable)\b)")


def check_lua():
    where = {}
    for rel in lua_files():
        for m in HELPER.finditer(read(rel)):
            where.setdefault(m.group(1) or m.group(2), set()).add(rel)
    for name, files in sorted(where.items()):
        if len(files) > 1:
            fail("Lua helper %s defined in %d files: %s (write it once, in lua/lib/)" %
                 (name, len(files), ", ".join(sorted(files))))
    names = registry()
    if not names:
        fail("lua/scripts.am: no scripts")
    srcs = {f[:-4] for f in os.listdir(os.path.join(TOP, "lua", "src")) if f.endswith(".lua")}
    for n in sorted(set(names) - srcs):
        fail("lua/scripts.am: %s has no lua/src/%s.lua" % (n, n))
    for n in sorted(srcs - set(names)):
        fail("lua/src/%s.lua: not in lua/scripts.am" % n)
    table = set(re.findall(r"(?m)^\| `(\w+)\.lua` +\|", read("lua/README.md")))
    for n in sorted(set(names) - table):
        fail("lua/README.md: %s.lua missing from the table of scripts" % n)
    for n in sorted(table - set(names)):
        fail("lua/README.md: %s.lua in the table of scripts, not in lua/scripts.am" % n)
    libs = {f for f in os.listdir(os.path.join(TOP, "lua", "lib")) if f.endswith(".lua")}
    used = set()
    for n in sorted(srcs):
        for m in re.finditer(r"(?m)^--@ lib/(\S+)$", read("lua/src/%s.lua" % n)):
            used.add(m.group(1))
            if m.group(1) not in libs:
                fail("lua/src/%s.lua: includes lib/%s, which does not exist" % (n, m.group(1)))
    for f in sorted(libs - used):
        fail("lua/lib/%s: included by no script" % f)


def main():
    for check in (check_config, check_options, check_links, check_lua):
        try:
            check()
        except (OSError, IndexError) as e:
            fail("%s: %s" % (check.__name__, e))
    for p in problems:
        print("check_docs: " + p, file=sys.stderr)
    if problems:
        print("check_docs: FAILED, %d problem(s)" % len(problems), file=sys.stderr)
        return 1
    print("check_docs: the manual agrees with the code; every relative link resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
