#!/usr/bin/env bash
# Wall-clock and peak RSS of `dwlint check` on the adversarial shapes of
# tests/gate/scaling.rs at 1, 2 and 4 MB, and on a 50 MB file of each language
# (docs/performance.md, "Linear on any input"). Usage:
#   docs/bench-scaling.sh [DWLINT_BINARY] [WORK_DIR]
# Needs python3 and GNU time (/usr/bin/time). Prints one line per run:
# shape, language, size, seconds, peak RSS in KB.
set -euo pipefail
bin=${1:-target/release/dwlint}
work=${2:-/tmp/dw-scaling}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work"
policy="$work/policy.toml"
printf 'schema_version = 1\n[sources]\ncache = ["**/*"]\nmetrics = ["**/*"]\n' > "$policy"

run() { # dir label
  /usr/bin/time -f "%e %M" -o "$work/time" "$bin" check "$1" --policy "$policy" \
    --max-file-size 1G --format short > /dev/null 2>&1 || true
  echo "$2 $(cat "$work/time")"
}

python3 - "$work" "$root" <<'PY'
import os, sys
work, root = sys.argv[1], sys.argv[2]
wrap = {
    "rs": 'const X: &str = "{}";\n', "go": 'package x\nvar X = "{}"\n',
    "js": 'const x = "{}";\n', "ts": 'const x = "{}";\n', "py": 'x = "{}"\n',
    "php": '<?php\n$x = "{}";\n', "sh": "echo {}\n", "yml": "k: {}\n", "txt": "{}\n",
}
def shape(name, size):
    if name == "mid-word":
        return "adw_" * (size // 4) + "server:x:"
    if name == "many-sites":
        return "-dw_x" * (size // 5) + "server:x:"
    depth = size // 6
    return "${A:-" * depth + "server:x:" + "}" * depth
for name in ["mid-word", "many-sites", "nested-defaults"]:
    for mb in [1, 2, 4]:
        for lang, w in wrap.items():
            d = f"{work}/{name}-{mb}M-{lang}"
            os.makedirs(d, exist_ok=True)
            open(f"{d}/f.{lang}", "w").write(w.replace("{}", shape(name, mb << 20)))
# 50 MB of each language: the extractors' samples (and a Rust source of the
# engine) with their metric prefix and namespace renamed so that nothing is
# reported, and one cache key on the first line so the file is extracted.
first = {"go": 'package x\nvar K = "server:k:"\n', "php": '<?php $k = "server:k:";\n',
         "py": 'K = "server:k:"\n', "sh": 'K="server:k:"\n', "ts": 'const K = "server:k:";\n',
         "yml": 'k: "server:k:"\n', "rs": 'const K: &str = "server:k:";\n'}
for lang, head in first.items():
    src = (f"{root}/crates/dwengine/src/polling.rs" if lang == "rs"
           else f"{root}/tests/data/extractors/sample.{lang}")
    body = open(src).read().replace("dw_", "zz_").replace("server:", "sevrer:")
    body = body.replace("<?php", "")
    d = f"{work}/50M-{lang}"
    os.makedirs(d, exist_ok=True)
    open(f"{d}/big.{lang}", "w").write(head + body * (50_000_000 // len(body)))
PY
for d in "$work"/*-[124]M-*; do run "$d" "$(basename "$d")"; done
for d in "$work"/50M-*; do run "$d" "$(basename "$d")"; done
