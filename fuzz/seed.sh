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
