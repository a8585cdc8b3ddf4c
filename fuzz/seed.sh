#!/bin/sh
# Fills fuzz/corpus/<target>/ with the repository's fixtures: every file
# under fixtures/ and tests/data/ whose extension suits the target (all of
# them for the report formats). Run from anywhere; rerunning is harmless.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
seed() {
    target=$1
    shift
    mkdir -p "$here/corpus/$target"
    for ext in "$@"; do
        find "$repo/fixtures" "$repo/tests/data" -type f -name "*.$ext" -size -64k |
            while read -r file; do
                cp "$file" "$here/corpus/$target/$(printf '%s' "$file" | cksum | cut -d' ' -f1).$ext"
            done
    done
}
seed policy toml
seed extract_rust rs
seed rust_tokens rs
seed extract_php php
seed extract_python py
seed extract_shell sh
seed extract_yaml yml yaml
seed extract_go go
seed extract_javascript js ts
seed extract_plain md txt
for format in human json sarif github junit short; do
    seed "report_$format" rs md js toml
done
# The shapes that once took quadratic time or memory (tests/scaling.rs
# holds them linear at 1-4 MB), small, as seeds for every extractor: one
# word of mid-word prefixes, one word of many sites, nested shell defaults.
shapes() {
    target=$1 ext=$2 before=$3 after=$4
    mkdir -p "$here/corpus/$target"
    awk -v b="$before" -v a="$after" 'BEGIN {
        w = ""; for (i = 0; i < 1000; i++) w = w "adw_"
        printf "%s%sserver:x:%s\n", b, w, a
    }' > "$here/corpus/$target/mid-word.$ext"
    awk -v b="$before" -v a="$after" 'BEGIN {
        s = ""; for (i = 0; i < 1000; i++) s = s "-dw_x"
        printf "%s%sserver:x:%s\n", b, s, a
    }' > "$here/corpus/$target/many-sites.$ext"
    awk -v b="$before" -v a="$after" 'BEGIN {
        n = ""; c = ""; for (i = 0; i < 1000; i++) { n = n "${A:-"; c = c "}" }
        printf "%s%sserver:x:%s%s\n", b, n, c, a
    }' > "$here/corpus/$target/nested-defaults.$ext"
}
shapes extract_rust rs 'const X: &str = "' '";'
shapes extract_go go 'package x
var X = "' '"'
shapes extract_javascript ts 'const x = "' '";'
shapes extract_python py 'x = "' '"'
shapes extract_php php '<?php $x = "' '";'
shapes extract_shell sh 'echo ' ''
shapes extract_yaml yml 'k: ' ''
shapes extract_plain txt '' ''
mkdir -p "$here/corpus/policy"
awk 'BEGIN {
    x = ""; for (i = 0; i < 4000; i++) x = x "x"
    printf "schema_version = 1\n[cache_keys.a]\nowner = \"a::%s\"\nprefix = \"server:a:\"\n", x
}' > "$here/corpus/policy/long-owner.toml"
