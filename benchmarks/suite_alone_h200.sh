#!/bin/bash
# The example package's full suite alone on a GPU, cold then warm Triton cache, seconds per test file (docs/benchmarks.md "Final acceptance on one H200"). $OUT: where the logs go.
cd "$(dirname "$0")/../examples"; export PYTHONPATH=$PWD/..
export TRITON_CACHE_DIR=/tmp/tc_suite
rm -rf $TRITON_CACHE_DIR
nvidia-smi --query-gpu=name,memory.used --format=csv
for run in cold warm; do
  s=$(date +%s.%N)
  python3 -m pytest tests -q -p no:cacheprovider --durations=25 --junitxml=$OUT/suite_$run.xml > $OUT/suite_$run.log 2>&1
  echo "$run rc=$? wall=$(python3 -c "print(round($(date +%s.%N)-$s,1))")"
  tail -3 $OUT/suite_$run.log
done
python3 - <<'PY'
import xml.etree.ElementTree as ET, collections, os
for run in ("cold","warm"):
    t = ET.parse(os.environ["OUT"]+f"/suite_{run}.xml")
    by = collections.Counter()
    for c in t.iter("testcase"):
        by[c.get("classname")] += float(c.get("time"))
    print(run, {k: round(v,1) for k,v in by.most_common()})
PY
