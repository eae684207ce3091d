#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# assemble.sh OUT SRC LUADIR - write the Redis script OUT from its source SRC
# (lua/src/NAME.lua): each line "--@ lib/FILE.lua" is replaced by the text of
# LUADIR/lib/FILE.lua below its header (the lines up to its first blank line),
# with @SCRIPT@ in it replaced by the script's name (OUT's, without .lua: the
# name its errors start with). So each helper the scripts share is written
# once, in lua/lib/, and every script still loads alone (SCRIPT LOAD, EVAL).
# Generated at build time; never edit the output.
set -e
out=$1 src=$2 dir=$3
name=$(basename "$out" .lua)
tmp="$out.tmp"
awk -v dir="$dir" -v name="$name" '
/^--@ / {
    f = dir "/" $2
    body = 0
    while ((r = (getline line < f)) > 0) {
        if (body) { gsub(/@SCRIPT@/, name, line); print line }
        else if (line == "") body = 1
    }
    close(f)
    if (r < 0 || !body) { print FILENAME ": cannot include " f > "/dev/stderr"; exit 1 }
    next
}
{ print }
' "$src" > "$tmp"
mv "$tmp" "$out"
