#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tests/package/test-package.sh - the Debian package, tested by installing it.
#
# Builds spoa-ratelimit_VERSION_ARCH.deb with dpkg-buildpackage from a clean
# copy of this tree (git's files, never a build directory) in a scratch
# directory, runs lintian on it, installs it with apt-get, checks its files,
# conffile, user and unit, runs the installed agent as the package's user with
# the installed config (under systemd where PID 1 is systemd, else the unit's
# ExecStart by hand with setpriv and the unit's LimitNOFILE, and its sd_notify
# messages read from a socket of our own), sends real requests through
# Debian's haproxy with the installed kit from
# /usr/share/doc/spoa-ratelimit/examples/haproxy (ports changed to free ones)
# and with the block doc/packaging.md tells operators to add to Debian's
# haproxy.cfg (checked first with --check --haproxy),
# reloads it (a bad edit is refused by ExecReload's --check), runs the kit's
# two agents as the template unit's instances spoa-ratelimit@a and @b (two
# INI files, two ports; HAProxy asks both), upgrades to a
# rebuilt package with a bumped version (the edited conffile survives), and
# purges it: no file, user or unit left behind, and the administrator's
# password file beside the conffile left to root.
#
# Root only. Exit 0 passed, 1 failed, 77 skipped (only where
# dpkg-buildpackage cannot run). Cleans up after itself, on failure too: the
# machine is left as it was found. Unit tests are not run inside the package
# build (DEB_BUILD_OPTIONS=nocheck): ./run-tests runs them in its own steps.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
t0=$(date +%s)
PKG=spoa-ratelimit
UNIT=/lib/systemd/system/spoa-ratelimit.service
TUNIT=/lib/systemd/system/spoa-ratelimit@.service
CONF=/etc/spoa-ratelimit/spoa-ratelimit.ini
EXAMPLES=/usr/share/doc/spoa-ratelimit/examples
export DEBIAN_FRONTEND=noninteractive
APT=(apt-get -y -qq -o DPkg::Lock::Timeout=300)

say() { echo "package: $*"; }
elapsed() { echo "$(( $(date +%s) - t0 ))s"; }
skip() { echo "package: SKIPPED: $*"; exit 77; }
fail() { echo "package: FAILED: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || skip "needs root (apt-get install, a system user)"
for tool in dpkg-buildpackage dh dch lintian fakeroot; do
    command -v "$tool" >/dev/null || skip "$tool not found: dpkg-buildpackage cannot run here (debhelper devscripts lintian fakeroot)"
done
command -v haproxy >/dev/null || fail "haproxy not found (Debian package haproxy)"
# One package test at a time on a machine (worktrees share it): a lock on
# dpkg's directory (dpkg itself locks files inside it with fcntl, a separate
# kind of lock), which leaves no file behind.
exec 9</var/lib/dpkg
flock -w 900 9 || fail "another package test has run for 15 minutes: not waiting longer"
status=$(dpkg-query -W -f='${db:Status-Status}' "$PKG" 2>/dev/null || echo not-installed)
[ "$status" = not-installed ] || fail "$PKG is already on this machine ($status): this test installs and purges it"
! getent passwd "$PKG" >/dev/null || fail "user $PKG exists already: this test checks that the package creates and purges it"
! getent group "$PKG" >/dev/null || fail "group $PKG exists already"

tmp=$(mktemp -d /tmp/spoa-pkgtest.XXXXXX)
chmod 0755 "$tmp" # the agent's user reads the notify socket's directory
pids=()
installed=0

cleanup() {
    local rc=$?
    set +e
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
    # the instances this test made (spoa-ratelimit@a and @b): gone, running or not
    if [ "$installed" = 1 ]; then
        [ -d /run/systemd/system ] && systemctl stop spoa-ratelimit@a spoa-ratelimit@b 2>/dev/null
        rm -f /etc/spoa-ratelimit/a.ini /etc/spoa-ratelimit/b.ini /etc/spoa-ratelimit/redis.pass \
            /etc/spoa-ratelimit/pwcheck.ini /etc/spoa-ratelimit/pwcheck.pass
    fi
    if [ "$installed" = 1 ] &&
       [ "$(dpkg-query -W -f='${db:Status-Status}' "$PKG" 2>/dev/null)" != not-installed ]; then
        "${APT[@]}" purge "$PKG" >/dev/null 2>&1 || dpkg --purge "$PKG" >/dev/null 2>&1
    fi
    # The package made them (checked absent at the start): a failed purge
    # must not leave them either.
    if [ "$installed" = 1 ]; then
        getent passwd "$PKG" >/dev/null && userdel "$PKG"
        getent group "$PKG" >/dev/null && groupdel "$PKG"
        rm -rf /var/lib/spoa-ratelimit
    fi
    rm -rf "$tmp"
    [ "$rc" = 0 ] || echo "package: FAILED after $(elapsed) (cleaned up)" >&2
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# Files whose name says spoa-ratelimit, outside scratch and developer places:
# the same list before install and after purge.
leftovers() {
    find /etc /lib /usr /var -xdev \( -path /usr/local -o -path /var/tmp -o -path /var/cache \
        -o -path /var/log \) -prune -o -name '*spoa-ratelimit*' -print 2>/dev/null | sort
}
leftovers > "$tmp/before.list"

read -r P_SPOP P_STATS P_HTTP P_HTTP2 P_HTTP3 P_A P_A_STATS P_B P_B_STATS <<<"$(python3 -c '
import socket
ss = [socket.socket() for _ in range(9)]
for s in ss:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')"

# ---- build, from a clean copy ------------------------------------------------
version=$(sed -n '/^AC_INIT/{s/[^,]*, *\[//;s/\].*//;p;}' "$top/configure.ac")
src="$tmp/src/$PKG-$version"
mkdir -p "$src"
if git -C "$top" rev-parse --git-dir >/dev/null 2>&1; then
    # tracked and new files as they are in the work tree (not the ignored
    # build products)
    (cd "$top" && git ls-files -z --cached --others --exclude-standard |
        tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -C "$src" -xf -
else
    tar -C "$top" --exclude='./build*' --exclude='./debian/build' --exclude=./autom4te.cache \
        -cf - . | tar -C "$src" -xf -
fi
arch=$(dpkg --print-architecture)
build() { # $1 log name; the .deb path on stdout
    local v
    v=$(cd "$src" && dpkg-parsechangelog -SVersion)
    if ! (cd "$src" && DEB_BUILD_OPTIONS="nocheck noautodbgsym parallel=$(nproc)" \
          dpkg-buildpackage -us -uc -b "${@:2}") >"$tmp/$1.log" 2>&1; then
        tail -40 "$tmp/$1.log" >&2
        fail "dpkg-buildpackage ($1) failed"
    fi
    echo "$tmp/src/${PKG}_${v}_${arch}.deb"
}
deb=$(build build)
[ -f "$deb" ] || fail "no $deb"
say "built $(basename "$deb") from a clean copy ($(elapsed))"

# ---- lintian -------------------------------------------------------------------
if ! lintian --fail-on error,warning "$deb" >"$tmp/lintian.log" 2>&1; then
    cat "$tmp/lintian.log"
    fail "lintian: errors or unjustified warnings"
fi
sed -n '/^running with root/!s/^/package: lintian: /p' "$tmp/lintian.log"
say "lintian: no error, no warning left ($(elapsed))"

# ---- install -------------------------------------------------------------------
installed=1
"${APT[@]}" install "$deb" </dev/null >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; fail "apt-get install"; }
for f in /usr/sbin/spoa-ratelimit /usr/bin/spoa-sim /usr/bin/spoa-bench "$CONF" "$UNIT" "$TUNIT" \
         /usr/share/man/man8/spoa-ratelimit.8.gz /usr/share/man/man5/spoa-ratelimit.ini.5.gz \
         /usr/share/man/man1/spoa-bench.1.gz /usr/share/man/man1/spoa-sim.1.gz \
         "$EXAMPLES/haproxy/haproxy.cfg" "$EXAMPLES/haproxy/spoe-ratelimit.conf" \
         "$EXAMPLES/haproxy/ratelimit.ini" "$EXAMPLES/haproxy/plans.map" \
         "$EXAMPLES/haproxy/limits.map" "$EXAMPLES/grafana-dashboard.json" \
         "$EXAMPLES/prometheus-alerts.yml"; do
    [ -f "$f" ] || fail "not installed: $f"
done
dpkg-query -W -f='${Conffiles}\n' "$PKG" | grep -q " $CONF " || fail "$CONF is not a conffile"
# The installed manual's relative links resolve (README's to the pages, the
# pages' to each other and to their charts), but for the files the package
# leaves out (lua/README.md, CONTRIBUTING.md: debian/not-installed).
python3 - /usr/share/doc/spoa-ratelimit >"$tmp/links.log" <<'PY' || { cat "$tmp/links.log"; fail "broken links in the installed manual"; }
import glob, os, re, sys
broken, n = [], 0
for page in sorted(glob.glob(os.path.join(sys.argv[1], "*.md"))):
    for target in re.findall(r"\]\(([^)\s]+)\)", open(page).read()):
        path = target.split("#")[0]
        if not path or re.match(r"[a-z]+:", path) or path.endswith(("lua/README.md", "CONTRIBUTING.md")):
            continue
        n += 1
        if not os.path.exists(os.path.join(os.path.dirname(page), path)):
            broken.append("%s: %s" % (os.path.basename(page), target))
print("\n".join(broken) if broken else "%d links" % n)
sys.exit(1 if broken or n == 0 else 0)
PY
# it may come to hold stats_auth or a Redis password: not for every user
[ "$(stat -c '%a %U:%G' "$CONF")" = "640 root:$PKG" ] ||
    fail "$CONF is $(stat -c '%a %U:%G' "$CONF"), want 640 root:$PKG (postinst)"
IFS=: read -r _ _ uid gid gecos home shell <<<"$(getent passwd "$PKG")"
[ "$uid" -lt 1000 ] && [ "$shell" = /usr/sbin/nologin ] && [ "$home" = /nonexistent ] ||
    fail "user $PKG: uid $uid, shell $shell, home $home (want a system user without login)"
[ "$(getent group "$PKG" | cut -d: -f3)" = "$gid" ] || fail "group $PKG is not the user's group"
[ -x "$(command -v man)" ] && { man -w spoa-ratelimit.ini >/dev/null || fail "man spoa-ratelimit.ini"; }
/usr/sbin/spoa-ratelimit --version >/dev/null || fail "spoa-ratelimit --version"
/usr/bin/spoa-sim --help >/dev/null 2>&1 || fail "spoa-sim --help"
/usr/bin/spoa-bench --help >/dev/null 2>&1 || fail "spoa-bench --help"
if command -v systemd-analyze >/dev/null; then
    verify=$(systemd-analyze verify "$UNIT" 2>&1 | grep spoa-ratelimit || true)
    [ -z "$verify" ] || fail "systemd-analyze verify: $verify"
    score=$(systemd-analyze security --offline=yes "$UNIT" 2>/dev/null |
        sed -n 's/.*Overall exposure level for spoa-ratelimit.service: \([0-9.]*\).*/\1/p')
    [ -n "$score" ] && awk -v s="$score" 'BEGIN { exit !(s <= 2.0) }' ||
        fail "systemd-analyze security: exposure '$score' (1.4 when written; 2.0 at most)"
    say "unit: systemd-analyze verify clean, security exposure $score"
    # the template, as an instance (verify instantiates a template as @i)
    verify=$(systemd-analyze verify "$TUNIT" 2>&1 | grep spoa-ratelimit || true)
    [ -z "$verify" ] || fail "systemd-analyze verify $TUNIT: $verify"
    cp "$TUNIT" "$tmp/spoa-ratelimit@a.service"
    tscore=$(systemd-analyze security --offline=yes "$tmp/spoa-ratelimit@a.service" 2>/dev/null |
        sed -n 's/.*Overall exposure level for spoa-ratelimit@a.service: \([0-9.]*\).*/\1/p')
    [ "$tscore" = "$score" ] || fail "systemd-analyze security: spoa-ratelimit@a '$tscore', the plain unit $score"
    say "template unit: systemd-analyze verify clean, security exposure $tscore (the plain unit's)"
fi
# The template's hardening is the plain unit's, line for line.
hardening() { sed -n '/^# Hardening/,$p' "$1"; }
diff <(hardening "$UNIT") <(hardening "$TUNIT") >"$tmp/hardening.diff" ||
    { cat "$tmp/hardening.diff"; fail "the hardening of $TUNIT differs from $UNIT's"; }
for key in Type User Group LimitNOFILE ExecStartPre ExecStart ExecReload; do
    [ "$(sed -n "s/^$key=//p" "$UNIT")" = "$(sed -n "s/^$key=//p" "$TUNIT")" ] ||
        fail "$key= of $TUNIT differs from $UNIT's"
done
say "installed: files, conffile $CONF, system user $PKG (uid $uid), the manual's $(cat "$tmp/links.log") resolve ($(elapsed))"

# ---- the pristine conffile, then an edit ---------------------------------------
as_user() { setpriv --reuid="$PKG" --regid="$PKG" --init-groups --no-new-privs -- "$@"; }
as_user /usr/sbin/spoa-ratelimit -c "$CONF" --check >"$tmp/check.log" 2>&1 ||
    { cat "$tmp/check.log"; fail "--check of the shipped conffile"; }
say "--check of the shipped conffile as $PKG: $(cat "$tmp/check.log")"
# Free ports, and a burst of 5 (the shipped rule allows 100): the number of
# 200s before the first 429 says which file the agent runs with.
sed -i -e "s/^listen = 127.0.0.1:12345/listen = 127.0.0.1:$P_SPOP/" \
       -e "s/^stats = 127.0.0.1:9145/stats = 127.0.0.1:$P_STATS/" \
       -e 's|^rate = 600/1m|rate = 5/1m|' -e 's/^burst = 100/burst = 5/' "$CONF"
grep -q "^listen = 127.0.0.1:$P_SPOP" "$CONF" && grep -q '^burst = 5$' "$CONF" ||
    fail "the conffile's listen/rate lines changed: edit this test"
as_user /usr/sbin/spoa-ratelimit -c "$CONF" --check >/dev/null || fail "--check of the edited file"
# --check as root warns when the unit's user could not read a password_file
# (root-only, 0600), and is quiet once it is 0640 root:spoa-ratelimit.
PWINI=/etc/spoa-ratelimit/pwcheck.ini PWFILE=/etc/spoa-ratelimit/pwcheck.pass
install -m 0640 -g "$PKG" /dev/null "$PWINI"
printf '[redis]\nurl = redis://127.0.0.1:1\npassword_file = %s\n[rule:a]\nkey = k\nrate = 1/s\n' \
    "$PWFILE" >"$PWINI"
install -m 0600 /dev/null "$PWFILE" && echo s3cret >"$PWFILE"
/usr/sbin/spoa-ratelimit -c "$PWINI" --check >/dev/null 2>"$tmp/pwcheck.log" ||
    { cat "$tmp/pwcheck.log"; fail "--check of a root-only password_file failed"; }
grep -q "password_file $PWFILE: the unit (User=$PKG) cannot read it" "$tmp/pwcheck.log" ||
    { cat "$tmp/pwcheck.log"; fail "--check as root: no warning for a root-only password_file"; }
chgrp "$PKG" "$PWFILE" && chmod 0640 "$PWFILE"
/usr/sbin/spoa-ratelimit -c "$PWINI" --check >/dev/null 2>"$tmp/pwcheck.log" &&
    ! grep -q warning "$tmp/pwcheck.log" ||
    { cat "$tmp/pwcheck.log"; fail "--check warns on a password_file 0640 root:$PKG"; }
rm -f "$PWINI" "$PWFILE"
say "--check as root: warns of a password_file $PKG cannot read, quiet once it can"

# ---- run it as the unit does -------------------------------------------------------
# The unit's lines for KEY, with ${CONFIG} and $MAINPID filled in.
unit_lines() {
    local config
    config=$(sed -n 's/^Environment=CONFIG=//p' "$UNIT")
    sed -n "s/^$1=//p" "$UNIT" | sed -e "s|\${CONFIG}|$config|g" -e "s|\$MAINPID|${2:-}|g"
}
[ "$(sed -n 's/^User=//p' "$UNIT")" = "$PKG" ] || fail "the unit does not run as $PKG"
systemd_pid1=0
[ -d /run/systemd/system ] && systemd_pid1=1
agent_pid=
start_agent() {
    if [ "$systemd_pid1" = 1 ]; then
        systemctl daemon-reload
        systemctl restart "$PKG" || { journalctl -u "$PKG" -n 30 --no-pager; fail "systemctl restart"; }
        agent_pid=$(systemctl show -p MainPID --value "$PKG")
        return
    fi
    : >"$tmp/notify.log"
    local pre
    while read -r pre; do
        # shellcheck disable=SC2086 # the unit's command line, split as systemd does
        as_user $pre >/dev/null || fail "ExecStartPre failed: $pre"
    done < <(unit_lines ExecStartPre)
    # shellcheck disable=SC2046
    ( ulimit -n "$(sed -n 's/^LimitNOFILE=//p' "$UNIT")"
      NOTIFY_SOCKET="$tmp/notify" exec setpriv --reuid="$PKG" --regid="$PKG" --init-groups \
          --no-new-privs -- $(unit_lines ExecStart) ) 2>>"$tmp/agent.log" &
    agent_pid=$!
    pids+=("$agent_pid")
    wait_notify "READY=1" 1 || { cat "$tmp/agent.log"; fail "no READY=1 from the agent"; }
}
wait_notify() { # $1 message, $2 how many times seen in all
    local i
    [ "$systemd_pid1" = 1 ] && return 0
    for i in $(seq 100); do
        [ "$(grep -cx "$1" "$tmp/notify.log")" -ge "$2" ] && return 0
        sleep 0.1
    done
    return 1
}
stop_agent() {
    if [ "$systemd_pid1" = 1 ]; then systemctl stop "$PKG"; return; fi
    kill -TERM "$agent_pid"
    wait "$agent_pid" || fail "the agent exited $? on SIGTERM"
    wait_notify STOPPING=1 1 || fail "no STOPPING=1"
}
reload_agent() { # the unit's ExecReload lines in order; the first failure stops
    if [ "$systemd_pid1" = 1 ]; then systemctl reload "$PKG"; return; fi
    local line
    while read -r line; do
        # shellcheck disable=SC2086
        if [[ $line == /bin/kill* ]]; then $line || return 1; else as_user $line >/dev/null 2>&1 || return 1; fi
    done < <(unit_lines ExecReload "$agent_pid")
}
if [ "$systemd_pid1" = 0 ]; then
    # sd_notify's receiving end, as systemd's: a datagram socket the agent's
    # user can write to; one message a line.
    python3 -u -c '
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o666)
while True:
    for m in s.recv(4096).decode().split("\n"):
        if m: print(m, flush=True)' "$tmp/notify" >>"$tmp/notify.log" &
    pids+=("$!")
    for _ in $(seq 50); do [ -S "$tmp/notify" ] && break; sleep 0.1; done
fi
start_agent
who=$(ps -o user= -p "$agent_pid" | tr -d ' ')
[ "$who" = "$PKG" ] || fail "the agent runs as '$who'"
nofile=$(awk '/^Max open files/ { print $4 }' "/proc/$agent_pid/limits")
say "agent running as $who (pid $agent_pid, open files $nofile, $( [ "$systemd_pid1" = 1 ] && echo "under systemd" || echo "ExecStart by hand: READY=1 received"))"

# ---- HAProxy with the installed kit -----------------------------------------------
kit="$tmp/kit"
cp -r "$EXAMPLES/haproxy" "$kit"
# the kit lists two agents (RL_AGENT1_ADDR, RL_AGENT2_ADDR): both are this one
export RL_HTTP_ADDR="127.0.0.1:$P_HTTP" RL_AGENT1_ADDR="127.0.0.1:$P_SPOP" \
    RL_AGENT2_ADDR="127.0.0.1:$P_SPOP"
(cd "$kit" && haproxy -c -f haproxy.cfg >"$tmp/haproxy-check.log" 2>&1) ||
    { cat "$tmp/haproxy-check.log"; fail "haproxy -c on the installed kit"; }
(cd "$kit" && exec haproxy -db -f haproxy.cfg) >"$tmp/haproxy.log" 2>&1 &
pids+=("$!")
# Requests until the first 429: prints the number of 200s before it (the
# first 200 carrying the agent's RateLimit-Policy header counts from there).
# $1: HAProxy's port (default the kit's), then curl's own options.
count_until_429() {
    local i code allowed=-1 hdr="$tmp/headers" port=${1:-$P_HTTP}
    for i in $(seq 200); do
        code=$(curl -s -o /dev/null -D "$hdr" -w '%{http_code}' "${@:2}" "http://127.0.0.1:$port/" || true)
        if [ "$code" = 200 ] && grep -qi '^RateLimit-Policy: "per-ip"' "$hdr"; then
            allowed=$(( allowed < 0 ? 1 : allowed + 1 ))
        elif [ "$code" = 429 ] && [ "$allowed" -ge 0 ]; then
            grep -qi '^Retry-After: [1-9]' "$hdr" || fail "429 without Retry-After"
            echo "$allowed"; return
        elif [ "$allowed" -lt 0 ]; then
            sleep 0.2 # HAProxy or its agent connection not up yet
        else
            fail "unexpected HTTP $code after $allowed allowed"
        fi
    done
    fail "no 429 in 200 requests (allowed $allowed)"
}
n=$(count_until_429)
[ "$n" = 5 ] || fail "$n requests passed before the 429, want 5 (the edited conffile's burst)"
say "HAProxy $(haproxy -v | sed -n '1s/HAProxy version \([^ ]*\).*/\1/p') with the installed kit: 5 x 200 with RateLimit headers, then 429 + Retry-After ($(elapsed))"

# ---- HAProxy with the block doc/packaging.md shows ---------------------------------
# Step 4 of doc/packaging.md, as an operator follows it: exactly the text
# between the doc's haproxy-block markers (its code fences left out) added to
# Debian's own haproxy.cfg, spoe-ratelimit.conf copied beside it, HAProxy
# started in / as systemd starts it. Only the environment picks the ports
# (the block's presetenv lines give way to it). Requests come from another
# loopback address: a client of its own, a bucket of its own.
doc="$top/doc/packaging.md"
block="$tmp/block"
mkdir -p "$block"
awk '/^<!-- haproxy-block: end/ { on = 0 } on && !/^```$/ { print }
     /^<!-- haproxy-block: begin/ { on = 1 }' "$doc" >"$block/block.cfg"
grep -q 'filter spoe' "$block/block.cfg" || fail "no HAProxy block between the markers of $doc"
cat /etc/haproxy/haproxy.cfg "$block/block.cfg" >"$block/haproxy.cfg"
cp "$EXAMPLES/haproxy/spoe-ratelimit.conf" "$block/"
export RL_AGENT_ADDR="127.0.0.1:$P_SPOP"
RL_HTTP_ADDR="127.0.0.1:$P_HTTP2" /usr/sbin/spoa-ratelimit -c "$CONF" --check \
    --haproxy "$block/haproxy.cfg" >"$tmp/hapcheck.log" 2>&1 ||
    { cat "$tmp/hapcheck.log"; fail "--check --haproxy on the block of $doc"; }
! grep -q warning "$tmp/hapcheck.log" || { cat "$tmp/hapcheck.log"; fail "--check --haproxy warns on the block of $doc"; }
grep -v 'set-var(txn.rl_agents)' "$block/haproxy.cfg" >"$block/broken.cfg"
if /usr/sbin/spoa-ratelimit -c "$CONF" --check --haproxy "$block/broken.cfg" >/dev/null 2>"$tmp/hapcheck.log"; then
    fail "--check --haproxy passed the block without its set-var(txn.rl_agents) line"
fi
grep -q "broken.cfg:[0-9]*: send-spoe-group ratelimit check: its condition reads var(txn.rl_agents)" \
    "$tmp/hapcheck.log" || { cat "$tmp/hapcheck.log"; fail "--check --haproxy: no message naming the send-spoe-group line"; }
(cd / && RL_HTTP_ADDR="127.0.0.1:$P_HTTP2" haproxy -c -f "$block/haproxy.cfg" >"$tmp/haproxy-check.log" 2>&1) ||
    { cat "$tmp/haproxy-check.log"; fail "haproxy -c on the block of $doc"; }
(cd / && RL_HTTP_ADDR="127.0.0.1:$P_HTTP2" exec haproxy -db -f "$block/haproxy.cfg") >"$tmp/haproxy-block.log" 2>&1 &
pids+=("$!")
n=$(count_until_429 "$P_HTTP2" --interface 127.0.0.2)
[ "$n" = 5 ] || fail "the block of $doc: $n requests passed before the 429, want 5"
say "the block of $doc (after Debian's haproxy.cfg, started in /): --check --haproxy OK, and 5 x 200 then 429 + Retry-After ($(elapsed))"

# ---- reload: a good file is taken, a bad edit is refused ----------------------------
reload_agent || fail "reload"
wait_notify "RELOADING=1" 1 && wait_notify "READY=1" 2 || fail "no RELOADING=1 then READY=1 around the reload"
cp "$CONF" "$tmp/conf.good"
echo "bogus line" >>"$CONF"
if reload_agent; then fail "reload with a bad file was not refused"; fi
cp "$tmp/conf.good" "$CONF"
kill -0 "$agent_pid" || fail "the agent died on a bad edit"
[ "$systemd_pid1" = 1 ] || grep -q '"configuration reloaded"' "$tmp/agent.log" || fail "no reload in the log"
say "reload: --check then SIGHUP (RELOADING=1, READY=1); a bad edit refused by ExecReload's --check, agent still up"
stop_agent

# ---- two instances of the template: the kit's two agents ------------------------
# As doc/packaging.md ("Two agents on one host") tells: a.ini and b.ini copied
# from the conffile (root:spoa-ratelimit 0640), each with its own ports;
# spoa-ratelimit@a and @b started, both checked, HAProxy's kit pointed at them.
for name in a b; do
    ini=/etc/spoa-ratelimit/$name.ini
    install -m 0640 -g "$PKG" "$CONF" "$ini"
    if [ "$name" = a ]; then spop=$P_A stats=$P_A_STATS; else spop=$P_B stats=$P_B_STATS; fi
    sed -i -e "s/^listen = .*/listen = 127.0.0.1:$spop/" -e "s/^stats = .*/stats = 127.0.0.1:$stats/" "$ini"
    as_user /usr/sbin/spoa-ratelimit -c "$ini" --check >"$tmp/check-$name.log" 2>&1 ||
        { cat "$tmp/check-$name.log"; fail "--check of $ini as $PKG"; }
done
# The template's lines for KEY, for instance $2 (%i), ${CONFIG} and $MAINPID filled in.
instance_lines() {
    local config
    config=$(sed -n 's/^Environment=CONFIG=//p' "$TUNIT")
    sed -n "s/^$1=//p" "$TUNIT" | sed -e "s|\${CONFIG}|$config|g" -e "s|%i|$2|g"
}
[ "$(instance_lines Environment a)" = "CONFIG=/etc/spoa-ratelimit/a.ini" ] ||
    fail "spoa-ratelimit@a does not read /etc/spoa-ratelimit/a.ini: $(instance_lines Environment a)"
[ "$(instance_lines StateDirectory a)" = "spoa-ratelimit/a" ] ||
    fail "spoa-ratelimit@a's StateDirectory= is not spoa-ratelimit/a"
inst_pids=()
if [ "$systemd_pid1" = 1 ]; then
    systemctl daemon-reload
    systemctl start spoa-ratelimit@a spoa-ratelimit@b ||
        { journalctl -u 'spoa-ratelimit@*' -n 30 --no-pager; fail "systemctl start spoa-ratelimit@a @b"; }
    for name in a b; do
        inst_pids+=("$(systemctl show -p MainPID --value "spoa-ratelimit@$name")")
        [ -d "/var/lib/spoa-ratelimit/$name" ] || fail "no state directory /var/lib/spoa-ratelimit/$name"
    done
else
    : >"$tmp/notify.log"
    n_ready=0
    for name in a b; do
        # StateDirectory=, as systemd would make it
        install -d -o "$PKG" -g "$PKG" -m 0750 "/var/lib/spoa-ratelimit/$name"
        while read -r pre; do
            # shellcheck disable=SC2086
            as_user $pre >/dev/null || fail "spoa-ratelimit@$name: ExecStartPre failed: $pre"
        done < <(instance_lines ExecStartPre "$name")
        # shellcheck disable=SC2046
        ( ulimit -n "$(sed -n 's/^LimitNOFILE=//p' "$TUNIT")"
          NOTIFY_SOCKET="$tmp/notify" exec setpriv --reuid="$PKG" --regid="$PKG" --init-groups \
              --no-new-privs -- $(instance_lines ExecStart "$name") ) 2>>"$tmp/agent-$name.log" &
        inst_pids+=("$!")
        pids+=("$!")
        n_ready=$((n_ready + 1))
        wait_notify "READY=1" "$n_ready" || { cat "$tmp/agent-$name.log"; fail "no READY=1 from spoa-ratelimit@$name"; }
    done
fi
for pid in "${inst_pids[@]}"; do
    [ "$(ps -o user= -p "$pid" | tr -d ' ')" = "$PKG" ] || fail "an instance (pid $pid) does not run as $PKG"
done
# The kit's HAProxy again (a second one, on its own port), its two server
# lines on the two instances.
(cd "$kit" && RL_HTTP_ADDR="127.0.0.1:$P_HTTP3" RL_AGENT1_ADDR="127.0.0.1:$P_A" \
    RL_AGENT2_ADDR="127.0.0.1:$P_B" exec haproxy -db -f haproxy.cfg) >"$tmp/haproxy-ab.log" 2>&1 &
ab_pid=$!
pids+=("$ab_pid")
# Standalone agents, a bucket each (burst 5): between 5 (one agent asked)
# and 10 (the two, alternately) pass before the first 429. Which agent a
# request goes to is HAProxy's choice (2.6 keeps an SPOE connection per
# thread: doc/haproxy.md, "Load spread"), so each agent is shown answering
# HAProxy by its health checks (SPOP HELLOs) rather than by its decisions.
n=$(count_until_429 "$P_HTTP3")
[ "$n" -ge 5 ] && [ "$n" -le 10 ] || fail "spoa-ratelimit@a and @b: $n requests passed before the 429, want 5 to 10"
metric() { # $1 stats port, $2 a series' start: the sum of its values
    curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" 'index($0, m) == 1 { n += $NF } END { print n + 0 }'
}
for port in "$P_A_STATS" "$P_B_STATS"; do
    for _ in $(seq 50); do
        [ "$(metric "$port" 'spoa_ratelimit_frames_total{type="haproxy_hello"}')" -gt 0 ] && break
        sleep 0.1
    done
    [ "$(metric "$port" 'spoa_ratelimit_frames_total{type="haproxy_hello"}')" -gt 0 ] ||
        fail "the instance with stats on $port got no HELLO from HAProxy"
done
da=$(metric "$P_A_STATS" 'spoa_ratelimit_decisions_total{')
db=$(metric "$P_B_STATS" 'spoa_ratelimit_decisions_total{')
[ $((da + db)) -ge $((n + 1)) ] || fail "spoa-ratelimit@a and @b decided $da + $db times for $n requests and a 429"
say "spoa-ratelimit@a and @b (a.ini, b.ini on ports $P_A and $P_B): both up as $PKG, both answering HAProxy's kit ($da and $db decisions), $n x 200 then 429 ($(elapsed))"
if [ "$systemd_pid1" = 1 ]; then
    systemctl stop spoa-ratelimit@a spoa-ratelimit@b
else
    for pid in "${inst_pids[@]}"; do
        kill -TERM "$pid"
        wait "$pid" || fail "an instance exited $? on SIGTERM"
    done
fi
kill "$ab_pid"
wait "$ab_pid" 2>/dev/null || true
rm -f /etc/spoa-ratelimit/a.ini /etc/spoa-ratelimit/b.ini

# ---- upgrade to a rebuilt package, the edited conffile kept -----------------------
new="$version+pkgtest1"
(cd "$src" && DEBFULLNAME="package test" DEBEMAIL="test@example.invalid" \
    dch -p -v "$new" -D unstable "Package test: the same tree again, a new version." \
    >/dev/null 2>&1) || fail "dch"
deb2=$(build rebuild -nc)
"${APT[@]}" install "$deb2" </dev/null >"$tmp/upgrade.log" 2>&1 ||
    { cat "$tmp/upgrade.log"; fail "apt-get install of $new (upgrade)"; }
[ "$(dpkg-query -W -f='${Version}' "$PKG")" = "$new" ] || fail "not upgraded to $new"
grep -q '^burst = 5$' "$CONF" || fail "the conffile edit did not survive the upgrade"
[ "$(stat -c '%a %U:%G' "$CONF")" = "640 root:$PKG" ] ||
    fail "after the upgrade $CONF is $(stat -c '%a %U:%G' "$CONF"), want 640 root:$PKG"
ls /etc/spoa-ratelimit/*.dpkg-* 2>/dev/null && fail "dpkg left a .dpkg-* file beside the conffile"
start_agent
n=$(count_until_429)
[ "$n" = 5 ] || fail "after the upgrade: $n requests passed before the 429, want 5"
say "upgraded $version -> $new: the edited conffile kept, the agent runs with it again ($(elapsed))"
stop_agent

# ---- purge ---------------------------------------------------------------------------
# A password file as doc/packaging.md makes it (0640 root:spoa-ratelimit): the
# administrator's, so purge leaves it, but owned by root, not by a group id
# without a name.
PASSFILE=/etc/spoa-ratelimit/redis.pass
install -m 0640 -g "$PKG" /dev/null "$PASSFILE"
"${APT[@]}" purge "$PKG" </dev/null >"$tmp/purge.log" 2>&1 || { cat "$tmp/purge.log"; fail "apt-get purge"; }
[ "$(dpkg-query -W -f='${db:Status-Status}' "$PKG" 2>/dev/null || echo not-installed)" = not-installed ] ||
    fail "dpkg still knows $PKG after purge"
! getent passwd "$PKG" >/dev/null || fail "user $PKG left after purge"
! getent group "$PKG" >/dev/null || fail "group $PKG left after purge"
[ "$(stat -c '%a %U:%G' "$PASSFILE")" = "640 root:root" ] ||
    fail "after purge $PASSFILE is $(stat -c '%a %U:%G' "$PASSFILE"), want 640 root:root (postrm)"
rm -f "$PASSFILE" && rmdir /etc/spoa-ratelimit
leftovers > "$tmp/after.list"
if ! diff -u "$tmp/before.list" "$tmp/after.list" >"$tmp/leftovers.diff"; then
    cat "$tmp/leftovers.diff"
    fail "files left after purge"
fi
installed=0
say "purged: no file, user, group or unit left"
say "ok in $(elapsed)"
