#!/usr/bin/env bash
# The main job on the bundled real graph (kegg, 3,617 vertices, 100,000 query pairs):
# set up .venv, build the index (GPU if present, else CPU), answer the pairs, check the count.
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/setup.sh
out=${OUT_DIR:-quickstart-out}
mkdir -p "$out"
.venv/bin/distgrail index bundled -o "$out/kegg.h5" --dims 5
.venv/bin/distgrail query "$out/kegg.h5" bundled -o "$out/kegg.answers"
got=$(grep -c '^1$' "$out/kegg.answers" || true)
expected=20072
if [ "$got" != "$expected" ]; then
    echo "quickstart: FAILED: $got reachable pairs, expected $expected" >&2
    exit 1
fi
echo "quickstart: OK: $got of 100,000 pairs reachable, as the GRAIL benchmark says (index: $(cd "$out" && pwd)/kegg.h5)"
# the distgrail command lives in .venv/bin, which is not on PATH until the environment is activated
echo "quickstart: the distgrail command is in .venv/bin, not on PATH: for the README's examples, first run"
printf '    source %q\n' "$PWD/.venv/bin/activate"
