#!/bin/sh
# Reruns the gate's side-by-side timings in docs/performance.md:
#   sparse  this repository plus four large public Rust projects at pinned
#           commits, sources widened to **/*.rs: `dwlint check` beside
#           ripgrep searching the same files for `server:` and `dw_`, in one
#           hyperfine run, then the peak memory of each;
#   dense   2,201 files that all build cache keys: `dwlint check` beside a
#           naive single-threaded syn parse of the same files, then the
#           Rust extractors alone;
#   dense-real  2,201 real Rust files from the sparse tree's four projects
#           (picked evenly from the sorted paths, skipping files syn cannot
#           parse and files that already hold `server:` or `dw_`), each with
#           the dense tree's key-and-metric block appended, and the same
#           policy: `dwlint check` beside the naive parse, then the CPU time
#           and peak memory of each (the dense files are 250 bytes; these
#           show the per-byte costs);
#   big     one 200 MB Rust file ending in one cache key: skipped with a
#           warning by default, read with --max-file-size 1G.
# Needs git, hyperfine, ripgrep, python3 and GNU time (`apt-get install hyperfine
# ripgrep time`).
#
# Usage: docs/bench-gate.sh [WORKDIR [PART...]]
#   WORKDIR  where the trees are built (default /tmp/dw-bench); a tree
#            already there is reused, delete it to rebuild;
#   PART     sparse, dense, dense-real or big (default: all four).
# The four projects of the sparse tree (and of the dense-real one) are
# fetched from GitHub at the commits below. Without network, point DW_BENCH_MIRRORS at a directory holding a
# clone (bare or not) of each as <owner>+<name> or <owner>+<name>/repo that
# contains the commit; its tree is taken from there with `git archive`.
set -eu
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/dw-bench}
[ $# -gt 0 ] && shift
parts=${*:-sparse dense dense-real big}
mkdir -p "$work"
cd "$repo"
case " $parts " in
*" dense "* | *" dense-real "*) cargo build --release --bin dwlint --example synthetic_tree --example naive_parse ;;
*) cargo build --release --bin dwlint ;;
esac
# Cargo builds into $CARGO_TARGET_DIR when it is set.
target=${CARGO_TARGET_DIR:-$repo/target}
dwlint=$target/release/dwlint
naive=$target/release/examples/naive_parse
sparse=$work/sparse
# The projects of the sparse tree, at the commits measured in
# docs/performance.md, and how many Rust files each holds there.
projects="
rust-lang/cargo@af373f761aa4e42b093c2e453078fd73c8ce54dd:1373
tokio-rs/tokio@ea91b33ca57ff0581b38e735cc108f831bccbdaa:793
BurntSushi/ripgrep@3fce3b5bb0236da2df6d99672afb8a719642eca7:110
rust-lang/rust-analyzer@d2e55da49132fa70a13dfbdc99122432b02cf464:1480
"

# Extracts <owner>/<name> at <commit> into <dir>: from a local clone under
# $DW_BENCH_MIRRORS if there is one, otherwise from GitHub.
project_tree() {
    name=$1 commit=$2 dir=$3
    mirror=
    for candidate in "${DW_BENCH_MIRRORS:-/nonexistent}/$(echo "$name" | tr / +)"/repo \
        "${DW_BENCH_MIRRORS:-/nonexistent}/$(echo "$name" | tr / +)"; do
        if git --git-dir="$candidate" cat-file -e "$commit^{commit}" 2>/dev/null ||
            git -C "$candidate" cat-file -e "$commit^{commit}" 2>/dev/null; then
            mirror=$candidate
            break
        fi
    done
    mkdir -p "$dir"
    if [ -n "$mirror" ]; then
        { git --git-dir="$mirror" archive "$commit" 2>/dev/null ||
            git -C "$mirror" archive "$commit"; } | tar -x -C "$dir"
    else
        git init -q "$dir"
        git -C "$dir" fetch -q --depth 1 "https://github.com/$name" "$commit"
        git -C "$dir" checkout -q FETCH_HEAD
        rm -rf "$dir/.git"
    fi
}

# Builds the sparse tree unless it is there.
sparse_tree() {
    if [ ! -d "$sparse" ]; then
        mkdir -p "$sparse.partial"
        git -C "$repo" archive HEAD | tar -x -C "$sparse.partial"
        for entry in $projects; do
            spec=${entry%:*}
            name=${spec%@*}
            dir=$sparse.partial/$(echo "$name" | tr / +)
            project_tree "$name" "${spec#*@}" "$dir"
            found=$(find "$dir" -name '*.rs' | wc -l)
            [ "$found" -eq "${entry##*:}" ] ||
                echo "warning: $name holds $found Rust files, not ${entry##*:}" >&2
        done
        sed -i 's|^cache = .*|cache = ["**/*.rs"]|; s|^metrics = .*|metrics = ["**/*.rs"]|' \
            "$sparse.partial/policy/dw-bounded-growth.toml"
        mv "$sparse.partial" "$sparse"
    fi
}

run_sparse() {
    sparse_tree
    echo "sparse: $(find "$sparse" -name '*.rs' | wc -l) Rust files," \
        "$(find "$sparse" -name '*.rs' -path '*/*+*/*' | wc -l) of them in the four projects"
    (cd "$sparse" && hyperfine -N -i --warmup 3 --runs 20 \
        "$dwlint check --format short" \
        "rg -c -g *.rs -e server: -e dw_ .")
    # hyperfine runs one command's runs, then the other's: under a load
    # that changes, they meet different loads. The same pair alternating
    # run by run, medians and their ratio:
    (cd "$sparse" && python3 "$repo/docs/bench-alternate.py" --runs 60 \
        "$dwlint check --format short" "rg -c -g '*.rs' -e server: -e dw_ .")
    echo "dwlint check --format short:"
    (cd "$sparse" && /usr/bin/time -v "$dwlint" check --format short 2>&1 >/dev/null |
        grep -E 'Maximum resident|Elapsed|User time|System time')
    echo "rg -c -g '*.rs' -e server: -e dw_ .:"
    (cd "$sparse" && /usr/bin/time -v rg -c -g '*.rs' -e server: -e dw_ . 2>&1 >/dev/null |
        grep -E 'Maximum resident|Elapsed|User time|System time')
}

run_dense() {
    dense=$work/dense
    [ -d "$dense" ] || "$target/release/examples/synthetic_tree" "$dense" 2201 dense
    (cd "$dense" && hyperfine -N -i --warmup 2 --runs 10 "$dwlint check" "$naive .")
    (cd "$dense" && /usr/bin/time -v "$dwlint" check 2>&1 >/dev/null |
        grep -E 'Maximum resident|Elapsed')
    # The Rust extractors alone (parser-free and the syn one it replaced),
    # and whether they agree on every file.
    cargo run -q --release --features syn-oracle --example rust_differential -- "$dense" | tail -2
}

run_dense_real() {
    real=$work/dense-real
    if [ ! -d "$real" ]; then
        # The real files come from the sparse tree's four projects.
        sparse_tree
        sources=
        for entry in $projects; do
            spec=${entry%:*}
            sources="$sources $sparse/$(echo "${spec%@*}" | tr / +)"
        done
        # shellcheck disable=SC2086 # one argument per project
        "$target/release/examples/synthetic_tree" "$real.partial" 2201 dense-real $sources
        mv "$real.partial" "$real"
    fi
    echo "dense-real: $(find "$real" -name '*.rs' | wc -l) Rust files," \
        "$(cat "$real"/crates/engine/src/*.rs | wc -c) bytes"
    (cd "$real" && "$dwlint" check --format json | grep -c '"code"' || true) |
        sed 's/^/findings (want 0): /'
    (cd "$real" && "$naive" .)
    (cd "$real" && hyperfine -N -i --warmup 2 --runs 10 "$dwlint check" "$naive .")
    echo "dwlint check:"
    (cd "$real" && /usr/bin/time -v "$dwlint" check 2>&1 >/dev/null |
        grep -E 'Maximum resident|Elapsed|User time|System time')
    echo "naive_parse .:"
    (cd "$real" && /usr/bin/time -v "$naive" . 2>&1 >/dev/null |
        grep -E 'Maximum resident|Elapsed|User time|System time')
}

run_big() {
    big=$work/big
    mkdir -p "$big/src" "$big/policy"
    cp "$repo/fixtures/clean/policy/dw-bounded-growth.toml" "$big/policy/"
    sed -i 's|^cache = .*|cache = ["src/**/*.rs"]|; s|^metrics = .*|metrics = ["src/**/*.rs"]|' \
        "$big/policy/dw-bounded-growth.toml"
    # Any Rust source will do; cargo's is used when the sparse tree exists.
    seed=$sparse/rust-lang+cargo/src/workspace/features.rs
    [ -f "$seed" ] || seed=$repo/src/scan/mod.rs
    : >"$big/src/huge.rs"
    while [ "$(stat -c %s "$big/src/huge.rs")" -lt 209715200 ]; do
        cat "$seed" >>"$big/src/huge.rs"
    done
    # One key at the very end, so the whole file is lexed and extracted.
    printf '\nfn signal_key(id: u64) -> String {\n    format!("server:signal:{id}")\n}\n' \
        >>"$big/src/huge.rs"
    for limit in 16M 1G; do
        (cd "$big" && /usr/bin/time -v "$dwlint" check --format short --max-file-size "$limit" 2>&1 |
            grep -E 'huge.rs|Maximum resident|Elapsed|User time|System time')
    done
    rm -f "$big/src/huge.rs"
}

for part in $parts; do
    case $part in
    sparse) run_sparse ;;
    dense) run_dense ;;
    dense-real) run_dense_real ;;
    big) run_big ;;
    *)
        echo "unknown part \`$part\`: sparse, dense, dense-real or big" >&2
        exit 2
        ;;
    esac
done
