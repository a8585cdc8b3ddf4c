#!/bin/sh
# Reruns the gate's side-by-side timings in docs/performance.md:
#   sparse  this repository plus four large public Rust projects, sources
#           widened to **/*.rs: `dwlint check` beside ripgrep searching the
#           same files for `server:` and `dw_`;
#   dense   2,201 files that all build cache keys: `dwlint check` beside a
#           naive single-threaded syn parse of the same files, then the
#           Rust extractors alone;
#   big     one 200 MB Rust file: skipped by default, read with
#           --max-file-size 1G.
# Needs git, hyperfine, ripgrep and GNU time (`apt-get install hyperfine
# ripgrep time`). Usage: docs/bench-gate.sh [WORKDIR] (default /tmp/dw-bench).
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/dw-bench}
mkdir -p "$work"
cd "$repo"
cargo build --release --bin dwlint --example synthetic_tree --example naive_parse
dwlint=$repo/target/release/dwlint
naive=$repo/target/release/examples/naive_parse

sparse=$work/sparse
if [ ! -d "$sparse" ]; then
    mkdir -p "$sparse"
    git -C "$repo" archive HEAD | tar -x -C "$sparse"
    for spec in \
        rust-lang/cargo@af373f761aa4e42b093c2e453078fd73c8ce54dd \
        tokio-rs/tokio@ea91b33ca57ff0581b38e735cc108f831bccbdaa \
        BurntSushi/ripgrep@3fce3b5bb0236da2df6d99672afb8a719642eca7 \
        rust-lang/rust-analyzer@d2e55da49132fa70a13dfbdc99122432b02cf464; do
        name=${spec%@*}
        dir=$sparse/$(echo "$name" | tr / +)
        git init -q "$dir"
        git -C "$dir" fetch -q --depth 1 "https://github.com/$name" "${spec#*@}"
        git -C "$dir" checkout -q FETCH_HEAD
        rm -rf "$dir/.git"
    done
    sed -i 's|^cache = .*|cache = ["**/*.rs"]|; s|^metrics = .*|metrics = ["**/*.rs"]|' \
        "$sparse/policy/dw-bounded-growth.toml"
fi
echo "sparse: $(find "$sparse" -name '*.rs' | wc -l) Rust files"
(cd "$sparse" && hyperfine -N -i --warmup 3 --runs 20 \
    "$dwlint check --format short" \
    "rg -c -g *.rs -e server: -e dw_ .")
(cd "$sparse" && /usr/bin/time -v "$dwlint" check --format short 2>&1 >/dev/null |
    grep -E 'Maximum resident|Elapsed')

dense=$work/dense
[ -d "$dense" ] || "$repo/target/release/examples/synthetic_tree" "$dense" 2201 dense
(cd "$dense" && hyperfine -N -i --warmup 2 --runs 10 "$dwlint check" "$naive .")
(cd "$dense" && /usr/bin/time -v "$dwlint" check 2>&1 >/dev/null | grep -E 'Maximum resident|Elapsed')
# The Rust extractors alone (parser-free and the syn one it replaced), and
# whether they agree on every file.
cargo run -q --release --features syn-oracle --example rust_differential -- "$dense" | tail -2

big=$work/big
mkdir -p "$big/src" "$big/policy"
cp "$repo/fixtures/clean/policy/dw-bounded-growth.toml" "$big/policy/"
sed -i 's|^cache = .*|cache = ["src/**/*.rs"]|; s|^metrics = .*|metrics = ["src/**/*.rs"]|' \
    "$big/policy/dw-bounded-growth.toml"
seed=$sparse/rust-lang+cargo/src/workspace/features.rs
: > "$big/src/huge.rs"
while [ "$(stat -c %s "$big/src/huge.rs")" -lt 209715200 ]; do
    cat "$seed" >> "$big/src/huge.rs"
done
for limit in 16M 1G; do
    (cd "$big" && /usr/bin/time -v "$dwlint" check --format short --max-file-size "$limit" 2>&1 |
        grep -E 'huge.rs|Maximum resident|Elapsed')
done
rm -f "$big/src/huge.rs"
