#!/usr/bin/env bash
# docs/exports.md's feature matrix is what codegen does: tools/export_matrix.py recomputes it (one forced
# plan per feature, codegen, per target written / noted / refused) and it must appear there verbatim.
#   bash tests/exports/matrix_test.sh PLANNER SOURCE_DIR
exec python3 "$2/tools/export_matrix.py" "$1" "$2" --check "$2/docs/exports.md"
